"""The tiers of the suite (docs/development.md), as pytest sees them: the folder a test sits in
under tests/ says what it may do. A plugin (tests/conftest.py imports its hook and fixture),
so that tests/system/test_tiers.py can run a pytest of its own under the same rules."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from pathlib import Path

import pytest

# The tiers (docs/development.md): the folder a test sits in says what it may do. unit/ and tui/
# start nothing (the guard below fails a test of theirs that does); system/ and e2e/ start
# processes and servers, so each of their tests carries the `system` marker without saying so.
TIERS_STARTING_NOTHING = ("unit", "tui")
TIERS_STARTING_PROCESSES = ("system", "e2e")
# A unit test uses no real time: a sleep over this is noted (a poll of a few ms is not).
UNIT_SLEEP_LIMIT_S = 0.05

# What cannot be shared between two xdist workers: each test that needs one of these runs in
# that group's one worker (`--dist loadgroup`), one test at a time.
# - slurm: one Slurm cluster per machine (tests/support/slurm.py: fixed ports, one slurmctld);
# - netns: network namespaces, whose subnet is picked by looking at what is in use
#   (tests/support/ssh.py `_free_subnet`): two workers could pick the same one;
# - crontab: real crontabs of throwaway users made with useradd, and the cron daemon;
# - llama: llama-server takes every core but one, and its tests wait on it with timeouts.
# tmux needs none: each test's tmux server has a socket of its own (named with the pid), and
# no test writes the shared cache (the llama-server build and the wheelhouse are built by make
# before pytest; the tests only read them).
XDIST_GROUPS_BY_FIXTURE = {
    "slurm_cluster": "slurm", "make_slurm_cluster": "slurm",
    "netns": "netns", "jump": "netns", "certs": "netns",
    "llama_server": "llama",
}
XDIST_GROUPS_BY_TEST = {
    "e2e/test_llama_server_kind.py": "llama",
    "system/test_watch_supervised.py": "crontab",
    # its two module fixtures each start a probe that imports sglang (about 20 s on a busy machine):
    # once on one worker, not once on each worker that draws one of the module's tests
    "system/test_engine_sources.py": "sglang-probe",
    "system/test_watch_truth.py::test_two_homes_registered_with_cron_at_once_both_keep_their_lines": "crontab",
}


def tier_of(item) -> str:
    """unit, tui, system or e2e: the folder under the root's tests/ the test sits in."""
    tests = item.config.rootpath / "tests"
    path = Path(item.path).resolve()
    return path.relative_to(tests).parts[0] if path.is_relative_to(tests) else ""


@pytest.hookimpl(tryfirst=True)  # before `-m` selects and before xdist reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    misplaced = []
    for item in items:
        tier = tier_of(item)
        if tier in TIERS_STARTING_PROCESSES:
            item.add_marker(pytest.mark.system)
        elif item.get_closest_marker("system"):
            misplaced.append(item.nodeid)
        where = item.nodeid.split("/", 1)[1] if "/" in item.nodeid else item.nodeid
        group = next((g for key, g in XDIST_GROUPS_BY_TEST.items()
                      if where == key or where.startswith(key + "::") or where.startswith(key + "[")), None)
        group = group or next((g for fx, g in XDIST_GROUPS_BY_FIXTURE.items() if fx in item.fixturenames), None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    if misplaced:
        raise pytest.UsageError("tests marked `system` in a tier that starts nothing (unit/, tui/): move them to "
                                "tests/system/ or tests/e2e/: " + ", ".join(misplaced))


@pytest.fixture(autouse=True)
def unmarked_tests_start_nothing(request, monkeypatch):
    """`make check` runs the unit tier (and `make tui` the pilots), and they stay fast only if
    none of their tests starts a process, opens a connection or waits in real time. So such a
    test is watched: each process it starts (through subprocess.Popen, which subprocess.run and
    asyncio's subprocesses use too), each socket it listens on or connects (a socketpair() is
    made connected and is fine) and, in the unit tier, each sleep over 50 ms (time.sleep,
    asyncio.sleep) is noted, and the test fails after it ran, naming them. Nothing is refused
    while it runs (a server refused in its own thread would hang the test instead)."""
    if request.node.get_closest_marker("system"):
        yield
        return
    started: list[str] = []
    popen_init, listen = subprocess.Popen.__init__, socket.socket.listen
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def noting_popen_init(self, args, *a, **kw):
        started.append(f"the process {str(args)[:200]}")
        popen_init(self, args, *a, **kw)

    def noting_listen(self, *a):
        started.append(f"a server on {self.getsockname()}")
        return listen(self, *a)

    def noting_connect(self, address):
        started.append(f"a connection to {address}")
        return connect(self, address)

    def noting_connect_ex(self, address):
        started.append(f"a connection to {address}")
        return connect_ex(self, address)

    monkeypatch.setattr(subprocess.Popen, "__init__", noting_popen_init)
    monkeypatch.setattr(socket.socket, "listen", noting_listen)
    monkeypatch.setattr(socket.socket, "connect", noting_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", noting_connect_ex)
    if tier_of(request.node) == "unit":
        sleep, asleep = time.sleep, asyncio.sleep

        def noting_sleep(seconds):
            if seconds > UNIT_SLEEP_LIMIT_S:
                started.append(f"a sleep of {seconds} s (time.sleep)")
            return sleep(seconds)

        def noting_asleep(delay, *a, **kw):
            if delay > UNIT_SLEEP_LIMIT_S:
                started.append(f"a sleep of {delay} s (asyncio.sleep)")
            return asleep(delay, *a, **kw)

        monkeypatch.setattr(time, "sleep", noting_sleep)
        monkeypatch.setattr(asyncio, "sleep", noting_asleep)
    yield
    if started:
        pytest.fail("a test that starts a process or a server, or connects to one, belongs to tests/system/ or "
                    f"tests/e2e/, and a unit test waits no real time (no sleep over {UNIT_SLEEP_LIMIT_S * 1000:.0f} "
                    "ms); this one did: " + "; ".join(started), pytrace=False)
