"""Slurm clusters end to end: a real single-node Slurm (tests/support/slurm.py), the real
`gpudeck` commands, the cluster agent on the "login node" (this machine, or the loopback sshd),
tasks that hold simulated GPU memory on the indices Slurm gave them (tests/support/slurm_task.py).

gpudeck submits, observes, kills with proof and requeues; Slurm schedules.


The e2e tier's tests of this file (end to end); the others are in tests/unit/test_slurm.py."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from gpudeck.agents.cluster.slurm import parse_job_detail
from support.cli import gpudeck
from support.slurm import SlurmCluster
from support.wait import wait_for
from support.slurm_cases import holder_job, home_of


# ---------------------------------------------------------------- the cluster

@pytest.fixture
def cluster(slurm_cluster: SlurmCluster):
    """The module's cluster, left empty for the next test: whatever a test leaves running would
    hold CPUs and GPUs the next one waits for."""
    yield slurm_cluster
    slurm_cluster.run("scancel", "--partition=debug", check=False)

    def empty() -> bool:
        return not slurm_cluster.run("squeue", "-h", "-t", "PD,CF,R,CG,S", "-o", "%i", check=False).stdout.strip()

    wait_for(empty, 120, "the cluster's queue empty after the test")


def cluster_fleet(tmp: Path, cluster: SlurmCluster, jobs: str, name: str = "fleet", login: str = "local",
                  extra: str = "", python: str = sys.executable, env: dict | None = None) -> Path:
    env = {**cluster.env, **(env or {})}
    env_toml = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    path = tmp / f"{name}.toml"
    path.write_text(f"""
