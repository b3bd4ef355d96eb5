"""A watcher killed during its own restart: the next one finishes it (the kill, then the
relaunch) and keeps the restart count; a kill -9 between the relaunch and its save never
resets the budget."""

from __future__ import annotations

import json
import os
import signal

import pytest

from support import pid_alive
from support.wait import wait_for

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("reap_jobs")]

# progress once, then nothing: a stall; SIGTERM ignored, so the restart's kill waits out its grace
STUBBORN = ("trap '' TERM; echo '{\"done\": 1, \"total\": 100}' > $GPUDECK_PROGRESS_FILE; "
            "while true; do sleep 0.2; done")


def _spec():
    return {"name": "stuck", "kind": "command", "command": ["sh", "-c", STUBBORN], "restart_on_stall": "2s",
            "max_restarts": 5, "kill_grace_s": 3}


def _audit(home, action):
    return [json.loads(ln) for ln in (home / "audit.log").read_text().splitlines()
            if json.loads(ln).get("action") == action and json.loads(ln).get("job") == "stuck"]


def test_a_watcher_killed_in_its_restarts_kill_is_followed_by_one_that_finishes_the_restart(start_agent, home):
    a = start_agent()
    a.ok("configure", jobs=[_spec()])
    first = a.ok("launch", job="stuck")
    wait_for(lambda: _audit(home, "kill-start"), 60, what="the stall restart's kill under way")
    os.kill(a.proc.pid, signal.SIGKILL)  # inside the kill's 3 s grace (the job's kill_grace_s)
    wait_for(lambda: not pid_alive(a.proc.pid), 10, what="the watcher gone")

    b = start_agent()
    b.ok("configure", jobs=[_spec()])
    b.wait_snapshot(lambda s: b.job(s, "stuck")["attempt"] >= 2, 60, what="attempt 2, started by the new watcher")
    restart = wait_for(lambda: _audit(home, "restart"), 30, what="the restart in the audit log")[0]
    assert restart["attempt"] == 2 and restart["restarts"] in (1, 2)  # counted (twice: no progress), not lost
    assert _audit(home, "kill-resume")  # the new watcher finished the kill first
    assert not pid_alive(first["pid"])


def test_a_kill_9_between_the_relaunch_and_its_save_never_resets_the_budget(start_agent, home):
    a = start_agent()
    spec = {"name": "stuck", "kind": "command", "command": ["sh", "-c", "exit 1"], "restart": "on-failure",
            "max_restarts": 5, "restart_backoff_s": 0}
    a.ok("configure", jobs=[spec])
    a.ok("launch", job="stuck")
    a.wait_snapshot(lambda s: a.job(s, "stuck")["restarts"] >= 1, 60, what="a first restart counted")
    a.ok("kill", job="stuck", grace_s=1)
    a.close()
    # what the disk holds when a watcher dies right after relaunching attempt n+1, before it saved:
    # the state of attempt n, its restart due, the relaunch aimed at n+1
    path = home / "jobs" / "stuck" / "restarts.json"
    st = json.loads(path.read_text())
    attempt = json.loads((home / "jobs" / "stuck" / "state.json").read_text())["attempt"]
    counted = st["restarts"]
    st.update(attempt=attempt - 1, ours=attempt, next_at=1.0, reason="failed (exit code 1)", weight=1)
    path.write_text(json.dumps(st))
    b = start_agent()
    b.ok("configure", jobs=[{**spec, "command": ["sh", "-c", "exec sleep 60"]}])
    snap = b.wait_snapshot(lambda s: b.job(s, "stuck")["restarts"] is not None, 30, what="the job's restart fields")
    assert b.job(snap, "stuck")["restarts"] == counted + 1  # that restart counted, the budget not reset
