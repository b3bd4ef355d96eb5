"""The outbound heartbeat: the watcher pings a push monitor (here a local receiver) at its
interval, /fail while a job has given up, plain again once it is fixed, nothing once the
watcher is dead, and again once a watcher is back. The URL is never printed."""

from __future__ import annotations

import json
import os
import signal
import statistics
import time

import pytest

from support import pid_alive
from support.watch import agent_pid, write_fleet
from support.cli import gpudeck
from support.wait import wait_for

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("reap_jobs")]

EVERY = 1.0


def _fleet(tmp_path, home, receiver, command: str):
    return write_fleet(tmp_path / "fleet.toml", home, f'''
        [[jobs]]
        name = "crash"
        command = "{command}"
        restart = "on-failure"
        max_restarts = 1
        restart_backoff_s = 0
    ''', notify=f'''
        [heartbeat]
        url = "http://127.0.0.1:{receiver.port}/ping/secret-token/{{node}}"
        every = {EVERY}
    ''')


def _pings(receiver, after: float, fail: bool = False) -> list[float]:
    return [t for t, path in list(receiver.gets)
            if t > after and path.startswith("/ping/secret-token/local") and path.endswith("/fail") == fail]


def test_pings_at_the_interval_fail_after_a_crash_loop_and_stop_with_the_watcher(tmp_path, home, receiver):
    fleet = _fleet(tmp_path, home, receiver, "exit 1")
    f = ["-f", str(fleet)]
    started = time.time()
    r = gpudeck("watch", "start", *f)
    assert "secret-token" not in r.stdout + r.stderr
    wait_for(lambda: len(_pings(receiver, started)) >= 4, 60, what="four pings")
    gaps = [b - a for a, b in zip(_pings(receiver, started), _pings(receiver, started)[1:])]
    print(f"\nping interval: median {statistics.median(gaps):.2f} s over {len(gaps)} gaps (every = {EVERY:g} s)")
    status = gpudeck("watch", "status", *f).stdout
    assert "heartbeat: http://127.0…/… every 1 s; last sent" in status and "HTTP 200" in status, status
    assert "secret-token" not in status and "secret-token" not in json.dumps(
        json.loads(gpudeck("watch", "status", "--json", *f).stdout))

    # a crash loop that gives up: /fail, and back to plain once the operator fixes the job
    gpudeck("launch", "crash", *f)
    failed_at = wait_for(lambda: _pings(receiver, started, fail=True), 90, what="a /fail ping")[0]
    assert "failing: gave_up" in gpudeck("watch", "status", *f).stdout
    _fleet(tmp_path, home, receiver, "exec sleep 600")
    gpudeck("launch", "crash", *f)
    wait_for(lambda: _pings(receiver, failed_at + 0.1), 60, what="plain pings again")

    # the watcher dies: the pings stop within one interval; a watcher back, they come back
    watcher = agent_pid(home)
    os.kill(watcher, signal.SIGKILL)
    wait_for(lambda: not pid_alive(watcher), 10, what="the watcher gone")
    dead_at = time.time()
    wait_for(lambda: time.time() > dead_at + 4 * EVERY, 10, what="four intervals")
    late = [t for t in receiver.gets if t[0] > dead_at + EVERY + 1.0]
    assert late == [], late
    back = time.time()
    gpudeck("watch", "start", *f)
    wait_for(lambda: _pings(receiver, back), 60, what="pings after the watcher is back")
    gpudeck("watch", "stop", *f)


def test_a_bad_heartbeat_table_names_the_key_never_the_url(tmp_path):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[heartbeat]\nurl = "https://hc-ping.com/secret-uuid"\nevery = -5\n')
    r = gpudeck("status", "-f", str(fleet), check=False)
    assert r.returncode == 2 and ":3:" in r.stderr and "'every'" in r.stderr and "secret-uuid" not in r.stderr
    fleet.write_text('[heartbeat]\nurl_env = "https://hc-ping.com/secret-uuid"\n')
    r = gpudeck("status", "-f", str(fleet), check=False)
    assert r.returncode == 2 and ":2:" in r.stderr and "secret-uuid" not in r.stderr, r.stderr
