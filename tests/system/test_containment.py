"""A kill that a process cannot escape (setsid, double fork, its own process group, nohup,
a cleared environment), in both containment modes, verified: nothing of the job is left, and
a process that escaped everything and holds one of the job's GPUs makes the verdict not ok,
named. The GPUs are the stand-in of agents/simgpu.py, whose memory follows real processes."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

from support import command_job
from support.wait import wait_for
from gpudeck.agents.jobs.contain import Containment

pytestmark = pytest.mark.system  # a real agent and its jobs

CGROUP = Containment.detect().mode == "cgroup"
MODES = [pytest.param("cgroup", marks=pytest.mark.skipif(not CGROUP, reason="no writable cgroup v2 here: "
                                                                             "the agent is not root or not delegated")),
         "token"]
PY = sys.executable


def escapes(marker: int) -> dict[str, str]:
    """Shell scripts whose last process outlives the job's group and tree; each runs a
    `sleep <marker>` that the test can find."""
    py_ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep({})"
    return {
        "setsid_ignoring_sigterm": f"setsid {PY} -c '{py_ignore.format(marker)}' & exec sleep 600",
        "double_fork": f"( setsid sleep {marker} & ) ; exec sleep 600",
        "own_process_group": f"{PY} -c 'import os, time; os.setpgid(0, 0); time.sleep({marker})' & exec sleep 600",
        "nohup": f"nohup sleep {marker} > /dev/null 2>&1 & exec sleep 600",
    }


def marked(marker: int) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline", "status"])
            if p.info["status"] != psutil.STATUS_ZOMBIE and str(marker) in " ".join(p.info["cmdline"] or ())
            and "sh -c" not in " ".join(p.info["cmdline"] or ()) and "gpudeck-job" not in (p.info["cmdline"] or ())]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(escapes(0)))
def test_an_escaping_process_is_killed_and_the_kill_verified(start_agent, home, reap_jobs, mode, case):
    marker = 61000 + list(escapes(0)).index(case) * 10 + (mode == "token")
    a = start_agent(env={"GPUDECK_CONTAINMENT": mode} if mode == "token" else None)
    a.ok("configure", jobs=[command_job("escapee", escapes(marker)[case])])
    a.ok("launch", job="escapee")
    wait_for(lambda: marked(marker), what="the escaped process")
    snap = a.wait_snapshot(lambda s: a.job(s, "escapee")["state"] == "running", what="the job running")
    assert snap["containment"] == mode
    verdict = a.ok("kill", job="escapee", grace_s=1)
    assert verdict["ok"], verdict
    assert not marked(marker), f"{case}: the escaped process survived a kill that said ok"
    snap = a.wait_snapshot(lambda s: a.job(s, "escapee")["state"] == "killed", what="killed")
    assert a.job(snap, "escapee")["last_kill"]["ok"]


@pytest.mark.parametrize("mode", MODES)
def test_a_process_that_clears_its_environment(start_agent, home, reap_jobs, mode):
    """cgroup mode holds it all the same; in token mode it escapes, and the check against the
    GPUs names it: it started after the launch, belongs to no job and holds the job's GPU."""
    marker = 62000 + (mode == "token")
    a = start_agent(env={"GPUDECK_CONTAINMENT": mode} if mode == "token" else None,
                    extra_args=("--simulate-gpus", "2xH200:141"))
    hold = f"{PY} -m gpudeck.agents.simgpu {home} 0 6758 -- sleep {marker}"
    a.ok("configure", jobs=[command_job("escapee", f"( setsid env -i {hold} & ) ; exec {PY} -m gpudeck.agents.simgpu "
                                                    f"{home} 0 4096 -- sleep 600", gpus=[0])])
    a.ok("launch", job="escapee")
    snap = a.wait_snapshot(lambda s: len(s["gpus"][0]["processes"]) == 2, what="two processes on GPU 0")
    assert snap["gpus_simulated"] is True
    escaped = marked(marker)
    assert len(escaped) == 1
    verdict = a.ok("kill", job="escapee", grace_s=1)
    try:
        if mode == "cgroup":
            assert verdict["ok"], verdict
            assert verdict["freed_gib"] == pytest.approx((6758 + 4096) / 1024, abs=0.01)
            assert not marked(marker)
        else:
            assert not verdict["ok"], verdict
            assert (f"still held by pid {escaped[0]} (env -i" not in verdict["message"]
                    and f"still held by pid {escaped[0]} (" in verdict["message"]
                    and "outside the job's process tree): 6.6 GiB on GPU 0" in verdict["message"]), verdict
            assert [h["pid"] for h in verdict["gpu_holders"]] == escaped
    finally:
        for pid in marked(marker):
            os.kill(pid, 9)


