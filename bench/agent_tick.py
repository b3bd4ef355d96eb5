"""What the agent costs a node: CPU per tick and RSS, against one poll done the way
gpustat-web does it (a fresh Python process per poll, here `python -m gpudeck.agents --once`, which
does the same sampling work). Then the watcher case: 8 stand-in GPUs, 16 jobs with restart
policies and deadlines, 3 notify targets, the GPU health checks on. Prints the ratio last.

    python bench/agent_tick.py [--ticks 200] [--interval 0.05] [--jobs 4] [--polls 20] [--nvml] [--no-watch]
    python bench/agent_tick.py --history [--ticks 200] [--interval 0.05]

``--history``: only the detached watcher case, twice in the same run: first with
``--no-history`` (the baseline: no history database), then with it (<home>/history.db,
agents/history/db.py); the ratio is printed last.

The agent runs with --interval short so that many ticks fit in a short run; at a real 1 Hz
pace (``--interval 1 --ticks 60``) a tick costs more for the same work (docs/history.md#cost
says why). The CPU is the kernel's count of the process's threads in nanoseconds
(``cpu_seconds``; before, psutil's user + system time in 10 ms steps). bench/tick_parts.py
says which part of a tick costs what.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import psutil

ROOT = Path(__file__).resolve().parent.parent


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def watch_jobs(n: int) -> list[dict]:
    """The watcher case's jobs: each with a restart policy, a stall restart and a deadline."""
    return [{**j, "restart": "on-failure", "restart_on_stall": "30m", "deadline": "2099-01-01T00:00:00Z"}
            for j in jobs(n)]


WATCH = {"notify": [{"url": f"http://127.0.0.1:9/hook/{i}", "format": f} for i, f in enumerate(("json", "slack", "ntfy"))],
         "alerts": {"gpu_temp_c": 85, "disk_free_pct": 5, "idle_gpu_s": 1800}}


def jobs(n: int) -> list[dict]:
    # busy-ish jobs that report progress, as a generation worker would
    script = ('i=0; while true; do i=$((i+1)); printf \'{"done": %d, "total": 100000000, "tokens": %d}\' $i $((i*300)) '
              '> "$GPUDECK_PROGRESS_FILE.tmp"; mv "$GPUDECK_PROGRESS_FILE.tmp" "$GPUDECK_PROGRESS_FILE"; sleep 0.5; done')
    return [{"name": f"job{i}", "command": ["sh", "-c", script], "gpus": [i % 8]} for i in range(n)]


