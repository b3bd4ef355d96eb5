"""What an operator must look at now, computed from one node's readings, and since when.

Every alert leaves the node with the time it began there (``Alert.since``), so every console
and ``status --json`` show the same one. Most rules know it themselves: a job's end, a write
that failed, a condition of the watcher (``watch-state.json``, kept across a new agent), an
XID error, a restart policy that gave up. :class:`AlertClock` stamps the rest with the tick
it first saw them, on the node.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from ..contract.vocab import AlertKind, EngineState, JobState
from ..contract.jobs import JobSpec
from ..contract.stall import engine_quiet_since, quiet_since
from ..contract.wire import Alert, Gpu, Host, JobStatus

DISK_LOW_FRACTION = 0.05


def node_alerts(gpus: list[Gpu], jobs: list[JobStatus], specs: dict[str, JobSpec], host: Optional[Host],
                last_change: dict[str, Optional[float]], now: float) -> list[Alert]:
    alerts: list[Alert] = []
    # two jobs on one GPU: seen by NVML, or declared by two live jobs
    for g in gpus:
        if not g.processes:  # (most GPUs of a tick: nothing to look at)
            continue
        owners = sorted({p.job for p in g.processes if p.job})
        if len(owners) > 1:
            alerts.append(Alert(AlertKind.SHARED_GPU, f"GPU {g.index}: jobs {', '.join(owners)} share it", gpu=g.index))
        for p in g.processes:
            if p.job is None:
                alerts.append(Alert(AlertKind.UNOWNED_GPU_PROCESS,
                                    f"GPU {g.index}: pid {p.pid} holds {p.used_mib / 1024:.1f} GiB and belongs to no job",
                                    gpu=g.index, pid=p.pid))
    seen = {a.gpu for a in alerts if a.kind is AlertKind.SHARED_GPU}
    live = [j for j in jobs if j.state.alive]
    by_gpu: dict[int, list[str]] = {}
    for j in live:
        for i in j.gpus:
            by_gpu.setdefault(i, []).append(j.name)
    for i, names in sorted(by_gpu.items()):
        if len(names) > 1 and i not in seen:
            alerts.append(Alert(AlertKind.SHARED_GPU, f"GPU {i}: jobs {', '.join(sorted(names))} are both given it", gpu=i))
    for j in jobs:
        missing = [i for i in j.gpus if gpus and i >= len(gpus)]
        if missing:
            alerts.append(Alert(AlertKind.NO_SUCH_GPU,
                                f"job {j.name} declares GPU {', '.join(map(str, missing))}; this node has "
                                f"{len(gpus)} (0-{len(gpus) - 1})", job=j.name, gpu=missing[0]))
        if j.state in (JobState.FAILED, JobState.LOST):
            how = f"exit code {j.exit_code}" if j.exit_code is not None else "no exit code: lost"
            alerts.append(Alert(AlertKind.JOB_DIED, f"job {j.name} died ({how}) on attempt {j.attempt}", job=j.name,
                                since=j.ended_at))
        if j.state is JobState.RUNNING and j.progress is not None:
            spec = specs.get(j.name)
            stall = spec.stall_after_s if spec else 600.0
            if j.progress.total is not None and j.progress.done >= j.progress.total:
                continue
            # a job that says it is compiling (or loading) is not stalled, up to a cap (contract/stall.py)
            since = quiet_since(j.progress, last_change.get(j.name), now)
            if since is not None and now - since > stall:
                alerts.append(Alert(AlertKind.STALLED, f"job {j.name}: no progress for {int(now - since)} s "
                                               f"while its process is alive", job=j.name))
        elif j.progress is None and j.state in (JobState.RUNNING, JobState.STARTING) and j.engine is not None and \
                (since := engine_quiet_since(j.engine, now)) is not None:
            spec = specs.get(j.name)
            if now - since > (spec.stall_after_s if spec else 600.0):  # a load that stopped moving, past the cap
                alerts.append(Alert(AlertKind.STALLED, f"job {j.name}: its engine has been {j.engine.phase} with no "
                                                       f"progress for {int(now - since)} s", job=j.name))
        if j.engine is not None and j.engine.state is EngineState.FAILED and j.state is JobState.RUNNING:
            alerts.append(Alert(AlertKind.ENGINE_FAILED, f"job {j.name}: engine at {j.engine.url}: {j.engine.error}",
                                job=j.name))
    if host is not None:
        for d in host.disks:
            if d.total_bytes and d.free_bytes / d.total_bytes < DISK_LOW_FRACTION:
                alerts.append(Alert(AlertKind.DISK_FULL, f"{d.path}: only {d.free_bytes / 2**30:.1f} GiB free "
                                                 f"({100 * d.free_bytes / d.total_bytes:.1f}%)"))
    return alerts


class AlertClock:
    """Since when each alert is up, for the alerts whose rule keeps no time: the tick the node
    first saw it, for as long as it stays. Kept in memory: a new agent starts these again."""

    def __init__(self) -> None:
        self._began: dict[tuple[Any, ...], float] = {}

    def stamp(self, alerts: list[Alert], now: float,
              known: Callable[[Alert], Optional[float]] = lambda a: None) -> list[Alert]:
        """``alerts`` with their ``since``: their own, else ``known``'s (the watcher's record
        of the condition), else when this clock first saw them."""
        began: dict[tuple[Any, ...], float] = {}
        out = []
        for a in alerts:
            key = a.ident()
            if a.since is None:
                t = known(a)
                a = dataclasses.replace(a, since=t if t is not None else self._began.get(key, now))
            began.setdefault(key, a.since)  # type: ignore[arg-type]
            out.append(a)
        self._began = began  # an alert gone is forgotten: if it comes back, it begins again
        return out