def test_a_gpu_process_of_no_job_is_killed_by_pid_and_verified(start_agent, home, reap_jobs):
    import subprocess

    a = start_agent(extra_args=("--simulate-gpus", "1xRTX PRO 6000:96"))
    stranger = subprocess.Popen([PY, "-m", "gpudeck.agents.simgpu", str(home), "0", "2048", "--", "sleep", "600"],
                                start_new_session=True)
    try:
        snap = a.wait_snapshot(lambda s: s["gpus"][0]["processes"], what="the stranger on GPU 0")
        assert snap["gpus"][0]["processes"][0]["job"] is None
        assert any(al["kind"] == "unowned_gpu_process" for al in snap["alerts"])
        r = a.request("kill_pid", pid=os.getpid())  # the agent's parent (agents/jobs/holds.py)
        assert not r["ok"] and r["refusal"] == "holds_node" and "is an ancestor of the node's agent" in r["error"]
        idle = subprocess.Popen(["sleep", "600"], start_new_session=True)
        try:
            r = a.request("kill_pid", pid=idle.pid)
        finally:
            idle.kill()
            idle.wait()
        assert not r["ok"] and "holds no GPU" in r["error"] and r["refusal"] is None
        verdict = a.ok("kill_pid", pid=stranger.pid, grace_s=1)
        assert verdict["ok"] and verdict["freed_gib"] == 2.0 and verdict["message"].startswith(f"pid {stranger.pid}: ")
        assert stranger.wait(10) is not None
        a.wait_snapshot(lambda s: not s["gpus"][0]["processes"], what="GPU 0 free")
        audit = (home / "audit.log").read_text()
        assert '"action": "kill-pid"' in audit
    finally:
        if stranger.poll() is None:
            stranger.kill()


@pytest.mark.parametrize("mode", MODES)
def test_a_gpu_process_older_than_the_job_is_not_blamed_on_its_kill(start_agent, home, reap_jobs, mode):
    import subprocess

    a = start_agent(env={"GPUDECK_CONTAINMENT": mode} if mode == "token" else None,
                    extra_args=("--simulate-gpus", "1xH200:141"))
    stranger = subprocess.Popen([PY, "-m", "gpudeck.agents.simgpu", str(home), "0", "1024", "--", "sleep", "600"],
                                start_new_session=True)
    try:
        a.wait_snapshot(lambda s: s["gpus"][0]["processes"], what="the stranger on GPU 0")
        a.ok("configure", jobs=[command_job("holder", f"exec {PY} -m gpudeck.agents.simgpu {home} 0 2048 -- sleep 600",
                                            gpus=[0])])
        a.ok("launch", job="holder")
        a.wait_snapshot(lambda s: len(s["gpus"][0]["processes"]) == 2, what="the job on GPU 0 too")
        verdict = a.ok("kill", job="holder", grace_s=1)
        assert verdict["ok"] and verdict["freed_gib"] == 2.0, verdict
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.skipif(not CGROUP, reason="no writable cgroup v2 here: the agent is not root or not delegated")
def test_a_home_made_again_at_the_same_path_does_not_count_the_old_home_s_processes(tmp_path, home):
    """The old home's job goes on running in its cgroup after the home is deleted; the new
    home's job of the same name (attempt 1 again) gets a cgroup of its own."""
    import json
    import shutil
    import signal
    from pathlib import Path

    from support.cli import gpudeck
    from support.core import pid_alive, reap
    from support.watch import agent_pid

    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{home}"\nnvml = false\ninterval = 0.2\n\n'
                     f'[[jobs]]\nname = "j"\ncommand = ["sleep", "600"]\n')
    old: dict = {}
    try:
        gpudeck("launch", "j", "-f", str(fleet))
        old = json.loads((home / "jobs" / "j" / "state.json").read_text())
        old_pids = wait_for(lambda: (p := Containment.detect().members(None, old["cgroup"])) and len(p) >= 2 and p,
                            15, what="the old job's wrapper and sleep in its cgroup")
        agent = agent_pid(home)
        wait_for(lambda: agent is None or not pid_alive(agent), 30, what="the console's agent to leave")
        # its job goes on; its log's keeper may still be starting and make job.log mid-removal
        wait_for(lambda: (shutil.rmtree(home, ignore_errors=True), not home.exists())[1], 15,
                 what="the old home removed")
        home.mkdir(mode=0o700)
        gpudeck("launch", "j", "-f", str(fleet))
        new = json.loads((home / "jobs" / "j" / "state.json").read_text())
        verdict = json.loads(gpudeck("kill", "j", "-f", str(fleet), "--json", "--grace", "2").stdout)
        assert verdict["ok"] and not set(verdict["pids"]) & old_pids, (verdict["pids"], old_pids)
        assert all(pid_alive(p) for p in old_pids)  # the old home's job was not the new one's to kill
        assert new["attempt"] == 1 and new["cgroup"] != old["cgroup"], (old["cgroup"], new["cgroup"])
    finally:
        reap(home)
        if old.get("pgid"):
            try:
                os.killpg(old["pgid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        if old.get("cgroup") and Path(old["cgroup"]).exists():
            Path(old["cgroup"], "cgroup.kill").write_text("1")
            wait_for(lambda: not Path(old["cgroup"], "cgroup.procs").read_text().strip(), 10, what="the old cgroup empty")
            Containment.remove(old["cgroup"])