def cpu_seconds(p: psutil.Process) -> float:
    """The CPU time of ``p``'s threads as the kernel counts it, in nanoseconds
    (/proc/<pid>/task/*/schedstat): psutil's user + system time comes in steps of the kernel's
    clock, 10 ms, and a tick at 1 Hz costs about 2 ms, so 60 ticks were read to 0.17 ms. A
    thread that ended meanwhile is not counted (the agent's threads live as long as it does);
    psutil's figure where there is no schedstat."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{p.pid}/task"):
            with open(f"/proc/{p.pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        return sum(p.cpu_times()[:2])


def measure_agent(home: Path, ticks: int, interval: float, njobs: int, nvml: bool,
                  watch: bool = False, sim: bool = False, detached: Optional[list] = None,
                  extra: tuple = ()) -> tuple[float, float, int]:
    """CPU per tick, wall per tick and RSS of an agent with a console reading its snapshots.
    ``detached`` (a list, watch only): then the console starts the watch and leaves, and the
    detached watcher that takes the node over is measured too, with no console, appended as
    (CPU per tick, RSS)."""
    args = [sys.executable, "-m", "gpudeck.agents", "--home", str(home), "--node", "bench", "--interval", str(interval),
            *extra]
    if watch or sim:
        args += ["--simulate-gpus", "8xH200:141"]
    elif not nvml:
        args.append("--no-nvml")
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env(), cwd=ROOT)
    p = psutil.Process(proc.pid)

    def send(rid: int, op: str, **a) -> None:
        proc.stdin.write((json.dumps({"type": "request", "id": rid, "op": op, "args": a}) + "\n").encode())
        proc.stdin.flush()

    def read_until(pred):
        while True:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("agent exited")
            msg = json.loads(line)
            if pred(msg):
                return msg

    read_until(lambda m: m["type"] == "hello")
    if watch:
        send(1, "configure", jobs=watch_jobs(njobs), watch=WATCH)
    else:
        send(1, "configure", jobs=jobs(njobs))
    for i in range(njobs):
        send(10 + i, "launch", job=f"job{i}")
    warm = 0
    while warm < 20:  # warm up: imports, first scrapes, job start
        if read_until(lambda m: m["type"] in ("snapshot", "reply"))["type"] == "snapshot":
            warm += 1
    c0 = cpu_seconds(p)
    seen = 0
    t0 = time.monotonic()
    while seen < ticks:
        if read_until(lambda m: m["type"] in ("snapshot", "reply"))["type"] == "snapshot":
            seen += 1
    wall = time.monotonic() - t0
    cpu = cpu_seconds(p) - c0
    rss = p.memory_info().rss
    if watch and detached is not None:
        send(99, "watch", on=True)
        read_until(lambda m: m["type"] == "reply" and m.get("id") == 99)
        proc.stdin.close()
        proc.wait(60)
        detached.append(measure_detached(home, ticks, interval))
        return cpu / ticks, wall / ticks, rss
    for i in range(njobs):
        send(100 + i, "kill", job=f"job{i}", grace_s=1)
    for i in range(njobs):  # every kill answered before the console leaves: no job outlives the bench
        read_until(lambda m: m["type"] == "reply" and m.get("id", 0) >= 100)
    proc.stdin.close()
    proc.wait(60)
    return cpu / ticks, wall / ticks, rss


def measure_detached(home: Path, ticks: int, interval: float) -> tuple[float, int]:
    """The detached watcher that took ``home`` over once its console left: CPU per tick over
    ``ticks`` intervals and RSS; then it and its jobs are killed."""
    deadline = time.monotonic() + 60
    watcher = None
    while watcher is None and time.monotonic() < deadline:
        try:
            pid = int((home / "agent.lock").read_text().split()[0])
            if "--detached" in psutil.Process(pid).cmdline():
                watcher = psutil.Process(pid)
        except (OSError, ValueError, IndexError, psutil.Error):
            pass
        time.sleep(0.1)
    if watcher is None:
        raise RuntimeError("no detached watcher took the node over")
    try:
        time.sleep(20 * interval + 1.0)  # its start: imports, adoption, first ticks
        c0 = cpu_seconds(watcher)
        time.sleep(ticks * interval)
        cpu = cpu_seconds(watcher) - c0
        rss = watcher.memory_info().rss
    finally:
        (home / "watch.json").write_text(json.dumps({"watching": False}))
        watcher.kill()
        for state in home.glob("jobs/*/state.json"):
            try:
                os.killpg(json.loads(state.read_text())["pgid"], 9)
            except (OSError, ValueError, KeyError, TypeError):
                pass
    return cpu / ticks, rss


def measure_fresh_process(home: Path, polls: int, nvml: bool) -> float:
    args = [sys.executable, "-m", "gpudeck.agents", "--once", "--home", str(home)]
    if not nvml:
        args.append("--no-nvml")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(polls):
        subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(), cwd=ROOT, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / polls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--polls", type=int, default=20)
    ap.add_argument("--nvml", action="store_true", help="sample GPUs through NVML (on a GPU machine)")
    ap.add_argument("--no-watch", action="store_true", help="leave out the watcher case")
    ap.add_argument("--history", action="store_true", help="the watcher case with the history database off, then on")
    args = ap.parse_args()
    if args.history:
        return history_case(args.ticks, args.interval)
    home = Path(tempfile.mkdtemp(prefix="gpudeck-bench-"))
    whome = Path(tempfile.mkdtemp(prefix="gpudeck-bench-watch-"))
    shome = Path(tempfile.mkdtemp(prefix="gpudeck-bench-same-"))
    try:
        per_poll = measure_fresh_process(home, args.polls, args.nvml)
        per_tick, wall_tick, rss = measure_agent(home, args.ticks, args.interval, args.jobs, args.nvml)
        if not args.no_watch:  # the same load without the watcher's settings, then with them
            s_tick, _, s_rss = measure_agent(shome, args.ticks, args.interval, 16, False, sim=True)
            alone: list = []
            w_tick, w_wall, w_rss = measure_agent(whome, args.ticks, args.interval, 16, False, watch=True,
                                                  detached=alone)
            d_tick, d_rss = alone[0]
    finally:
        for d in (home, whome, shome):
            shutil.rmtree(d, ignore_errors=True)
    print(f"machine: {os.cpu_count()} cores, nvml={'on' if args.nvml else 'off'}, {args.jobs} jobs reporting progress")
    print(f"baseline, a fresh python process per poll: {per_poll * 1e3:.1f} ms CPU per poll")
    print(f"agent: {per_tick * 1e3:.3f} ms CPU per tick ({wall_tick * 1e3:.1f} ms wall between ticks)")
    print(f"agent at 1 Hz: {per_tick * 100:.3f}% of one core")
    print(f"agent RSS: {rss / 2**20:.1f} MB")
    if not args.no_watch:
        print(f"watcher (8 stand-in GPUs, 16 jobs with restart policies and deadlines, 3 notify targets, "
              f"health checks): {w_tick * 1e3:.3f} ms CPU per tick ({w_wall * 1e3:.1f} ms wall between ticks)")
        print(f"watcher at 1 Hz: {w_tick * 100:.3f}% of one core, with a console reading its snapshots")
        print(f"watcher RSS: {w_rss / 2**20:.1f} MB (goal: at most 60 MB)")
        print(f"the watcher alone, detached, no console (as it runs when nobody looks): {d_tick * 1e3:.3f} ms CPU "
              f"per tick = {d_tick * 100:.3f}% of one core at 1 Hz (goal: under 0.2%), RSS {d_rss / 2**20:.1f} MB")
        print(f"the same 8 GPUs and 16 jobs without the watcher's settings: {s_tick * 1e3:.3f} ms CPU per tick "
              f"({s_tick * 100:.3f}% of a core at 1 Hz), RSS {s_rss / 2**20:.1f} MB")
        print(f"the watcher's own share: {(w_tick - s_tick) * 1e3:+.3f} ms per tick "
              f"({(w_tick - s_tick) * 100:+.3f}% of a core at 1 Hz)")
    print(f"ratio (baseline CPU per poll / agent CPU per tick): {per_poll / per_tick:.0f}x")


def history_case(ticks: int, interval: float) -> None:
    """The detached watcher (8 stand-in GPUs, 16 jobs) with no history database, then with one."""
    out = {}
    for label, extra in (("off", ("--no-history",)), ("on", ())):
        home = Path(tempfile.mkdtemp(prefix=f"gpudeck-bench-history-{label}-"))
        try:
            alone: list = []
            measure_agent(home, ticks, interval, 16, False, watch=True, detached=alone, extra=extra)
            out[label] = alone[0]
            size = sum(p.stat().st_size for p in home.glob("history.db*"))
        finally:
            shutil.rmtree(home, ignore_errors=True)
        tick, rss = out[label]
        print(f"watcher alone, history {label}: {tick * 1e3:.3f} ms CPU per tick = {tick * 100:.3f}% of one core "
              f"at 1 Hz (goal: under 0.2%), RSS {rss / 2**20:.1f} MB" + (f", history.db* {size / 2**10:.0f} KiB"
                                                                         if label == "on" else ""))
    (off, _), (on, _) = out["off"], out["on"]
    print(f"the history's own share: {(on - off) * 1e3:+.3f} ms per tick ({(on - off) * 100:+.3f}% of a core at 1 Hz)")
    print(f"ratio (history on / off, CPU per tick): {on / off:.2f}x")


if __name__ == "__main__":
    main()
