"""An observer beside a running task: ``srun --overlap --jobid RAW -w NODE <python> -m
gpudeck.agents --observe``. It reports the node's GPUs (NVML, or the tests' stand-in) and host
figures as snapshots on stdout, once per interval, and exits when its stdin closes (the cluster
agent went away). It never launches, kills or writes anything: it is a step of the user's job,
and Slurm ends it with the job.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from ..contract import wire
from ..contract.wire import Snapshot


def observe(node: str, home: Path, interval_s: float, simulate_gpus: Optional[str], nvml: bool = True,
            count: Optional[int] = None) -> int:
    from ..host import HostSampler

    if simulate_gpus:
        from ..simgpu import SimGpuSampler
        gpu = SimGpuSampler(home, simulate_gpus)
    else:
        from ..gpu import GpuSampler
        gpu = GpuSampler(enabled=nvml)
    host = HostSampler()
    done = threading.Event()

    def watch_stdin() -> None:  # the cluster agent closes our stdin when it no longer wants us
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    out = sys.stdout.buffer
    seq = 0
    while not done.is_set():
        seq += 1
        snap = Snapshot(node=node, seq=seq, t=time.time(), host=host.sample([os.getcwd()]), gpus=gpu.sample(),
                        jobs=[], gpu_error=gpu.error, gpus_simulated=getattr(gpu, "simulated", False))
        try:
            out.write(wire.encode(snap))
            out.flush()
        except (BrokenPipeError, ValueError, OSError):
            return 0
        if count is not None and seq >= count:
            return 0
        done.wait(interval_s)
    return 0
