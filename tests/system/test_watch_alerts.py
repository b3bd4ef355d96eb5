"""What the watcher notices on its own: a stalled job (restarted under restart_on_stall), a
deadline the job will miss once its rate drops, and GPU health from the stand-in GPUs."""

from __future__ import annotations

import json
import time

import pytest

from support import command_job
from support.watch import Receiver, events

pytestmark = pytest.mark.system  # a real agent and a webhook receiver

PROGRESS = 'printf \'{"done": %d, "total": %d}\' $1 $2 > "$GPUDECK_PROGRESS_FILE.tmp"; ' \
           'mv "$GPUDECK_PROGRESS_FILE.tmp" "$GPUDECK_PROGRESS_FILE"'


def _script(body: str) -> str:
    return f"report() {{ {PROGRESS.replace('$1', '$1').replace('$2', '$2')}; }}; {body}"


def test_a_stalled_job_is_killed_and_restarted(home, start_agent, reap_jobs):
    a = start_agent(interval=0.2)
    # attempt 1 reports 3 of 10 and hangs; attempt 2 (the restart) finishes
    body = ('if [ "$GPUDECK_ATTEMPT" = 1 ]; then for i in 1 2 3; do report $i 10; sleep 0.1; done; sleep 600; '
            'else report 10 10; fi')
    a.ok("configure", jobs=[command_job("hang", _script(body), restart_on_stall="2s", max_restarts=2)])
    a.ok("launch", job="hang")
    snap = a.wait_snapshot(lambda s: a.job(s, "hang")["state"] == "exited", 60, what="the restart to finish")
    job = a.job(snap, "hang")
    assert job["attempt"] == 2 and job["restarts"] == 1 and job["restart"] == "never"
    assert "stalled for" in job["restart_note"]
    kinds = [e["kind"] for e in events(home) if e.get("job") == "hang"]
    assert kinds.index("stalled") < kinds.index("restarted") < kinds.index("finished")
    (restarted,) = [e for e in events(home) if e["kind"] == "restarted"]
    assert "after a verified kill" in restarted["message"]
    audit = [json.loads(line) for line in (home / "audit.log").read_text().splitlines()]
    assert [a_["action"] for a_ in audit if a_["job"] == "hang"][-4:] == ["kill", "relaunch", "restart", "ended"]
    assert any(a_["action"] == "kill" and a_.get("ok") for a_ in audit)


def test_a_deadline_alert_when_the_rate_drops(home, start_agent, reap_jobs):
    rx = Receiver()
    try:
        a = start_agent(interval=0.2)
        deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 150))
        # fast at first (finish well before the deadline), then a trickle (far after it)
        body = "i=0; while [ $i -lt 400 ]; do i=$((i+40)); report $i 10000; sleep 0.2; done; " \
               "while true; do i=$((i+1)); report $i 10000; sleep 0.2; done"
        a.ok("configure", jobs=[command_job("slow", _script(body), deadline=deadline)],
             watch={"notify": [{"url": rx.url, "events": ["deadline"]}]})
        a.ok("launch", job="slow")
        snap = a.wait_snapshot(lambda s: any(al["kind"] == "deadline" for al in s["alerts"]), 60,
                               what="a deadline alert")
        (alert,) = [al for al in snap["alerts"] if al["kind"] == "deadline" and "after its deadline" in al["message"]]
        assert alert["job"] == "slow"
        rx.wait(lambda ms: any(m["kind"] == "deadline" and m["job"] == "slow" for m in ms), 30, what="deadline")
        assert any(e["kind"] == "deadline" for e in events(home))
    finally:
        rx.stop()


def test_gpu_health_alerts_from_the_stand_in_gpus(home, start_agent, reap_jobs):
    from gpudeck.agents.simgpu import set_health

    rx = Receiver()
    try:
        a = start_agent(interval=0.2, extra_args=("--simulate-gpus", "2xH200:141"))
        a.ok("configure", jobs=[command_job("train", "sleep 120", gpus=[1])],
             watch={"notify": [{"url": rx.url, "events": ["gpu_health", "resolved"]}], "alerts": {"idle_gpu_s": 1}})
        a.ok("launch", job="train")
        set_health(home, 1, xid=[79], ecc_uncorrected=2, throttle=["hw_thermal"])
        want = {"gpu_xid", "gpu_ecc", "gpu_throttle", "gpu_idle"}

        def health(s):
            return {al["kind"]: al for al in s["alerts"] if al["kind"] in want}
        snap = a.wait_snapshot(lambda s: set(health(s)) == want, 30, what=f"alerts {want}")
        for kind, al in health(snap).items():
            assert al["gpu"] == 1 and al["job"] == "train", al
            assert kind == "gpu_idle" or al["message"].startswith("(simulated) GPU 1")
        assert "XID error 79" in health(snap)["gpu_xid"]["message"]
        rx.wait(lambda ms: len([m for m in ms if m["kind"] == "gpu_health"]) == 4, 30, what="four gpu_health")
        set_health(home, 1, ecc_uncorrected=0, throttle=[])
        rx.wait(lambda ms: len([m for m in ms if m["kind"] == "resolved"]) == 2, 30, what="two resolved")
        resolved = " ".join(m["message"] for m in rx.messages if m["kind"] == "resolved")
        assert "ECC" in resolved and "hw_thermal" in resolved
        timeline = [e for e in events(home) if e["kind"] in ("gpu_health", "resolved")]
        assert len(timeline) == 6 and all(e["gpu"] == 1 for e in timeline)
    finally:
        rx.stop()
