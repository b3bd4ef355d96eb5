"""The last hour of compact samples, kept by the agent so a client that reconnects
(after a laptop's sleep, a dropped link) can redraw what it missed."""

from __future__ import annotations

from collections import deque

from agents.protocol import Sample, Snapshot


class HistoryRing:
    def __init__(self, seconds: float = 3600.0, interval_s: float = 1.0) -> None:
        self.samples: deque[Sample] = deque(maxlen=max(1, int(seconds / max(interval_s, 1e-3))))

    def record(self, snap: Snapshot) -> None:
        self.samples.append(Sample(
            t=snap.t,
            gpu_mem_mib=[round(g.mem_used_mib, 1) for g in snap.gpus],
            gpu_util=[g.util_pct for g in snap.gpus],
            job_tokens_per_s={j.name: _tps(j) for j in snap.jobs if j.state in ("running", "starting")},
            job_done={j.name: j.progress.done for j in snap.jobs if j.progress is not None},
        ))

    def since(self, t: float = 0.0) -> list[Sample]:
        return [s for s in self.samples if s.t > t]


def _tps(job):
    if job.progress is not None and job.progress.tokens_per_s is not None:
        return round(job.progress.tokens_per_s, 2)
    if job.engine is not None and job.engine.tokens_per_s is not None:
        return round(job.engine.tokens_per_s, 2)
    return None
