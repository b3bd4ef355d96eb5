"""The Slurm fixture itself (tests/support/slurm.py): a real single-node cluster answers the
commands gpudeck will use, several clusters run at once without touching each other, the knobs
reach slurm.conf, and the squeue shim counts calls."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.slurm import SlurmCluster, slurm_missing, squeue_calls, start_time
from support.wait import wait_for

pytestmark = pytest.mark.system  # munged, slurmctld, slurmd and Slurm jobs

SQUEUE_FORMAT = "%i|%A|%K|%T|%r|%N|%b"


def tasks(cluster: SlurmCluster, array: str) -> dict[str, dict[str, str]]:
    """squeue's rows of one array, by task id: raw id, state, reason, node, gres."""
    out = cluster.run("squeue", "-h", "-r", "-t", "all", "-o", SQUEUE_FORMAT).stdout
    rows = {}
    for line in out.splitlines():
        i, raw, task, state, reason, node, gres = line.split("|")
        if i.startswith(f"{array}_"):
            rows[task] = {"raw": raw, "state": state, "reason": reason, "node": node, "gres": gres}
    return rows


def sleeper(cluster: SlurmCluster, name: str, body: str = "sleep 300") -> Path:
    script = cluster.work / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def running(cluster: SlurmCluster, job: str) -> bool:
    return cluster.state(job) == "RUNNING"


def alive(pids: dict[int, str]) -> bool:
    return all(start_time(pid) == started for pid, started in pids.items())


def test_an_array_throttled_to_two_runs_two_tasks_each_on_its_own_gpu(slurm_cluster: SlurmCluster):
    c = slurm_cluster
    script = sleeper(c, "shard.sh")
    array = c.run("sbatch", "--parsable", "--array=0-3%2", "--gres=gpu:1", "-J", "gd-array",
                  "-o", str(c.work / "%x-%A_%a.log"), str(script)).stdout.strip()
    try:
        def two_running_two_throttled():
            rows = tasks(c, array)
            states = sorted((r["state"], r["reason"]) for r in rows.values())
            return states == [("PENDING", "JobArrayTaskLimit")] * 2 + [("RUNNING", "None")] * 2 and rows

        rows = wait_for(two_running_two_throttled, what=f"2 tasks of array {array} RUNNING, 2 PENDING",
                        detail=lambda: c.run("squeue", "-h", "-r", "-t", "all", "-o", SQUEUE_FORMAT).stdout)
        run = [r for r in rows.values() if r["state"] == "RUNNING"]
        assert {r["node"] for r in run} == {c.node}
        assert {r["gres"] for r in rows.values()} == {"gres:gpu:1"}
        idx = set()
        for r in run:
            show = c.run("scontrol", "-d", "-o", "show", "job", r["raw"]).stdout
            assert f"JobId={r['raw']} ArrayJobId={array} " in show
            gres = [f for f in show.split() if f.startswith("GRES=")]
            assert len(gres) == 1 and gres[0].startswith("GRES=gpu:1(IDX:"), show
            idx.add(gres[0])
        assert len(idx) == 2, f"the two running tasks share a GPU: {idx}"
    finally:
        c.run("scancel", array)
        wait_for(lambda: not any(r["state"] in ("RUNNING", "PENDING", "COMPLETING") for r in tasks(c, array).values()),
                 what=f"array {array} to end")


def test_two_clusters_at_once_and_taking_one_down_leaves_the_other_running(make_slurm_cluster, tmp_path):
    a = make_slurm_cluster(gpus=1, cpus=2)
    b = make_slurm_cluster(gpus=1, cpus=2)
    assert a.node != b.node and a.hostname == b.hostname
    assert len({a.ctld_port, a.slurmd_port, b.ctld_port, b.slurmd_port}) == 4
    # nothing under /etc/slurm points at either cluster: clients find each through SLURM_CONF
    for f in ("slurm.conf", "gres.conf", "cgroup.conf"):
        p = Path("/etc/slurm") / f
        assert not (p.is_symlink() and os.readlink(p).startswith(("/tmp", str(tmp_path))))

    jobs = {}
    for c in (a, b):
        jobs[c.node] = c.run("sbatch", "--parsable", "--gres=gpu:1", "-o", str(c.work / "job-%j.log"),
                             str(sleeper(c, "long.sh"))).stdout.strip()
    for c in (a, b):
        wait_for(lambda: running(c, jobs[c.node]), what=f"job {jobs[c.node]} running on {c.node}")
        # each sees its own job only, on its own node
        assert c.run("squeue", "-h", "-o", "%N").stdout.split() == [c.node]
    b_procs = {pid: start_time(pid) for pid in b.job_processes()}
    assert b_procs, f"no process of {b.node}'s job found"
    cgroups_b = sorted(Path("/sys/fs/cgroup").glob(f"*/slurm_{b.node}"))
    assert cgroups_b, f"{b.node} has no cgroup of its own"

    a.down()
    assert not list(Path("/sys/fs/cgroup").glob(f"*/slurm_{a.node}"))
    assert not a.job_processes()
    # b: its daemons, its job and its job's processes are untouched, and it still runs jobs
    assert all(proc.poll() is None for _, proc, _ in b.procs)
    assert running(b, jobs[b.node])
    assert alive(b_procs), f"{b.node}'s job processes died with {a.node}"
    assert all(d.exists() for d in cgroups_b)
    b.run("srun", "-N1", "-n1", "--quiet", "true")