[[clusters]]
name = "lab"
login = {json.dumps(login)}
partition = "debug"
shared_dir = {json.dumps(str(tmp / "shared"))}
agent_home = {json.dumps(str(tmp / "home-{user}"))}
poll_s = 10
python = {json.dumps(python)}
simulate_gpus = "{cluster.gpus}xH200:141"
env = {{ {env_toml} }}
{extra}
{jobs}
""")
    return path


def status(fleet: Path, env: dict | None = None) -> dict:
    r = gpudeck("status", "-f", str(fleet), "--json", env=env, check=False)
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


def tasks(fleet: Path, env: dict | None = None) -> dict[str, dict]:
    return {j["name"]: j for j in status(fleet, env)["jobs"]}


def wait_states(fleet: Path, want: dict[str, str], timeout: float = 180, env: dict | None = None,
                attempts: dict[str, int] | None = None) -> dict[str, dict]:
    """Wait until each task reads its wanted state (and, for those in ``attempts``, that attempt:
    squeue may say RUNNING a moment before the wrapper has written the attempt's start)."""
    last: dict[str, dict] = {}

    def ok() -> bool:
        last.clear()
        last.update(tasks(fleet, env))
        return (all(last.get(k, {}).get("state") == v for k, v in want.items())
                and all(last.get(k, {}).get("attempt") == n for k, n in (attempts or {}).items()))

    wait_for(ok, timeout, f"task states {want}", detail=lambda: json.dumps(
        {k: (v["state"], v.get("task")) for k, v in last.items()}, default=str)[:2000])
    return dict(last)


def idx_of(cluster: SlurmCluster, raw: str) -> list[int]:
    out = cluster.run("scontrol", "-d", "-o", "show", "job", raw).stdout
    (d,) = [d for d in parse_job_detail(out) if d.raw == raw]
    return d.gpus


def claims(tmp: Path) -> dict[int, float]:
    """Simulated GPU -> MiB held by live processes (the claim files the tasks wrote)."""
    from gpudeck.agents.simgpu import SimGpuSampler
    return {g.index: g.mem_used_mib - 420 for g in SimGpuSampler(home_of(tmp), "4xH200:141").sample()
            if g.processes}


def logging_shim(d: Path, tool: str) -> Path:
    """``d/TOOL`` that logs its argv to ``d/TOOL.log``, then runs the real one."""
    import shutil
    real = shutil.which(tool)
    d.mkdir(parents=True, exist_ok=True)
    shim = d / tool
    shim.write_text(f'#!/bin/sh\necho "$*" >> {d / (tool + ".log")}\nexec {real} "$@"\n')
    shim.chmod(0o755)
    return shim


@pytest.mark.system
def test_status_shows_running_tasks_with_their_idx_and_pending_ones_with_the_reason(cluster, tmp_path):
    fleet = cluster_fleet(tmp_path, cluster, holder_job(tmp_path), name="st")
    r = gpudeck("launch", "-f", str(fleet), "extract")
    assert "extract" in r.stdout
    got = wait_states(fleet, {"extract/0": "running", "extract/1": "running", "extract/2": "queued",
                              "extract/3": "queued"})
    for name in ("extract/0", "extract/1"):
        t = got[name]["task"]
        assert got[name]["gpus"] == idx_of(cluster, t["job_id"]) != []
        assert t["scheduler_state"] == "RUNNING" and t["array_id"]
    for name in ("extract/2", "extract/3"):
        assert got[name]["task"]["reason"] == "JobArrayTaskLimit"
        assert "max_running" in got[name]["task"]["reason_text"]
    assert got["extract/0"]["gpus"] != got["extract/1"]["gpus"]
    text = gpudeck("status", "-f", str(fleet)).stdout
    assert "JobArrayTaskLimit" in text and "Slurm cluster via local" in text
    gpudeck("kill", "-f", str(fleet), "extract", check=False)


@pytest.mark.system
def test_kill_one_task_cancels_A_T_proves_the_memory_back_and_leaves_the_others(cluster, tmp_path):
    shims = tmp_path / "shims"
    logging_shim(shims, "scancel")
    env = {"PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    fleet = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, shards=3, max_running=3), name="kl",
                          env=env)
    gpudeck("launch", "-f", str(fleet), "extract")
    got = wait_states(fleet, {f"extract/{i}": "running" for i in range(3)})
    gpu1 = got["extract/1"]["gpus"]
    wait_for(lambda: all(g in claims(tmp_path) for g in gpu1), 120, "task 1 holds its GPU memory")
    r = gpudeck("kill", "-f", str(fleet), "extract/1", check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "CANCELLED" in r.stdout and "GiB back" in r.stdout, r.stdout
    assert not any(g in claims(tmp_path) for g in gpu1)
    array = got["extract/1"]["task"]["array_id"]
    assert f"{array}_1" in (shims / "scancel.log").read_text().split()
    after = tasks(fleet)
    assert after["extract/1"]["state"] == "killed"
    assert after["extract/0"]["state"] == after["extract/2"]["state"] == "running"
    assert after["extract/1"]["last_kill"]["ok"] is True
    gpudeck("kill", "-f", str(fleet), "extract", check=False)


@pytest.mark.system
@pytest.mark.parametrize("proctrack", ["linuxproc", "cgroup"])
def test_a_daemon_that_left_the_job_fails_the_kill_under_linuxproc_only(make_slurm_cluster, tmp_path, proctrack):
    cluster = make_slurm_cluster(proctrack=proctrack)
    fleet = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, shards=1, max_running=1,
                                                        task_args="--setsid-holder --mib 70000"), name="dm")
    gpudeck("launch", "-f", str(fleet), "extract")
    got = wait_states(fleet, {"extract/0": "running"})
    gpus = got["extract/0"]["gpus"]
    wait_for(lambda: all(g in claims(tmp_path) for g in gpus), 120, "the daemon holds the task's GPU")
    r = gpudeck("kill", "-f", str(fleet), "extract/0", check=False)
    if proctrack == "linuxproc":
        assert r.returncode == 1, r.stdout + r.stderr
        assert "pid" in r.stdout and "68.4 GiB" in r.stdout and "CANCELLED" in r.stdout, r.stdout
        holders = tasks(fleet)["extract/0"]["last_kill"]["gpu_holders"]
        assert holders and holders[0]["gpu"] == gpus[0]
        import psutil
        for h in holders:  # the test's own clean-up: the daemon Slurm did not kill
            psutil.Process(h["pid"]).kill()
    else:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "GiB back" in r.stdout


@pytest.mark.system
def test_relaunch_requeues_the_task_and_it_runs_again_as_attempt_2(cluster, tmp_path):
    fleet = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, shards=2, max_running=2), name="rl")
    gpudeck("launch", "-f", str(fleet), "extract")
    wait_states(fleet, {"extract/0": "running", "extract/1": "running"})
    array = tasks(fleet)["extract/1"]["task"]["array_id"]
    r = gpudeck("relaunch", "-f", str(fleet), "extract/1")
    assert "attempt 2" in r.stdout, r.stdout
    assert f"relaunched extract/1: Slurm job {array}_1," in r.stdout and "pid" not in r.stdout, r.stdout
    got = wait_states(fleet, {"extract/1": "running"}, timeout=120, attempts={"extract/1": 2})
    assert got["extract/1"]["attempt"] == 2
    assert got["extract/1"]["task"]["restarts"] >= 1
    gpudeck("kill", "-f", str(fleet), "extract", check=False)


