"""`gpudeck adopt`: a process gpudeck did not start, made a job, with real agents and real
processes on simulated GPUs (agents/simgpu.py): killed with verification, relaunched with the
same command line, directory and environment, kept across an agent restart; and the refusals,
each with its own message and exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from support.core import AgentProc, env_with_repo, reap
from support.stranger import STRANGER  # says what it was started with, holds 2 GiB of GPU 1, sleeps
from support.wait import wait_for
from support.watch import gpudeck_watch

pytestmark = pytest.mark.system  # agents and the processes they adopt

SIM = ("--simulate-gpus", "2xTest GPU:16")


@pytest.fixture
def stranger(tmp_path, home):
    """Start processes gpudeck knows nothing of (each in a session of its own); kill them after."""
    procs: list[subprocess.Popen] = []
    work = tmp_path / "work dir"
    work.mkdir()
    script = tmp_path / "stranger.py"
    script.write_text(STRANGER)

    def start(user: int = None) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, str(script), str(home), str(work)], cwd=work, start_new_session=True,
                             env=env_with_repo({"ADOPT_MARK": "m 1"}), user=user)
        procs.append(p)
        wait_for(lambda: (work / f"seen-{p.pid}.json").exists() and list((home / "simgpu").glob(f"{p.pid}-*.json")),
                 15, what="the stranger to hold its GPU")
        return p

    start.work = work
    yield start
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        p.wait()
    reap(home)


def _seen(work: Path, pid: int) -> dict:
    return json.loads((work / f"seen-{pid}.json").read_text())


def _gpu_holder(snap: dict, pid: int) -> dict:
    return next(p for g in snap["gpus"] for p in g["processes"] if p["pid"] == pid)


def _env(env: dict) -> dict:
    # what gpudeck adds to an attempt (GPUDECK_*), and what a shell sets of its own
    return {k: v for k, v in env.items() if not k.startswith("GPUDECK_") and k not in ("PWD", "OLDPWD", "SHLVL", "_")}


def test_an_adopted_process_is_killed_with_proof_and_relaunched_as_it_was(home, stranger):
    p = stranger()
    agent = AgentProc(home, extra_args=SIM)
    try:
        snap = agent.wait_snapshot(lambda s: any(pr["pid"] == p.pid for g in s["gpus"] for pr in g["processes"]),
                                   what="the stranger on the GPUs")
        seen = _gpu_holder(snap, p.pid)
        assert seen["job"] is None and seen["started_at"] == pytest.approx(psutil.Process(p.pid).create_time(),
                                                                           abs=0.05)
        cmdline = psutil.Process(p.pid).cmdline()
        r = agent.ok("adopt", pid=p.pid, job="found", started_at=seen["started_at"])
        assert r["argv"] == cmdline and r["gpus"] == [1] and r["pgid"] == p.pid and r["cwd"] == str(stranger.work)
        assert "ADOPT_MARK" in r["env_names"]
        snap = agent.wait_snapshot(lambda s: _gpu_holder(s, p.pid)["job"] == "found", what="the GPU's job")
        job = agent.job(snap, "found")
        assert job["state"] == "running" and job["adopted"] and job["gpus"] == [1] and job["pid"] == p.pid

        verdict = agent.ok("kill", job="found", grace_s=5)
        assert verdict["ok"] and verdict["message"].startswith("freed 2.0 GiB"), verdict
        wait_for(lambda: p.poll() is not None, 10, what="the stranger to end")

        launched = agent.ok("relaunch", job="found")
        assert launched["attempt"] == 2 and launched["argv"] == cmdline
        again = wait_for(lambda: next((f for f in stranger.work.glob("seen-*.json") if f.name != f"seen-{p.pid}.json"),
                                      None), 15, what="the relaunched command")
        first, second = _seen(stranger.work, p.pid), json.loads(again.read_text())
        assert second["argv"] == first["argv"] and second["cwd"] == first["cwd"] == str(stranger.work)
        assert _env(second["env"]) == _env(first["env"]) and second["env"]["ADOPT_MARK"] == "m 1"
        assert second["env"]["GPUDECK_JOB"] == "found"  # and it runs as a job of gpudeck's: contained
        snap = agent.wait_snapshot(lambda s: agent.job(s, "found")["attempt"] == 2 and
                                   agent.job(s, "found")["state"] == "running", what="attempt 2")
        assert not agent.job(snap, "found")["adopted"]
        # the command writes what it saw before it takes its GPU memory: kill it once it holds it
        pid2 = int(again.stem.split("-")[1])
        agent.wait_snapshot(lambda s: any(pr["pid"] == pid2 for g in s["gpus"] for pr in g["processes"]),
                            what="the relaunched command on its GPU")
        verdict = agent.ok("kill", job="found", grace_s=5)
        assert verdict["ok"] and "freed 2.0 GiB" in verdict["message"]
    finally:
        agent.close()


def test_an_adoption_survives_an_agent_restart(home, stranger):
    p = stranger()
    agent = AgentProc(home, extra_args=SIM)
    try:
        agent.ok("adopt", pid=p.pid, job="found")
    finally:
        agent.close()
    assert p.poll() is None  # the agent left, the process goes on
    agent = AgentProc(home, extra_args=SIM)
    try:
        snap = agent.wait_snapshot(lambda s: any(j["name"] == "found" for j in s["jobs"]) and s["gpus"] and
                                   _gpu_holder(s, p.pid)["job"] == "found", what="the adopted job again")
        job = agent.job(snap, "found")
        assert job["state"] == "running" and job["pid"] == p.pid and job["adopted"]
        verdict = agent.ok("kill", job="found", grace_s=5)
        assert verdict["ok"] and "freed 2.0 GiB" in verdict["message"]
        snap = agent.wait_snapshot(lambda s: agent.job(s, "found")["state"] == "killed", what="killed")
        assert not [pr for g in snap["gpus"] for pr in g["processes"]]
    finally:
        agent.close()


def test_each_refusal_says_why_and_adopts_nothing(home, stranger):
    p, other = stranger(), stranger()
    gone = subprocess.Popen(["true"])
    gone.wait()
    agent = AgentProc(home, extra_args=SIM)
    try:
        started = psutil.Process(p.pid).create_time()

        def refused(**args) -> dict:
            r = agent.request("adopt", **args)
            assert not r["ok"], r
            return r

        r = refused(pid=gone.pid, job="x")
        assert r["refusal"] == "no_such_pid" and r["error"] == f"no process {gone.pid} on node testnode" and r["usage"]
        r = refused(pid=p.pid, job="x", started_at=started - 60)
        assert r["refusal"] == "pid_reused" and f"pid {p.pid} on node testnode is another process now" in r["error"]
        agent.ok("adopt", pid=p.pid, job="found", started_at=started)
        r = refused(pid=p.pid, job="again")
        assert r["refusal"] == "owned" and r["error"] == f"pid {p.pid} already belongs to job 'found' on node testnode"
        r = refused(pid=other.pid, job="found")
        assert r["refusal"] == "name_taken" and "already holds a job named 'found'" in r["error"] and r["usage"]
        snap = agent.wait_snapshot(lambda s: any(j["name"] == "found" for j in s["jobs"]), what="the jobs")
        assert [j["name"] for j in snap["jobs"]] == ["found"]
    finally:
        agent.close()


@pytest.mark.skipif(os.getuid() != 0, reason="starting another user's process needs root")
def test_another_users_process_is_refused(home):
    theirs = subprocess.Popen(["sleep", "600"], cwd="/", user=65534, start_new_session=True)
    agent = AgentProc(home, extra_args=SIM)
    try:
        r = agent.request("adopt", pid=theirs.pid, job="theirs")
        assert not r["ok"] and r["refusal"] == "not_yours" and not r["usage"]
        assert f"pid {theirs.pid} on node testnode belongs to user nobody (uid 65534)" in r["error"]
        assert not (home / "jobs" / "theirs").exists()
    finally:
        agent.close()
        theirs.kill()
        theirs.wait()


def test_the_command_s_exit_codes(tmp_path, home, stranger):
    p = stranger()
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{home}"\nnvml = false\ninterval = 0.2\n'
                     f'[[nodes]]\nname = "local"\nsimulate_gpus = "2xTest GPU:16"\n')
    gone = subprocess.Popen(["true"])
    gone.wait()
    started = psutil.Process(p.pid).create_time()

    def adopt(*args: str) -> subprocess.CompletedProcess:
        return gpudeck_watch("adopt", "-f", str(fleet), "--node", "local", *args)

    r = adopt("--pid", str(gone.pid), "--as", "x")
    assert r.returncode == 2 and f"local: no process {gone.pid} on node local" in r.stderr
    r = adopt("--pid", str(p.pid), "--as", "x", "--started-at", str(started - 60))
    assert r.returncode == 5 and "is another process now" in r.stderr
    r = adopt("--pid", str(p.pid), "--as", "found", "--started-at", str(started), "--progress-file", "p.json")
    assert r.returncode == 0 and f"adopted pid {p.pid} on local as job found (GPU 1" in r.stdout, r.stderr
    r = adopt("--pid", str(p.pid), "--as", "again")
    assert r.returncode == 6 and "already belongs to job 'found'" in r.stderr
    r = adopt("--pid", "abc", "--as", "x")
    assert r.returncode == 2 and "expected a process id" in r.stderr
    spec = json.loads((home / "jobs" / "found" / "spec.json").read_text())
    assert spec["progress"] == str(stranger.work / "p.json")
    r = gpudeck_watch("kill", "-f", str(fleet), "--node", "local", "found", "--grace", "5")
    assert r.returncode == 0 and "killed found: freed 2.0 GiB" in r.stdout, r.stdout + r.stderr
