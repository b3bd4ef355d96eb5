"""What a Slurm cluster costs the login node, and how long a kill takes to prove, on a real
single-node Slurm (tests/support/slurm.py starts it; `make test` installs the packages).

1. The poll at 256 tasks: the cluster agent's whole poll (one squeue, parsing, newest row per
   task, scontrol -d for newly running tasks) against the bare `squeue` call it makes, in the
   same run.
2. The kill verdicts: a task holding (simulated) GPU memory, killed with `gpudeck kill`, under
   proctrack/cgroup (ok: memory back) and under proctrack/linuxproc with a daemon that left
   the job (not ok: the verdict names the pid and GiB).

    python bench/slurm_cluster.py [--tasks 256] [--polls 20]

Prints the ratio (poll / bare squeue) last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.slurm import SlurmCluster, slurm_missing  # noqa: E402
from support.wait import wait_for  # noqa: E402


def fleet(tmp: Path, cluster: SlurmCluster, name: str, shards: int, gpus: int, task_args: list[str]) -> Path:
    home = tmp / f"home-{name}"
    argv = [sys.executable, str(ROOT / "tests" / "support" / "slurm_task.py"), str(home), *task_args]
    path = tmp / f"{name}.toml"
    path.write_text(f"""
[[clusters]]
name = "lab"
login = "local"
partition = "debug"
shared_dir = {json.dumps(str(tmp / 'shared'))}
agent_home = {json.dumps(str(home))}
poll_s = 10
python = {json.dumps(sys.executable)}
simulate_gpus = "{cluster.gpus}xH200:141"
env = {{ SLURM_CONF = {json.dumps(str(cluster.conf))} }}

[[jobs]]
name = "b"
cluster = "lab"
command = {json.dumps(argv)}
gpus = {gpus}
shards = {shards}
time = "30:00"
""")
    return path


def gpudeck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpudeck.console", *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def states(path: Path) -> dict[str, dict]:
    r = gpudeck("status", "-f", str(path), "--json")
    return {j["name"]: j for j in json.loads(r.stdout)["jobs"]} if r.returncode == 0 else {}


def poll_cost(tmp: Path, tasks: int, polls: int) -> tuple[float, float]:
    from gpudeck.agents.cluster.backend import ClusterJobs
    from gpudeck.agents.sense.gpu import GpuSampler
    from gpudeck.remote.fleet import load_fleet

    cluster = SlurmCluster(tmp / "c-poll").up()
    try:
        path = fleet(tmp, cluster, "poll", tasks, 0, ["--sleep", "3600"])
        assert gpudeck("launch", "-f", str(path), "b").returncode == 0
        wait_for(lambda: sum(1 for j in states(path).values() if j["state"] == "running") >= 1, 60, "tasks running")
        node = load_fleet(path).node("lab")
        agent = ClusterJobs(tmp / "home-poll-agent", "lab", node.cluster, GpuSampler(enabled=False))
        agent.configure(load_fleet(path).jobs)
        agent.fleet = "poll"
        agent.poll()
        assert len(agent.rows) == tasks, f"{len(agent.rows)} rows for {tasks} tasks"
        bare, full = [], []
        argv = ["squeue", "--me", "-h", "-r", "-t", "all", "-o", "%i|%A|%K|%T|%r|%N|%b|%M|%l|%j"]
        for _ in range(polls):
            t0 = time.perf_counter()
            subprocess.run(argv, capture_output=True, env=agent.slurm.env, check=True)
            bare.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            agent.poll()
            full.append(time.perf_counter() - t0)
        snap_t0 = time.perf_counter()
        agent.statuses(time.time(), True)
        snap_s = time.perf_counter() - snap_t0
        print(f"poll at {tasks} tasks: median {statistics.median(full) * 1000:.1f} ms "
              f"(bare squeue {statistics.median(bare) * 1000:.1f} ms); a snapshot of {tasks} rows "
              f"{snap_s * 1000:.1f} ms", flush=True)
        gpudeck("kill", "-f", str(path), "b")
        return statistics.median(full), statistics.median(bare)
    finally:
        cluster.down()


def kill_verdict(tmp: Path, proctrack: str) -> None:
    cluster = SlurmCluster(tmp / f"c-{proctrack}", proctrack=proctrack).up()
    try:
        args = ["--mib", "70000"] + (["--setsid-holder"] if proctrack == "linuxproc" else [])
        path = fleet(tmp, cluster, proctrack, 1, 1, args)
        assert gpudeck("launch", "-f", str(path), "b").returncode == 0
        wait_for(lambda: states(path).get("b/0", {}).get("state") == "running", 60, "b/0 running")
        time.sleep(1.0)  # the task writes its claim after its start
        t0 = time.monotonic()
        r = gpudeck("kill", "-f", str(path), "b/0")
        wall = time.monotonic() - t0
        verdict = states(path)["b/0"]["last_kill"] or {}
        print(f"kill under proctrack/{proctrack}: exit {r.returncode}, verdict in {verdict.get('seconds') or 0:.2f} s "
              f"(the command {wall:.2f} s): {verdict.get('message')}", flush=True)
        import psutil
        for h in verdict.get("gpu_holders") or []:
            psutil.Process(h["pid"]).kill()
    finally:
        cluster.down()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=256)
    ap.add_argument("--polls", type=int, default=20)
    args = ap.parse_args()
    missing = slurm_missing()
    if missing:
        print(missing)
        return 2
    with tempfile.TemporaryDirectory(prefix="gd-bench-slurm-") as d:
        tmp = Path(d)
        kill_verdict(tmp, "cgroup")
        kill_verdict(tmp, "linuxproc")
        full, bare = poll_cost(tmp, args.tasks, args.polls)
    print(f"ratio: the agent's poll / a bare squeue = {full / bare:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