@pytest.mark.system
def test_a_generate_shard_resumes_its_done_count_after_a_relaunch(cluster, tmp_path, sim_engines):
    from support.generate import write_prompts
    engine = sim_engines("--tok-s", "400", "--out-tokens", "30-50")
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, 400)
    out = tmp_path / "out"
    job = f"""
[[jobs]]
name = "gen"
kind = "generate"
cluster = "lab"
prompts = {json.dumps(str(prompts))}
out = {json.dumps(str(out))}
servers = [{json.dumps(engine.url)}]
concurrency = 2
shards = 2
max_running = 2
time = "30:00"
"""
    fleet = cluster_fleet(tmp_path, cluster, job, name="gn")
    gpudeck("launch", "-f", str(fleet), "gen")
    done: dict = {}

    def progressed() -> bool:
        done.update(tasks(fleet)["gen/1"])
        return done["state"] == "running" and (done.get("done") or 0) >= 10

    wait_for(progressed, 180, "gen/1 has done 10 prompts")
    before = done["done"]
    gpudeck("relaunch", "-f", str(fleet), "gen/1")
    after: dict = {}

    def resumed() -> bool:
        after.update(tasks(fleet)["gen/1"])
        return after["state"] == "running" and after["attempt"] == 2 and (after.get("done") or 0) >= before

    wait_for(resumed, 180, f"gen/1 runs again with at least {before} done", detail=lambda: str(after))
    assert after["total"] is not None and after["total"] < 400  # its part, not the whole file
    assert (out / "part-1-of-2").is_dir()
    gpudeck("kill", "-f", str(fleet), "gen", check=False)


@pytest.mark.system
def test_usr1_before_the_time_limit_requeues_the_task_and_the_console_says_why(cluster, tmp_path):
    fleet = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, shards=3, max_running=3), name="us")
    gpudeck("launch", "-f", str(fleet), "extract")
    got = wait_states(fleet, {"extract/2": "running"})
    array = got["extract/2"]["task"]["array_id"]
    attempts = tmp_path / "shared" / "runs" / "us" / "extract" / "attempts" / "2.jsonl"
    # the wrapper has set its traps once it records its start (RUNNING comes before that)
    wait_for(lambda: attempts.exists() and '"start"' in attempts.read_text(), 120, "the wrapper of extract/2 started")
    cluster.run("scancel", "--signal=USR1", "--batch", f"{array}_2")
    last: dict = {}

    def requeued() -> bool:
        last.update(tasks(fleet)["extract/2"])
        t = last["task"]  # pending (Slurm's BeginTime), or already its next attempt on a slow machine
        return bool(t and t["note"] and "SIGUSR1" in t["note"] and (last["state"] == "queued" or
                                                                     last["attempt"] >= 2))

    wait_for(requeued, 180, "extract/2 requeued itself",
             detail=lambda: f"{last}\nattempts:\n{attempts.read_text()}")
    if last["state"] == "queued":  # Slurm's own wait after a requeue (BeginTime); once it is over and before the
        # scheduler's next pass, squeue says no reason at all ("None"), which a busy machine can catch
        assert last["task"]["reason"] in ("BeginTime", None), last
    text = gpudeck("status", "-f", str(fleet)).stdout
    assert "requeued itself" in text and "SIGUSR1" in text
    gpudeck("kill", "-f", str(fleet), "extract", check=False)


