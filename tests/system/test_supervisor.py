"""The job supervisor through a real agent process: launch, kill and verify, relaunch,
adoption after kill -9, reused pids, alerts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from support import command_job, pid_alive
from support.wait import wait_for

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("reap_jobs")]


def test_launch_reports_running_with_pid_and_log(start_agent, home):
    a = start_agent()
    a.ok("configure", jobs=[command_job("hello", "echo started; exec sleep 60", gpus=[0, 1],
                                        env={"GREETING": "hi"})])
    r = a.ok("launch", job="hello")
    assert r["attempt"] == 1
    snap = a.wait_snapshot(lambda s: a.job(s, "hello")["state"] == "running", what="running")
    job = a.job(snap, "hello")
    assert job["pid"] == r["pid"] == job["pgid"]
    # detached: its own session and process group, not the agent's
    assert os.getsid(r["pid"]) == r["pid"] and os.getpgid(r["pid"]) == r["pid"]
    assert os.getsid(r["pid"]) != os.getsid(a.proc.pid)
    child = wait_for(lambda: [k for k in psutil.Process(r["pid"]).children() if "logcap" not in " ".join(k.cmdline())],
                     what="child")[0]
    env = child.environ()
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["GREETING"] == "hi"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    wait_for(lambda: "started" in (home / "jobs/hello/job.log").read_text(), what="log line")
    state = json.loads((home / "jobs/hello/state.json").read_text())
    assert state["pid"] == r["pid"] and state["attempt"] == 1 and state["create_time"] > 0
    assert json.loads((home / "jobs/hello/spec.json").read_text())["gpus"] == [0, 1]


def test_second_launch_of_a_running_job_is_refused_and_agent_keeps_going(start_agent):
    a = start_agent()
    a.ok("configure", jobs=[command_job("once", "exec sleep 60")])
    first = a.ok("launch", job="once")
    r = a.request("launch", job="once")
    assert not r["ok"] and "already running" in r["error"] and str(first["pid"]) in r["error"]
    procs = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "60"]
             and os.getpgid(p.pid) == first["pid"]]
    assert len(procs) == 1
    assert a.ok("status")["jobs"][0]["state"] == "running"


def test_kill_of_a_job_whose_child_ignores_sigterm(start_agent, home):
    a = start_agent()
    # the wrapper dies on SIGTERM; the python child ignores it and must get SIGKILL
    script = (f"{sys.executable} -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "print(\"re\" + \"ady\", flush=True); time.sleep(600)'")
    a.ok("configure", jobs=[command_job("stubborn", script)])
    r = a.ok("launch", job="stubborn")
    wait_for(lambda: "ready" in (home / "jobs/stubborn/job.log").read_text().splitlines(), what="child ready")
    members = [p.pid for p in psutil.Process(r["pid"]).children(recursive=True)] + [r["pid"]]
    verdict = a.ok("kill", job="stubborn", grace_s=0.5)
    assert verdict["ok"], verdict
    assert verdict["signal"] == "SIGKILL"
    assert verdict["survivors"] == [] and verdict["gpu_holders"] == []
    assert set(members) <= set(verdict["pids"])
    assert not any(pid_alive(p) for p in members)
    snap = a.wait_snapshot(lambda s: a.job(s, "stubborn")["state"] == "killed", what="killed state")
    assert not any(al["kind"] == "job_died" for al in snap["alerts"])  # a kill is not a death
    audit = [json.loads(l) for l in (home / "audit.log").read_text().splitlines()]
    assert [e["action"] for e in audit if e["job"] == "stubborn"][-2:] == ["kill-start", "kill"]


def test_kill_reaches_a_child_that_left_the_process_group(start_agent, home):
    a = start_agent()
    a.ok("configure", jobs=[command_job("escaper", "setsid sleep 600 & echo $! > escaped.pid; wait")])
    a.ok("launch", job="escaper")
    pidfile = home / "jobs/escaper/escaped.pid"
    escaped = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="escaped pid"))
    verdict = a.ok("kill", job="escaper", grace_s=2)
    assert verdict["ok"], verdict
    assert escaped in verdict["pids"]
    wait_for(lambda: not pid_alive(escaped), what="escaped child gone")


def test_kill_of_a_job_that_already_exited(start_agent):
    a = start_agent()
    a.ok("configure", jobs=[command_job("quick", "exit 0")])
    a.ok("launch", job="quick")
    a.wait_snapshot(lambda s: a.job(s, "quick")["state"] == "exited", what="exited")
    verdict = a.ok("kill", job="quick")
    assert verdict["ok"] and verdict["already"] == "exited"
    assert "already ended" in verdict["message"]


def test_exit_code_failed_state_and_job_died_alert(start_agent):
    a = start_agent()
    a.ok("configure", jobs=[command_job("crash", "echo boom >&2; exit 3")])
    a.ok("launch", job="crash")
    snap = a.wait_snapshot(lambda s: a.job(s, "crash")["state"] == "failed", what="failed")
    assert a.job(snap, "crash")["exit_code"] == 3
    died = [al for al in snap["alerts"] if al["kind"] == "job_died"]
    assert died and died[0]["job"] == "crash" and "exit code 3" in died[0]["message"]
    logs = a.ok("logs", job="crash", lines=5)
    assert "boom" in logs["text"]


def test_relaunch_increments_attempt_and_runs_the_fleet_files_version(start_agent, home):
    a = start_agent()
    a.ok("configure", jobs=[command_job("again", "echo attempt $GPUDECK_ATTEMPT; exec sleep 60")])
    assert a.ok("launch", job="again")["attempt"] == 1
    # the fleet file changed: the job's row says what a relaunch changes, and the relaunch runs
    # the file's version (as launch does) and answers what changed
    reply = a.ok("configure", jobs=[command_job("again", "echo changed; exec sleep 60")])
    change = "command: sh -c 'echo attempt $GPUDECK_ATTEMPT; exec sleep 60' -> sh -c 'echo changed; exec sleep 60'"
    assert reply["changed"] == {"again": [change]}
    snap = a.wait_snapshot(lambda s: a.job(s, "again")["spec_changes"], what="the change on the job's row")
    assert a.job(snap, "again")["spec_changes"] == [change]
    r = a.ok("relaunch", job="again", grace_s=1)
    assert r["attempt"] == 2 and r["kill"]["ok"] and r["changed"] == [change]
    snap = a.wait_snapshot(lambda s: a.job(s, "again")["attempt"] == 2 and a.job(s, "again")["state"] == "running")
    assert a.job(snap, "again")["pid"] == r["pid"] and a.job(snap, "again")["spec_changes"] == []
    wait_for(lambda: "changed" in (home / "jobs/again/job.log").read_text(), what="the new command's output")
    # the same spec again: nothing changed, nothing said
    again = a.ok("relaunch", job="again", grace_s=1)
    assert again["attempt"] == 3 and again["changed"] == []


def test_agent_killed_with_sigkill_and_restarted_readopts_the_job(start_agent, home):
    a = start_agent()
    a.ok("configure", jobs=[command_job("survivor", "exec sleep 300")])
    r = a.ok("launch", job="survivor")
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    assert pid_alive(r["pid"])  # jobs do not belong to the agent
    b = start_agent()
    snap = b.wait_snapshot(lambda s: any(j["name"] == "survivor" for j in s["jobs"]), what="job listed")
    job = b.job(snap, "survivor")
    assert job["state"] == "running" and job["pid"] == r["pid"] and job["attempt"] == 1
    # the new agent can still kill what the old one launched
    verdict = b.ok("kill", job="survivor", grace_s=2)
    assert verdict["ok"] and verdict["signal"] == "SIGTERM"
    assert not pid_alive(r["pid"])
    assert b.wait_snapshot(lambda s: b.job(s, "survivor")["state"] == "killed")


def test_a_reused_pid_does_not_fool_adoption(start_agent, home):
    # a stranger process, with the pid recorded for the job but another start time
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        d = home / "jobs/ghost"
        d.mkdir(parents=True)
        (d / "spec.json").write_text(json.dumps(command_job("ghost", "sleep 1")))
        start = psutil.Process(stranger.pid).create_time()
        (d / "state.json").write_text(json.dumps({
            "name": "ghost", "state": "running", "attempt": 4, "pid": stranger.pid, "pgid": stranger.pid,
            "create_time": start - 3600.0, "started_at": time.time() - 3600}))
        a = start_agent()
        snap = a.wait_snapshot(lambda s: any(j["name"] == "ghost" for j in s["jobs"]))
        assert a.job(snap, "ghost")["state"] == "lost"
        verdict = a.ok("kill", job="ghost", grace_s=0.5)
        assert verdict["ok"] and verdict["already"] == "lost"
        assert stranger.poll() is None, "kill must never touch a process that only shares the pid"
        # and the same pid with the right start time is adopted
        state = json.loads((d / "state.json").read_text())
        state.update(state="running", create_time=start)
        (d / "state.json").write_text(json.dumps(state))
        a.close()  # a new agent reads it (a second console would share a's view instead)
        b = start_agent()
        snap = b.wait_snapshot(lambda s: any(j["name"] == "ghost" for j in s["jobs"]))
        assert b.job(snap, "ghost")["state"] == "running"
    finally:
        stranger.kill()
        stranger.wait()


def test_stalled_job_alert(start_agent):
    a = start_agent()
    script = 'echo \'{"done": 5, "total": 100}\' > "$GPUDECK_PROGRESS_FILE"; exec sleep 60'
    a.ok("configure", jobs=[command_job("stuck", script, stall_after_s=1)])  # the least a spec takes (JOB_RANGES)
    a.ok("launch", job="stuck")
    snap = a.wait_snapshot(lambda s: any(al["kind"] == "stalled" for al in s["alerts"]), what="stalled alert")
    alert = next(al for al in snap["alerts"] if al["kind"] == "stalled")
    assert alert["job"] == "stuck"
    assert a.job(snap, "stuck")["progress"]["done"] == 5


def test_two_jobs_given_one_gpu_is_an_alert(start_agent):
    a = start_agent()
    a.ok("configure", jobs=[command_job("x", "exec sleep 60", gpus=[0]), command_job("y", "exec sleep 60", gpus=[0, 1])])
    a.ok("launch", job="x")
    a.ok("launch", job="y")
    snap = a.wait_snapshot(lambda s: any(al["kind"] == "shared_gpu" for al in s["alerts"]), what="shared gpu")
    alert = next(al for al in snap["alerts"] if al["kind"] == "shared_gpu")
    assert alert["gpu"] == 0 and "x" in alert["message"] and "y" in alert["message"]


def test_logs_tail_and_follow_offset(start_agent, home):
    a = start_agent()
    a.ok("configure", jobs=[command_job("talker", "for i in $(seq 1 200); do echo line $i; done; exec sleep 60")])
    a.ok("launch", job="talker")
    wait_for(lambda: "line 200" in (home / "jobs/talker/job.log").read_text(), what="200 lines")
    r = a.ok("logs", job="talker", lines=3)
    assert r["text"].splitlines() == ["line 198", "line 199", "line 200"]
    more = a.ok("logs", job="talker", offset=r["offset"])
    assert more["text"] == "" and more["offset"] == r["offset"]
    r = a.request("logs", job="nope")
    assert not r["ok"] and "unknown job 'nope'" in r["error"]


def test_a_kill_interrupted_by_the_agent_dying_is_finished_by_the_next_agent(start_agent):
    a = start_agent()
    a.ok("configure", jobs=[command_job("stubborn", "trap '' TERM; while true; do sleep 0.1; done")])
    a.ok("launch", job="stubborn")
    # the wrapper, the log cap's keeper and the script
    snap = a.wait_snapshot(lambda s: len(a.job(s, "stubborn")["pids"]) >= 3, what="the job running")
    pids = a.job(snap, "stubborn")["pids"]
    a._ids += 1  # the kill's reply never comes: the agent dies during the grace period
    a.send_raw((json.dumps({"type": "request", "id": a._ids, "op": "kill",
                            "args": {"job": "stubborn", "grace_s": 4}}) + "\n").encode())
    wait_for(lambda: json.loads((a.home / "jobs" / "stubborn" / "state.json").read_text())["state"] == "stopping",
             what="the kill under way")
    a.proc.kill()
    a.proc.wait()
    assert any(pid_alive(p) for p in pids)  # the script ignored SIGTERM and no SIGKILL came
    b = start_agent()
    snap = b.wait_snapshot(lambda s: b.job(s, "stubborn")["state"] == "killed", timeout=30,
                           what="the new agent to finish the kill")
    verdict = b.job(snap, "stubborn")["last_kill"]
    assert verdict["ok"] and verdict["signal"] == "SIGKILL", verdict
    assert not any(pid_alive(p) for p in pids)
    audit = [json.loads(line) for line in (a.home / "audit.log").read_text().splitlines()]
    assert "kill-resume" in [e["action"] for e in audit if e["job"] == "stubborn"]


def test_a_kill_outlives_the_console_that_asked_for_it(start_agent):
    a = start_agent()
    a.ok("configure", jobs=[command_job("slow", "trap '' TERM; while true; do sleep 0.1; done")])
    a.ok("launch", job="slow")
    # the wrapper, the log cap's keeper and the script
    snap = a.wait_snapshot(lambda s: len(a.job(s, "slow")["pids"]) >= 3, what="the job running")
    pids = a.job(snap, "slow")["pids"]
    a._ids += 1
    a.send_raw((json.dumps({"type": "request", "id": a._ids, "op": "kill",
                            "args": {"job": "slow", "grace_s": 2}}) + "\n").encode())
    wait_for(lambda: json.loads((a.home / "jobs" / "slow" / "state.json").read_text())["state"] == "stopping",
             what="the kill under way")
    a.proc.stdin.close()  # the console goes away during the grace period
    assert a.proc.wait(30) == 0
    state = json.loads((a.home / "jobs" / "slow" / "state.json").read_text())
    assert state["state"] == "killed" and state["last_kill"]["ok"], state
    assert not any(pid_alive(p) for p in pids)


def test_a_job_that_is_not_running_shows_no_live_rate(start_agent):
    a = start_agent()
    script = ('i=0; while true; do i=$((i+1)); printf \'{"done": %d, "total": 100000, "tokens": %d}\' $i $((i*100)) '
              '> $GPUDECK_PROGRESS_FILE.tmp; mv $GPUDECK_PROGRESS_FILE.tmp $GPUDECK_PROGRESS_FILE; sleep 0.05; done')
    a.ok("configure", jobs=[command_job("rate", script)])
    a.ok("launch", job="rate")
    snap = a.wait_snapshot(lambda s: (a.job(s, "rate").get("progress") or {}).get("tokens_per_s"), timeout=30,
                           what="a live rate")
    assert a.ok("kill", job="rate", grace_s=1)["ok"]
    snap = a.wait_snapshot(lambda s: a.job(s, "rate")["state"] == "killed", what="killed")
    p = a.job(snap, "rate")["progress"]
    assert p["tokens_per_s"] is None and p["rate_per_s"] is None and p["eta_s"] is None, p
    assert p["last_tokens_per_s"] > 0 and p["last_rate_at"] <= snap["t"]
