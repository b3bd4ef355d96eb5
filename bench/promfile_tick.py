"""What the Prometheus textfile (agents/node/promfile.py, `--textfile-dir`) costs the agent each tick,
at 8 stand-in GPUs and 16 jobs that each hold GPU memory and report progress.

    python bench/promfile_tick.py [--ticks 200] [--interval 0.05] [--rounds 2] [--writes 2000]

Two measures in one run:

- in process: a real snapshot of that node (taken from the agent below, decoded) written with
  TextfileWriter ``--writes`` times; CPU per write, and the families alone without the file;
- the agent itself: CPU per tick without `--textfile-dir` (the baseline) and with it, in turns
  (``--rounds`` each, the lowest kept: the machine is shared).

The ratio printed last is the textfile's share of the baseline tick (in process, the precise one).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import psutil

ROOT = Path(__file__).resolve().parent.parent
GPUS = "8xH200:141"


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def jobs(home: Path, n: int) -> list[dict]:
    """Busy-ish jobs that hold 4 GiB of a stand-in GPU each and report progress, as a generation worker would."""
    script = ('i=0; while true; do i=$((i+1)); printf \'{"done": %d, "total": 100000000, "tokens": %d}\' $i $((i*300)) '
              '> "$GPUDECK_PROGRESS_FILE.tmp"; mv "$GPUDECK_PROGRESS_FILE.tmp" "$GPUDECK_PROGRESS_FILE"; sleep 0.5; done')
    return [{"name": f"job{i}", "gpus": [i % 8],
             "command": [sys.executable, "-m", "gpudeck.agents.simgpu", str(home), str(i % 8), "4096", "--",
                         "sh", "-c", script]} for i in range(n)]


def measure_agent(home: Path, ticks: int, interval: float, njobs: int, textfile: Optional[Path]) -> tuple[float, bytes]:
    """CPU per tick of an agent with a console reading its snapshots, and its last snapshot line."""
    args = [sys.executable, "-m", "gpudeck.agents", "--home", str(home), "--node", "bench", "--interval", str(interval),
            "--simulate-gpus", GPUS]
    if textfile is not None:
        args += ["--textfile-dir", str(textfile)]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env(), cwd=ROOT)
    p = psutil.Process(proc.pid)

    def send(rid: int, op: str, **a) -> None:
        proc.stdin.write((json.dumps({"type": "request", "id": rid, "op": op, "args": a}) + "\n").encode())
        proc.stdin.flush()

    def read_until(pred) -> tuple[dict, bytes]:
        while True:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("agent exited")
            msg = json.loads(line)
            if pred(msg):
                return msg, line

    def snapshot() -> Optional[bytes]:
        msg, line = read_until(lambda m: m["type"] in ("snapshot", "reply"))
        return line if msg["type"] == "snapshot" else None

    try:
        read_until(lambda m: m["type"] == "hello")
        send(1, "configure", jobs=jobs(home, njobs))
        for i in range(njobs):
            send(10 + i, "launch", job=f"job{i}")
        warm = 0
        while warm < 40:  # warm up: imports, job start, their claims, the first rates
            warm += snapshot() is not None
        c0 = sum(p.cpu_times()[:2])
        seen, last = 0, b""
        while seen < ticks:
            line = snapshot()
            if line is not None:
                seen, last = seen + 1, line
        cpu = sum(p.cpu_times()[:2]) - c0
        for i in range(njobs):
            send(100 + i, "kill", job=f"job{i}", grace_s=1)
        for i in range(njobs):  # every kill answered before the console leaves: no job outlives the bench
            read_until(lambda m: m["type"] == "reply" and m.get("id", 0) >= 100)
        proc.stdin.close()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
        for state in home.glob("jobs/*/state.json"):
            try:
                os.killpg(json.loads(state.read_text())["pgid"], 9)
            except (OSError, ValueError, KeyError, TypeError):
                pass
    return cpu / ticks, last


def measure_in_process(line: bytes, directory: Path, writes: int) -> tuple[float, float, int, int]:
    """CPU per TextfileWriter.write of one real snapshot, per families-and-text alone, the
    file's size and its number of samples."""
    import dataclasses

    from gpudeck.agents.contract import wire
    from gpudeck.agents.node.promfile import TextfileWriter, generate_text

    snap = wire.decode(line)
    assert isinstance(snap, wire.Snapshot)
    w = TextfileWriter(str(directory))
    snaps = [dataclasses.replace(snap, seq=i + 1) for i in range(writes)]
    for s in snaps[:50]:  # warm
        generate_text(s)
    c0 = time.process_time()
    for s in snaps:
        w.write(s)
    per_write = (time.process_time() - c0) / writes
    c0 = time.process_time()
    for s in snaps:
        generate_text(s)
    per_text = (time.process_time() - c0) / writes
    text = (directory / "gpudeck.prom").read_text()
    samples = sum(1 for ln in text.splitlines() if ln and not ln.startswith("#"))
    return per_write, per_text, len(text.encode()), samples


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--writes", type=int, default=2000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpudeck-bench-prom-"))
    base, withfile = [], []
    try:
        line = b""
        for r in range(args.rounds):  # in turns: a slow spell of the machine falls on both
            for on in (False, True):
                home = tmp / f"home-{r}-{on}"
                home.mkdir(mode=0o700)
                textfile = tmp / f"textfile-{r}" if on else None
                if textfile is not None:
                    textfile.mkdir()
                cpu, last = measure_agent(home, args.ticks, args.interval, args.jobs, textfile)
                (withfile if on else base).append(cpu)
                if on:
                    line = last
        inproc = tmp / "inproc"
        inproc.mkdir()
        per_write, per_text, size, samples = measure_in_process(line, inproc, args.writes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    b, w = min(base), min(withfile)
    print(f"machine: {os.cpu_count()} cores; {GPUS} stand-in GPUs, {args.jobs} jobs holding GPU memory and "
          f"reporting progress")
    print(f"the file: {samples} samples, {size} bytes")
    print(f"in process: {per_write * 1e3:.3f} ms CPU per write of gpudeck.prom "
          f"({per_text * 1e3:.3f} ms of it the families and their text, the rest the temp file and its rename)")
    print(f"baseline, the agent without --textfile-dir: {b * 1e3:.3f} ms CPU per tick (lowest of {args.rounds})")
    print(f"the agent with --textfile-dir: {w * 1e3:.3f} ms CPU per tick ({(w - b) * 1e3:+.3f} ms; the agent's "
          f"own tick varies more than that between runs)")
    print(f"at 1 Hz the textfile costs {per_write * 100:.4f}% of one core")
    print(f"ratio (textfile write / baseline agent tick): {per_write / b * 100:.1f}%")


if __name__ == "__main__":
    main()