@pytest.mark.system
def test_after_min_job_age_a_finished_task_shows_its_real_end_from_the_wrappers_record(make_slurm_cluster, tmp_path):
    cluster = make_slurm_cluster(min_job_age=3)
    jobs = (holder_job(tmp_path, "ok", shards=1, max_running=1, gpus=0, task_args="--sleep 1 --exit 0")
            + holder_job(tmp_path, "bad", shards=1, max_running=1, gpus=0, task_args="--sleep 1 --exit 3"))
    fleet = cluster_fleet(tmp_path, cluster, jobs, name="mj")
    gpudeck("launch", "-f", str(fleet), "ok")
    gpudeck("launch", "-f", str(fleet), "bad")
    got: dict = {}

    def gone_from_squeue() -> bool:
        got.update(tasks(fleet))
        return all(got[n]["task"]["source"] == "attempts" for n in ("ok/0", "bad/0"))

    wait_for(gone_from_squeue, 180, "both tasks left squeue (MinJobAge 3 s)", detail=lambda: str(got))
    assert (got["ok/0"]["state"], got["ok/0"]["exit_code"]) == ("exited", 0)
    assert (got["bad/0"]["state"], got["bad/0"]["exit_code"]) == ("failed", 3)
    for n in ("ok/0", "bad/0"):
        assert got[n]["attempt"] == 1
    assert "left Slurm's queue" in gpudeck("status", "-f", str(fleet)).stdout
    # Slurm forgot the task: a relaunch resubmits it on its own (a new array), attempt 2
    r = gpudeck("relaunch", "-f", str(fleet), "bad/0")
    assert "attempt 2" in r.stdout, r.stdout
    wait_for(lambda: tasks(fleet)["bad/0"]["attempt"] == 2, 180, "bad/0 ran again")


@pytest.mark.system
def test_a_task_gone_from_the_queue_without_an_end_is_lost_never_completed(make_slurm_cluster, tmp_path):
    cluster = make_slurm_cluster(min_job_age=3)
    fleet = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, shards=1, max_running=1, gpus=0), name="ls")
    gpudeck("launch", "-f", str(fleet), "extract")
    got = wait_states(fleet, {"extract/0": "running"}, attempts={"extract/0": 1})
    wrapper = next(int(json.loads(ln)["pid"]) for ln in (tmp_path / "shared" / "runs" / "ls" / "extract" / "attempts"
                                                           / "0.jsonl").read_text().splitlines())
    os.kill(wrapper, 9)  # the batch script dies with no chance to write its end
    last: dict = {}

    def settled() -> bool:
        last.update(tasks(fleet)["extract/0"])
        return last["task"]["source"] == "attempts"

    wait_for(settled, 180, "the task left squeue", detail=lambda: str(last))
    assert last["state"] == "lost" and "no end recorded" in last["task"]["note"]
    assert got["extract/0"]["attempt"] == 1


