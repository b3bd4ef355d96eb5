"""The tiers' rules, as a developer meets them: a pytest run of its own over a tests/ tree of
each tier, with the suite's rules (tests/support/tiers.py), says which test broke which rule."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from contextlib import contextmanager

from support import ROOT

CONFTEST = "from support.tiers import pytest_collection_modifyitems, unmarked_tests_start_nothing  # noqa: F401\n"
INI = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\nmarkers =\n    system: starts a process\n"


def run_pytest(root, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not an xdist worker's
    env["PYTHONPATH"] = str(ROOT / "tests")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args], cwd=root,
                          env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def write_tree(root, files: dict[str, str]) -> None:
    (root / "pytest.ini").write_text(INI)
    (root / "tests").mkdir()
    (root / "tests" / "conftest.py").write_text(CONFTEST)
    for name, text in files.items():
        path = root / "tests" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("import asyncio, socket, time\n\n" + text)


@contextmanager
def socket_server():
    """A listening socket on loopback: what connects is accepted by the backlog alone."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


def test_a_unit_test_that_connects_or_sleeps_fails_naming_it_and_the_other_tiers_may(tmp_path):
    with socket_server() as port:
        write_tree(tmp_path, {
            "unit/test_connects.py": f"def test_tcp():\n    socket.create_connection(('127.0.0.1', {port})).close()\n",
            "unit/test_sleeps.py": ("def test_time_sleep():\n    time.sleep(0.06)\n\n\n"
                                    "async def test_asyncio_sleep():\n    await asyncio.sleep(0.06)\n"),
            "unit/test_fine.py": ("def test_a_socketpair_and_a_short_wait():\n"
                                  "    a, b = socket.socketpair()\n    a.sendall(b'x')\n    assert b.recv(1) == b'x'\n"
                                  "    time.sleep(0.01)\n"),
            "tui/test_pilot.py": "async def test_a_pilot_may_wait():\n    await asyncio.sleep(0.06)\n",
            "tui/test_pilot_connects.py": (f"def test_but_not_connect():\n"
                                           f"    socket.create_connection(('127.0.0.1', {port})).close()\n"),
            "system/test_node.py": f"def test_may_connect():\n    socket.create_connection(('127.0.0.1', {port})).close()\n",
        })
        r = run_pytest(tmp_path)
        # system/ carries the marker without saying so: `-m system` selects it
        marked = run_pytest(tmp_path, "-m", "system", "tests/system", "tests/unit/test_fine.py")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "ERROR tests/unit/test_connects.py::test_tcp" in out, out
    assert f"a connection to ('127.0.0.1', {port})" in out, out
    assert "ERROR tests/unit/test_sleeps.py::test_time_sleep" in out and "a sleep of 0.06 s (time.sleep)" in out, out
    assert ("ERROR tests/unit/test_sleeps.py::test_asyncio_sleep" in out
            and "a sleep of 0.06 s (asyncio.sleep)" in out), out
    assert "ERROR tests/tui/test_pilot_connects.py::test_but_not_connect" in out, out
    for ok in ("unit/test_fine.py::test_a_socketpair_and_a_short_wait", "tui/test_pilot.py::test_a_pilot_may_wait",
               "system/test_node.py::test_may_connect"):
        assert f"PASSED tests/{ok}" in out and f"ERROR tests/{ok}" not in out, out
    assert marked.returncode == 0 and "1 passed, 1 deselected" in marked.stdout, marked.stdout + marked.stderr


def test_a_test_marked_system_in_the_unit_tier_is_refused_before_anything_runs(tmp_path):
    write_tree(tmp_path, {"unit/test_misplaced.py": ("import pytest\n\n\n@pytest.mark.system\n"
                                                     "def test_starts_an_agent():\n    pass\n")})
    r = run_pytest(tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 4, out  # a usage error
    assert "tests marked `system` in a tier that starts nothing" in out, out
    assert "tests/unit/test_misplaced.py::test_starts_an_agent" in out and " passed" not in out, out


def test_the_tests_of_one_xdist_group_run_on_one_worker_one_at_a_time(tmp_path):
    """What cannot be shared (a fixture named in tests/support/tiers.py, here `netns`) stays on
    one worker under `--dist loadgroup`; the rest spreads over the workers. A pytest whose node
    ids xdist cannot mark with the group (pytest-xdist#1386) spreads them all: this fails."""
    record = tmp_path / "workers"
    record.mkdir()
    body = ("import os, pathlib, pytest\n\n\n@pytest.fixture\ndef netns():\n    return 1\n\n\n"
            "@pytest.mark.parametrize('i', range(6))\ndef test_grouped(netns, i):\n"
            f"    pathlib.Path({str(record)!r}, f'grouped-{{i}}').write_text(os.environ['PYTEST_XDIST_WORKER'])\n\n\n"
            "@pytest.mark.parametrize('i', range(6))\ndef test_free(i):\n"
            f"    pathlib.Path({str(record)!r}, f'free-{{i}}').write_text(os.environ['PYTEST_XDIST_WORKER'])\n")
    write_tree(tmp_path, {"system/test_groups.py": body})
    r = run_pytest(tmp_path, "-n", "2", "--dist", "loadgroup")
    assert r.returncode == 0 and "12 passed" in r.stdout, r.stdout + r.stderr
    grouped = {p.read_text() for p in record.glob("grouped-*")}
    assert len(grouped) == 1, f"the netns group ran on {sorted(grouped)}"
