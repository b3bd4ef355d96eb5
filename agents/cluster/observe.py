"""The observers beside running tasks on a Slurm cluster.

:func:`observe` is one observer: ``srun --overlap --jobid RAW -w NODE <python> -m
gpudeck.agents --observe``. It reports the node's GPUs (NVML, or the tests' stand-in) and host
figures as snapshots on stdout, once per interval, and exits when its stdin closes (the cluster
agent went away). It never launches, kills or writes anything: it is a step of the user's job,
and Slurm ends it with the job.

:class:`Observers` is the cluster agent's side: one observer per running task, all on the
agent's own pipes, and the GPUs their snapshots report.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from ..contract import plain, wire
from ..contract.wire import Gpu, JobStatus, Snapshot
from ..jobs.backend import GpuReader

log = logging.getLogger("agents")


def observe(node: str, home: Path, interval_s: float, simulate_gpus: Optional[str], nvml: bool = True,
            count: Optional[int] = None) -> int:
    from ..sense.host import HostSampler

    gpu: GpuReader
    if simulate_gpus:
        from ..simgpu import SimGpuSampler
        gpu = SimGpuSampler(home, simulate_gpus)
    else:
        from ..sense.gpu import GpuSampler
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


class Observers:
    """One ``srun --overlap`` observer per running task, all on this agent's pipes.

    ``running`` gives the tasks to observe now (task name: (raw Slurm id, compute node)),
    ``argv`` the observer's command line for one of them; ``env`` is Slurm's environment."""

    def __init__(self, node: str, env: dict[str, str], running: Callable[[], dict[str, tuple[str, str]]],
                 argv: Callable[[str, str], list[str]]) -> None:
        self.node, self.env, self.running, self.argv = node, env, running, argv
        self.procs: dict[str, tuple[str, asyncio.subprocess.Process, asyncio.Task[None]]] = {}
        self.latest: dict[str, Snapshot] = {}
        self.failed: dict[str, tuple[str, float]] = {}  # task -> (raw id, when): do not retry at once

    async def reconcile(self) -> None:
        wanted = self.running()
        for name in list(self.procs):
            raw, proc, _ = self.procs[name]
            if wanted.get(name, (None,))[0] != raw or proc.returncode is not None:
                await self._stop(name)
        now = time.monotonic()
        for name, (raw, node) in wanted.items():
            if name in self.procs:
                continue
            failed = self.failed.get(name)
            if failed is not None and failed[0] == raw and now - failed[1] < 30:
                continue
            await self._start(name, raw, node)

    async def _start(self, name: str, raw: str, node: str) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(*self.argv(raw, node), stdin=asyncio.subprocess.PIPE,
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.DEVNULL, env=self.env,
                                                        limit=16 * 2**20)
        except OSError as exc:
            log.warning("cluster %s: cannot start the observer of %s: %s", self.node, name, exc)
            self.failed[name] = (raw, time.monotonic())
            return
        task = asyncio.get_running_loop().create_task(self._read(name, raw, proc))
        self.procs[name] = (raw, proc, task)

    async def _read(self, name: str, raw: str, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while True:
            line = await proc.stdout.readline()
            if not line:
                break
            try:
                msg = wire.decode(line)
            except plain.ProtocolError:
                continue
            if isinstance(msg, Snapshot):
                self.latest[name] = msg
        await proc.wait()
        if proc.returncode not in (0, None):
            self.failed[name] = (raw, time.monotonic())

    async def _stop(self, name: str) -> None:
        raw, proc, task = self.procs.pop(name)
        self.latest.pop(name, None)
        if proc.returncode is None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
                await asyncio.wait_for(proc.wait(), 5.0)
            except (asyncio.TimeoutError, OSError):
                try:
                    proc.terminate()
                except ProcessLookupError:
                    pass
        task.cancel()

    async def close(self) -> None:
        for name in list(self.procs):
            await self._stop(name)

    def gpus(self, jobs: list[JobStatus]) -> list[Gpu]:
        """The GPUs of the observed tasks, each with its compute node."""
        out: dict[tuple[str, int], Gpu] = {}
        for job in jobs:
            snap = self.latest.get(job.name)
            if snap is None or job.task is None or not job.state.alive:
                continue
            for g in snap.gpus:
                if g.index in job.gpus:
                    procs = [dataclasses.replace(p, job=job.name) for p in g.processes]
                    out[(snap.node, g.index)] = dataclasses.replace(g, host=snap.node, processes=procs)
        return [out[k] for k in sorted(out)]