@pytest.mark.system
def test_a_killed_array_reads_cancelled_for_what_never_ran_even_after_slurm_forgets_it(make_slurm_cluster, tmp_path):
    """`kill arr` of 6 tasks, 2 at a time, one of them requeued (pending, BeginTime): the tasks
    that waited read `cancelled`, never `pending`, and keep it (with its time) once squeue no
    longer lists them (MinJobAge 3 s; a task cancelled in its array's pending record never had a
    line of its own)."""
    cluster = make_slurm_cluster(min_job_age=3)
    fleet = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, "arr", shards=6, max_running=2), name="cx")
    launched = gpudeck("launch", "-f", str(fleet), "arr").stdout
    got = wait_states(fleet, {"arr/0": "running", "arr/1": "running"})
    array = got["arr/0"]["task"]["array_id"]
    assert f"launched arr: Slurm job {array}," in launched and "pid" not in launched, launched
    cluster.run("scontrol", "requeue", f"{array}_0")  # pending again: Slurm holds it until its BeginTime
    wait_states(fleet, {"arr/0": "queued", "arr/1": "running", "arr/2": "running"})
    r = gpudeck("kill", "-f", str(fleet), "arr", check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "had already ended" not in r.stdout and "cancelled before they ran" in r.stdout, r.stdout
    want = {"arr/0": "cancelled", "arr/1": "killed", "arr/2": "killed", "arr/3": "cancelled", "arr/4": "cancelled",
            "arr/5": "cancelled"}
    now = tasks(fleet)
    assert {n: now[n]["state"] for n in want} == want, {n: (now[n]["state"], now[n]["task"]) for n in want}
    assert now["arr/0"]["task"]["reason"] is None
    assert now["arr/4"]["last_kill"]["state"] == "cancelled" and now["arr/4"]["last_kill"]["ok"] is True
    text = gpudeck("status", "-f", str(fleet)).stdout
    assert "pending" not in text and not re.search(r"\bqueued\b", text), text  # "requeued" may be said
    later: dict = {}

    def forgotten() -> bool:
        later.update(tasks(fleet))
        return all(later[n]["task"]["source"] != "squeue" for n in want)

    wait_for(forgotten, 120, "every task left squeue (MinJobAge 3 s)", detail=lambda: str(
        {n: (later[n]["state"], later[n]["task"]["source"]) for n in want if n in later}))
    assert {n: later[n]["state"] for n in want} == want, {n: (later[n]["state"], later[n]["task"]) for n in want}
    for n in ("arr/0", "arr/3", "arr/5"):
        assert later[n]["ended_at"] is not None and "before it ran" in later[n]["task"]["note"], later[n]
    text = gpudeck("status", "-f", str(fleet)).stdout
    assert "pending" not in text and not re.search(r"\bqueued\b", text), text


@pytest.mark.system
def test_a_waiting_task_cancelled_by_hand_reads_cancelled_even_after_slurm_forgets_it(make_slurm_cluster, tmp_path):
    """`scancel A_2` by hand, outside gpudeck, of a task that waits in its array's pending record:
    Slurm keeps no line of it (it never had one of its own), yet its array is still listed without
    it, which only a cancel does. It reads `cancelled` (never `lost`, never `pending`), with when
    it was found gone, and keeps it once Slurm forgets the whole array (MinJobAge 3 s)."""
    cluster = make_slurm_cluster(min_job_age=3)
    fleet = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, "arr", shards=4, max_running=1), name="hx")
    gpudeck("launch", "-f", str(fleet), "arr")
    got = wait_states(fleet, {"arr/0": "running", "arr/1": "queued", "arr/2": "queued", "arr/3": "queued"})
    array = got["arr/0"]["task"]["array_id"]
    before = time.time()
    cluster.run("scancel", f"{array}_2")  # by hand: gpudeck has no verdict of it
    got = wait_states(fleet, {"arr/0": "running", "arr/1": "queued", "arr/2": "cancelled", "arr/3": "queued"})
    t = got["arr/2"]
    assert t["last_kill"] is None and t["task"]["source"] == "kept", t
    assert "before it ran" in t["task"]["note"] and "outside gpudeck" in t["task"]["note"], t["task"]
    assert t["ended_at"] is not None and t["ended_at"] >= before - 1, t
    text = gpudeck("status", "-f", str(fleet)).stdout
    assert "lost" not in text, text
    gpudeck("kill", "-f", str(fleet), "arr", check=False)
    later: dict = {}

    def forgotten() -> bool:
        later.update(tasks(fleet))
        return all(later[f"arr/{i}"]["task"]["source"] != "squeue" for i in range(4))

    wait_for(forgotten, 120, "every task left squeue (MinJobAge 3 s)", detail=lambda: str(
        {n: (v["state"], v["task"]["source"]) for n, v in later.items()}))
    assert later["arr/2"]["state"] == "cancelled", later["arr/2"]
    assert later["arr/2"]["ended_at"] == t["ended_at"], (later["arr/2"], t)


@pytest.mark.system
def test_naming_the_fleet_keeps_its_submitted_tasks_found_and_killable(cluster, tmp_path):
    """A fleet file gets a `[fleet] name` (or another one) while its array runs: the tasks Slurm
    has under the old name, `gd:<old>:<job>`, stay the job's rows (same array, same attempts),
    `kill` finds and ends them, and the run directory moves to the new name with a link left
    for the running tasks' wrappers."""
    fleet = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, "arr", shards=2, max_running=1), name="fx")
    gpudeck("launch", "-f", str(fleet), "arr")
    got = wait_states(fleet, {"arr/0": "running", "arr/1": "queued"})
    array = got["arr/0"]["task"]["array_id"]
    runs = tmp_path / "shared" / "runs"
    assert (runs / "fx" / "arr").is_dir()
    fleet.write_text('[fleet]\nname = "renamed"\n' + fleet.read_text())
    got = wait_states(fleet, {"arr/0": "running", "arr/1": "queued"}, timeout=60, attempts={"arr/0": 1})
    assert {got[n]["task"]["array_id"] for n in ("arr/0", "arr/1")} == {array}, got
    assert got["arr/0"]["attempt"] == 1 and got["arr/0"]["task"]["source"] == "squeue", got["arr/0"]
    assert (runs / "renamed" / "arr" / "attempts" / "0.jsonl").is_file() and (runs / "fx").is_symlink()
    r = gpudeck("kill", "-f", str(fleet), "arr", check=False)
    assert r.returncode == 0 and "arr/0" in r.stdout, r.stdout + r.stderr
    got = wait_states(fleet, {"arr/0": "killed", "arr/1": "cancelled"}, timeout=60)
    assert not cluster.run("squeue", "-h", "-t", "PD,R,CG", "-o", "%i", check=False).stdout.strip()


