"""Fixtures only: the helpers they use live in the support package (tests/support/)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent


def pytest_sessionstart(session) -> None:
    """`gpudeck.*` is whichever checkout last ran `pip install -e .` into the venv: a second
    worktree sharing that venv would test the first one's code, and pass or fail for it. So
    the session stops, naming both, before any test runs."""
    for part in ("agents", "console", "remote"):
        spec = importlib.util.find_spec(f"gpudeck.{part}")
        found = Path(spec.origin).resolve().parent if spec is not None and spec.origin else None
        if found != CHECKOUT / part:
            pytest.exit(
                f"gpudeck.{part} is imported from {found or 'nowhere (gpudeck is not installed)'}, not from this "
                f"checkout ({CHECKOUT / part}): the tests would test another checkout's code. Install this one "
                f"into its own venv (make venv, or `pip install -e {CHECKOUT}`) and run the tests with that venv's "
                f"python", returncode=pytest.ExitCode.USAGE_ERROR)


# asyncssh looks for its optional native libraries (liboqs, libnacl) when it is first imported,
# through ctypes.util.find_library, which runs ldconfig and gcc: imported here, before any
# test's guard (support/tiers.py) is armed, so that the first unmarked test to import it is not charged
# with starting those processes.
import asyncssh  # noqa: E402,F401

from support.core import AgentProc, reap  # noqa: E402
from support.generate import sim_engines  # noqa: F401  (a fixture, for every test)
from support.s3 import _moto_server, moto_s3  # noqa: F401  (fixtures, for every test)
from support.slurm import make_slurm_cluster, slurm_cluster  # noqa: F401  (fixtures, for every test)
from support.tiers import pytest_collection_modifyitems  # noqa: F401  (the tiers' rules: docs/development.md)
from support.tiers import unmarked_tests_start_nothing  # noqa: F401  (a fixture, for every test)
from support.watch import Receiver


@pytest.fixture(autouse=True)
def state_home(tmp_path, monkeypatch) -> Path:
    """The console's own state ($XDG_STATE_HOME: when it last looked at each fleet) under the
    test's directory, never the user's."""
    path = tmp_path / "xdg-state"
    monkeypatch.setenv("XDG_STATE_HOME", str(path))
    # a `watch start` registers no supervisor (no line in this machine's crontab) unless the
    # test asks for one (tests/system/test_watch_supervised.py)
    monkeypatch.setenv("GPUDECK_SUPERVISE", "none")
    return path


@pytest.fixture
def home(tmp_path) -> Path:
    h = tmp_path / "gpudeck-home"
    h.mkdir()
    return h


@pytest.fixture
def start_agent(home):
    agents: list[AgentProc] = []

    def start(**kw) -> AgentProc:
        a = AgentProc(kw.pop("home", home), **kw)
        agents.append(a)
        return a

    yield start
    for a in reversed(agents):  # relays first: an agent stays while a relay is connected
        a.close()


@pytest.fixture
def reap_jobs(home):
    """Whatever the test did, its jobs are gone after it."""
    yield
    reap(home)


@pytest.fixture
def fleet_home(tmp_path):
    """An agent home for a console test; whatever ran in it is reaped after."""
    home = tmp_path / "home"
    home.mkdir()
    yield home
    reap(home)


@pytest.fixture
def receiver():
    """A webhook receiver on loopback that records each message."""
    r = Receiver()
    yield r
    r.stop()
