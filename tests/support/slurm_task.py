"""A Slurm task for the tests: it holds simulated GPU memory (agents/simgpu.py claim files in
HOME) on the GPUs Slurm gave it, by IDX ($SLURM_JOB_GPUS), as a real job holds NVML memory.

    python slurm_task.py HOME [--mib M] [--setsid-holder] [--exit CODE] [--sleep S]

``--setsid-holder``: the memory is held by a child that left the job's session (setsid), as a
daemonized server would: proctrack/linuxproc does not kill it, proctrack/cgroup does.
``--exit CODE`` after ``--sleep S`` seconds: end by itself with that code.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def gpus() -> list[int]:
    return [int(g) for g in os.environ.get("SLURM_JOB_GPUS", "").split(",") if g.strip()]


def hold(home: str, mib: float) -> None:
    from gpudeck.agents.simgpu import claim
    for g in gpus():
        claim(Path(home), g, mib, 40.0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("home")
    ap.add_argument("--mib", type=float, default=70000.0)
    ap.add_argument("--setsid-holder", action="store_true")
    ap.add_argument("--exit", type=int, default=None)
    ap.add_argument("--sleep", type=float, default=3600.0)
    args = ap.parse_args()
    if args.setsid_holder:
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork():
                os._exit(0)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            hold(args.home, args.mib)
            while True:
                time.sleep(1)
        os.waitpid(pid, 0)
    else:
        hold(args.home, args.mib)
    print(f"task {os.environ.get('SLURM_ARRAY_TASK_ID')} holds GPUs {gpus()}", flush=True)
    time.sleep(args.sleep)
    return args.exit or 0


if __name__ == "__main__":
    sys.exit(main())