# ---------------------------------------------------------------- polling budget, observers


async def _watch(fleet_path: Path, seconds: float, env: dict) -> list:
    """A console's watch loop (FleetClient.watch), for ``seconds``: the snapshots it got."""
    from gpudeck.remote.client import FleetClient
    from gpudeck.remote.fleet import load_fleet
    snaps = []
    client = FleetClient(load_fleet(fleet_path))
    task = asyncio.get_running_loop().create_task(client.watch(lambda node, msg: snaps.append(msg)))
    try:
        await asyncio.sleep(seconds)  # the span under test: the consoles watch this long
    finally:
        task.cancel()
        await client.close()
    return snaps


@pytest.mark.system
def test_two_consoles_share_one_poll_within_the_budget(cluster, tmp_path, monkeypatch):
    shims = tmp_path / "shims"
    cluster.squeue_shim(shims)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    fleet = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, shards=8, max_running=8, gpus=0), name="pb")
    gpudeck("launch", "-f", str(fleet), "extract")  # one action: its own agent's polls
    launched = len((shims / "squeue.log").read_text().splitlines())
    seconds = 60.0

    async def both():
        return await asyncio.gather(_watch(fleet, seconds, {}), _watch(fleet, seconds, {}))

    t0 = time.monotonic()
    first, second = asyncio.run(both())
    span = time.monotonic() - t0
    calls = len((shims / "squeue.log").read_text().splitlines()) - launched
    assert first and second  # both consoles saw the cluster
    budget = span / 10 + 2 + 3  # one per poll_s, the agent's first, a few after the configure
    assert calls <= budget, f"{calls} squeue calls in {span:.0f} s for two consoles (budget {budget:.0f})"
    gpudeck("kill", "-f", str(fleet), "extract", check=False)


@pytest.mark.system
def test_observers_end_with_the_last_console_and_never_the_job(cluster, tmp_path):
    fleet = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, shards=2, max_running=2), name="ob")
    gpudeck("launch", "-f", str(fleet), "extract")
    wait_states(fleet, {"extract/0": "running", "extract/1": "running"})

    async def watch_until_observed():
        from gpudeck.remote.client import FleetClient
        from gpudeck.remote.fleet import load_fleet
        seen = []
        client = FleetClient(load_fleet(fleet))
        task = asyncio.get_running_loop().create_task(client.watch(lambda n, m: seen.append(m)))
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                snaps = [m for m in seen if getattr(m, "cluster", None) is not None]
                if snaps and snaps[-1].cluster.observers == 2 and len(snaps[-1].gpus) == 2:
                    return snaps[-1]
                await asyncio.sleep(0.2)
            raise AssertionError(f"no two observers: {seen[-1] if seen else None}")
        finally:
            task.cancel()
            await client.close()

    snap = asyncio.run(watch_until_observed())
    assert {g.host for g in snap.gpus} == {cluster.node}
    assert all(p.job and p.job.startswith("extract/") for g in snap.gpus for p in g.processes)

    def steps() -> list[str]:
        return cluster.run("squeue", "-s", "-h", "-o", "%i").stdout.split()

    wait_for(lambda: all(s.endswith(".batch") for s in steps()), 120, "only the batch steps are left",
             detail=lambda: str(steps()))
    assert {j["state"] for n, j in tasks(fleet).items()} == {"running"}
    gpudeck("kill", "-f", str(fleet), "extract", check=False)


