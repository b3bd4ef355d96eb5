"""A node's idle_action, for real: a watched node of stand-in GPUs, a job that runs a while,
then the node idle. The command runs once, idle_paid_s after the job ended (a live job held it
off), its output goes into the timeline and a real receiver hears it. Real CLI, watcher, job
and command."""

from __future__ import annotations

import json

import pytest

from support.watch import events, gpudeck_watch, stop_watch, wait_state

pytestmark = pytest.mark.system  # a detached watcher, its job, its idle_action and a receiver


@pytest.mark.timeout(180)
def test_the_idle_action_runs_once_after_the_last_job_and_idle_paid_s(tmp_path, home, receiver):
    ran = tmp_path / "stopped"
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'''
[alerts]
idle_paid_s = 2

[[notify]]
url = "{receiver.url}"
events = ["idle_action"]

[[nodes]]
name = "gpu1"
local = true
home = "{home}"
nvml = false
interval = 0.2
simulate_gpus = "2xH200:141"
idle_action = "date +%s.%N >> '{ran}'; echo instance i-0b2 stopping"

[[jobs]]
name = "warmup"
node = "gpu1"
command = ["sleep", "3"]
''')
    f = ("-f", str(fleet))
    try:
        # the job first: a watcher started on an empty node may act before a slow launch comes
        for args in (("launch", "warmup"), ("watch", "start", "--supervise", "none")):
            r = gpudeck_watch(*args, *f)
            assert r.returncode == 0, r.stdout + r.stderr
        end = wait_state(home, "warmup", lambda s: s.get("state") == "exited", 60, what="the job to end")
        got = receiver.wait(lambda ms: [m for m in ms if m.get("kind") == "idle_action"], 60,
                            what="the idle_action notification")
        m = got[0]
        assert m["details"]["exit_code"] == 0 and m["details"]["output"] == "instance i-0b2 stopping", m
        assert "idle_action on gpu1 (every GPU (2) idle for " in m["message"]
        # it ran once, and only idle_paid_s after the job (alive until then) ended
        (when,) = [float(x) for x in ran.read_text().split()]
        assert when >= end["ended_at"] + 2 - 0.2  # idle_paid_s, give or take the tick (interval) that saw it end
        started = [e for e in events(home) if e["kind"] == "action" and e["details"].get("action") == "idle_action"]
        assert len(started) == 1
        r = gpudeck_watch("events", "--json", "--since", "1h", *f)
        kinds = [json.loads(line)["kind"] for line in r.stdout.splitlines()]
        assert kinds.count("idle_action") == 1
    finally:
        stop_watch(home)