def test_the_knobs_reach_slurm_conf_and_down_kills_what_linuxproc_leaves(make_slurm_cluster):
    c = make_slurm_cluster(proctrack="linuxproc", gpus=0, min_job_age=7, kill_wait=2)
    conf = c.config()
    assert conf["ProctrackType"] == "proctrack/linuxproc"
    assert conf["MinJobAge"] == "7 sec"
    assert conf["KillWait"] == "2 sec"
    assert c.proctrack == "linuxproc"

    # a daemon (its own session, its parent gone): proctrack/linuxproc does not find it on scancel
    pidfile = c.work / "daemon.pid"
    script = sleeper(c, "daemon.sh", f"sh -c \"setsid sh -c 'echo \\$\\$ > {pidfile}; exec sleep 1234' &\"\nsleep 300")
    job = c.run("sbatch", "--parsable", "-o", str(c.work / "daemon-%j.log"), str(script)).stdout.strip()
    pid = wait_for(lambda: pidfile.exists() and pidfile.read_text().strip().isdigit() and int(pidfile.read_text()),
                   what="the job's daemon to write its pid")
    started = start_time(pid)
    c.run("scancel", job)
    wait_for(lambda: c.state(job) == "CANCELLED", what=f"job {job} CANCELLED")
    assert start_time(pid) == started, "proctrack/linuxproc killed the setsid'ed daemon (expected it to survive)"
    assert pid in c.job_processes()
    c.down()
    assert start_time(pid) != started, "down() left the job's daemon running"


def test_the_squeue_shim_logs_each_call_and_runs_the_real_squeue(slurm_cluster: SlurmCluster, tmp_path):
    c = slurm_cluster
    shim_dir = tmp_path / "bin"
    shim = c.squeue_shim(shim_dir)
    assert shim == shim_dir / "squeue" and os.access(shim, os.X_OK)
    path = {"PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}"}
    job = c.run("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true").stdout.strip()
    first = c.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%i|%T", env=path).stdout
    assert first.startswith(f"{job}|")
    c.run("sh", "-c", "squeue -h -o '%i %T' >/dev/null", env=path)
    calls = squeue_calls(shim_dir)
    assert [argv for _, argv in calls] == [["-h", "-t", "all", "-j", job, "-o", "%i|%T"], ["-h", "-o", "%i %T"]]
    assert calls[0][0] <= calls[1][0]
    assert len((shim_dir / "squeue.log").read_text().splitlines()) == 2  # one line per call


def test_sixteen_declared_cpus_run_sixteen_tasks_at_once_on_a_small_machine(slurm_cluster: SlurmCluster):
    c = slurm_cluster
    assert c.run("sinfo", "-h", "-n", c.node, "-o", "%c").stdout.strip() == "16"
    array = c.run("sbatch", "--parsable", "--array=0-15", "-o", "/dev/null", "--wrap", "sleep 300").stdout.strip()
    try:
        wait_for(lambda: [r["state"] for r in tasks(c, array).values()] == ["RUNNING"] * 16,
                 what=f"the 16 tasks of array {array} running at once",
                 detail=lambda: c.run("squeue", "-h", "-r", "-t", "all", "-o", SQUEUE_FORMAT).stdout)
    finally:
        c.run("scancel", array)
        wait_for(lambda: not any(r["state"] in ("RUNNING", "PENDING", "COMPLETING") for r in tasks(c, array).values()),
                 what=f"array {array} to end")


def test_an_up_that_fails_leaves_no_daemon_and_no_job(tmp_path, monkeypatch):
    if slurm_missing():
        pytest.skip(slurm_missing())

    def failing_probe(self: SlurmCluster) -> None:
        self.run("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300")
        raise RuntimeError("the probe failed (on purpose)")

    monkeypatch.setattr(SlurmCluster, "_probe", failing_probe)
    c = SlurmCluster(tmp_path / "slurm")
    with pytest.raises(RuntimeError, match="on purpose"):
        c.up()
    assert not c.procs and not c.job_processes(helpers=True)
    assert not list(Path("/sys/fs/cgroup").glob(f"*/slurm_{c.node}"))
    assert not (c.base / "pids").exists()