@pytest.mark.system
def test_bad_input_at_launch_exits_2_with_slurms_own_words(cluster, tmp_path):
    jobs = (holder_job(tmp_path, "toomany", shards=1, max_running=1, gpus=8)
            + holder_job(tmp_path, "huge", shards=1002, max_running=1, gpus=0))
    fleet = cluster_fleet(tmp_path, cluster, jobs, name="bi")
    r = gpudeck("launch", "-f", str(fleet), "toomany", check=False)
    assert r.returncode == 2 and "Requested node configuration is not available" in r.stderr, r.stderr
    r = gpudeck("launch", "-f", str(fleet), "huge", check=False)
    assert r.returncode == 2 and "MaxArraySize" in r.stderr, r.stderr
    bad = Path(str(fleet).replace("bi.toml", "bp.toml"))
    bad.write_text(fleet.read_text().replace('partition = "debug"', 'partition = "nosuch"'))
    r = gpudeck("launch", "-f", str(bad), "toomany", check=False)
    assert r.returncode == 2 and "invalid partition" in r.stderr.lower(), r.stderr


@pytest.mark.system
def test_a_login_without_squeue_exits_2_and_an_unreachable_one_exits_3(tmp_path):
    path = tmp_path / "nq.toml"
    path.write_text(f"""[[clusters]]
name = "lab"
shared_dir = {json.dumps(str(tmp_path / 'shared'))}
agent_home = {json.dumps(str(tmp_path / 'home-{user}'))}
python = {json.dumps(sys.executable)}
env = {{ PATH = "/nonexistent" }}
""")
    r = gpudeck("status", "-f", str(path), check=False)
    assert r.returncode == 2 and "is it a Slurm login node?" in r.stderr, r.stdout + r.stderr
    path.write_text(path.read_text().replace('env = { PATH = "/nonexistent" }', 'login = "127.0.0.1:1"\n'
                                             'connect_timeout = 2'))
    r = gpudeck("status", "-f", str(path), check=False)
    assert r.returncode == 3, r.stdout + r.stderr


# ---------------------------------------------------------------- scale


@pytest.mark.system
def test_256_tasks_read_as_a_few_lines(cluster, tmp_path):
    fleet = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, shards=256, max_running=4, gpus=0,
                                                              task_args="--sleep 3600"), name="sc")
    gpudeck("launch", "-f", str(fleet), "extract")
    got = wait_states(fleet, {"extract/0": "running", "extract/255": "queued"})
    assert len([n for n in got if n.startswith("extract/")]) == 256
    assert status(fleet)["nodes"][0]["cluster"]["poll_ms"] is not None
    text = gpudeck("status", "-f", str(fleet)).stdout
    lines = [ln for ln in text.splitlines() if ln.startswith("extract/")]
    assert len(lines) < 20 and any("[" in ln for ln in lines), text
    assert "252 tasks" in text or "tasks" in text
    gpudeck("kill", "-f", str(fleet), "extract", check=False)


# ---------------------------------------------------------------- over SSH, through one default sshd


@pytest.mark.system
def test_twelve_observed_tasks_through_one_default_sshd(cluster, tmp_path, monkeypatch):
    """The login over SSH (a default sshd: MaxSessions 10): one channel carries the cluster
    agent, and the agent carries every observer on its own pipes."""
    import support.ssh as ssh_support
    from gpudeck.agents.contract import ops
    from gpudeck.remote.client import FleetClient
    from gpudeck.remote.fleet import load_fleet
    from gpudeck.remote.ssh import SshTransport

    real_config = ssh_support.sshd_config
    monkeypatch.setattr(ssh_support, "sshd_config", lambda *a, **k: _default_sessions(real_config(*a, **k)))
    d = tmp_path / "sshd"
    d.mkdir(mode=0o700)
    key = ssh_support.keygen(d / "client_ed25519")
    (d / "authorized_keys").write_text((d / "client_ed25519.pub").read_text())
    server = ssh_support.Sshd(d / "server", d / "authorized_keys")
    try:
        python = ssh_support.node_python(tmp_path / "login-python")
        extra = (f'identity = {json.dumps(str(key))}\nknown_hosts = {json.dumps(str(server.known_hosts))}\n')
        fleet_path = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, shards=12, max_running=12, gpus=0),
                                   name="ssh12", login=f"{getpass.getuser()}@127.0.0.1:{server.port}",
                                   extra=extra, python=str(python))
        fleet = load_fleet(fleet_path)

        async def run() -> object:
            client = FleetClient(fleet, {"ssh": SshTransport(config=None)})
            seen: list = []
            task = asyncio.get_running_loop().create_task(client.watch(lambda n, m: seen.append(m)))
            try:
                await client.request(ops.Launch(job="extract"), node="lab")
                deadline = time.monotonic() + 240
                while time.monotonic() < deadline:
                    snaps = [m for m in seen if getattr(m, "cluster", None) is not None]
                    last = snaps[-1] if snaps else None
                    if last is not None and last.cluster.observers == 12 and \
                            sum(1 for j in last.jobs if j.task and j.task.observed) == 12:
                        return last
                    await asyncio.sleep(0.2)
                raise AssertionError(f"not 12 observers: {seen[-1].cluster if seen else None}")
            finally:
                await client.request(ops.Kill(job="extract"), node="lab")
                task.cancel()
                await client.close()

        snap = asyncio.run(run())
        assert all(j.state.value == "running" for j in snap.jobs)
        assert "MaxSessions 10" in (d / "server" / "sshd_config").read_text()
    finally:
        server.stop()


def _default_sessions(cfg: Path) -> Path:
    """sshd's default MaxSessions (10), instead of the test sshd's 100."""
    cfg.write_text(cfg.read_text().replace("MaxSessions 100", "MaxSessions 10"))
    return cfg


@pytest.mark.system
async def test_the_console_shows_a_clusters_tasks_and_folds_the_pending_ones(cluster, tmp_path):
    from gpudeck.console.app import make_app
    from gpudeck.remote.fleet import load_fleet
    from support.tui import job_row, screen_text, wait_until

    fleet_path = cluster_fleet(tmp_path, cluster, holder_job(tmp_path, shards=8, max_running=2), name="tui")
    gpudeck("launch", "-f", str(fleet_path), "extract")
    app = make_app(load_fleet(fleet_path), grace_s=2.0, log_poll_s=0.2)
    app.animation_level = "none"
    try:
        async with app.run_test(size=(140, 40), notifications=True) as pilot:
            await pilot.press("2")
            await wait_until(pilot, lambda: (r := job_row(app, "extract/0")) and r.state == "running",
                             what="extract/0 running in the console", timeout=180)
            await wait_until(pilot, lambda: "extract/[2-7]" in screen_text(app), what="the pending range folded",
                             timeout=180)
            folded = job_row(app, "extract/[2-7]")  # Slurm holds them: "queued", never "pending" nor "not started"
            assert folded.state == "queued" and folded.flags[0].startswith("queued by Slurm"), folded
            await _folded_row_opens_its_first_task_and_kills_say_scancel(app, pilot)
            await pilot.press("1")
            await wait_until(pilot, lambda: f"GPU0 {cluster.node}" in screen_text(app)
                             and "extract/0" in screen_text(app),
                             what="the observed GPUs, with their compute node", timeout=180)
    finally:
        gpudeck("kill", "-f", str(fleet_path), "extract", check=False)


async def _folded_row_opens_its_first_task_and_kills_say_scancel(app, pilot) -> None:
    """Enter on ``extract/[2-7]`` (no task of that name) opens extract/2, whose log is followed,
    never "unknown job ... (retrying)"; ctrl-k on a Slurm task asks about scancel, not signals."""
    from gpudeck.console.screens.describe import DescribeScreen
    from gpudeck.console.widgets.log_panel import LogPanel
    from support.tui import answer, confirm_dialog, wait_until

    table = app.screen.query_one("#jobs-table")
    table.focus()
    assert table.move_cursor_to_key("lab/extract/[2-7]")
    await pilot.press("enter")
    opened = await wait_until(pilot, lambda: isinstance(app.screen, DescribeScreen) and app.screen.composed
                              and app.screen, what="the job's describe")
    assert opened.job == "extract/2"
    panel = opened.query_one(LogPanel)
    await wait_until(pilot, lambda: panel.fed or panel.problem, what="extract/2's log answered")
    assert panel.problem is None, panel.problem
    await pilot.press("ctrl+k")
    text = (await confirm_dialog(pilot)).question  # the dialog's words, before the screen wraps them
    assert "scancel" in text and "before it runs" in text and "process group" not in text, text
    await answer(pilot, "n")
    await pilot.press("escape")
    await wait_until(pilot, lambda: not isinstance(app.screen, DescribeScreen), what="back to the jobs view")
    table = app.screen.query_one("#jobs-table")
    assert table.move_cursor_to_key("lab/extract/0")
    table.focus()
    await pilot.press("ctrl+k")
    text = (await confirm_dialog(pilot)).question
    assert "scancel" in text and "KillWait" in text and "SIGTERM to its process group" not in text, text
    await answer(pilot, "n")
