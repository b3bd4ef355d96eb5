"""The agent's history: the last hour of compact samples in memory (the rate windows of a new
agent start from them, and a console that connects is sent them), and every tick into the
node's history database (``<home>/history.db``, agents/history/db.py), which keeps 90 days at
falling resolution.

A console that connects is greeted with the last ``BACKFILL_S`` (12 hours): a minute's means
for each minute before the last hour, then every sample of it. Both come from memory (loaded
from the database when the agent starts, and kept up as minutes roll up), so a greeting reads
no file. ``ReadHistory`` reads the database itself, in a thread.

Time only goes forward here as in the database: a sample at or before the newest is left out
(a clock stepped back by up to an hour), or, for a clock stepped back by more, the samples
ahead of it are dropped.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import deque
from pathlib import Path
from typing import Callable, Optional

from ..contract import ops
from ..contract.vocab import JobState
from ..contract.wire import Sample, Snapshot
from .db import REWIND_SKIP_S, HistoryDB
from .rows import Row, job_tps, minute_sample

log = logging.getLogger(__name__)

BACKFILL_S = 12 * 3600.0  # what a console is sent when it connects


class HistoryRing:
    def __init__(self, seconds: float = 3600.0, interval_s: float = 1.0, path: Optional[Path] = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.seconds = seconds
        self._samples: deque[Sample] = deque(maxlen=max(1, int(seconds / max(interval_s, 1e-3))))
        self.minutes: deque[Sample] = deque(maxlen=int(BACKFILL_S // 60))
        self.path = Path(path) if path else None  # None (--no-history): memory only
        self.readonly = False  # --once: read what the last agents kept, write nothing
        self.clock = clock
        self.db: Optional[HistoryDB] = None
        self._loaded = False

    @property
    def samples(self) -> deque[Sample]:
        self._load()
        return self._samples

    def _load(self) -> None:
        """Open the database (on first use, so that --once and --no-history never do) and fill
        memory from it."""
        if self._loaded:
            return
        self._loaded = True
        if self.path is None:
            return
        self.db = HistoryDB(self.path, clock=self.clock, readonly=self.readonly)
        self.db.on_minute = self._minute_rolled
        now = self.clock()
        try:
            self._samples.extend(s for s in self.db.raw_samples(now - self.seconds) if s.t <= now)
            first = self._samples[0].t if self._samples else now
            self.minutes.extend(s for s in self.db.samples(now - BACKFILL_S, first) if s.t < first)
        except sqlite3.Error as exc:
            log.warning("history %s cannot be read: %s", self.path, exc)
        old = self.path.with_name("history.jsonl")
        if self.readonly:
            return  # what an older agent kept: an hour, now in the database's place
        if old.exists():
            try:
                old.unlink()
            except OSError:
                pass

    def record(self, snap: Snapshot) -> Sample:
        self._load()
        sample = Sample(
            t=round(snap.t, 3),
            gpu_mem_mib=[round(g.mem_used_mib, 1) for g in snap.gpus],
            gpu_util=[g.util_pct for g in snap.gpus],
            job_tokens_per_s={j.name: job_tps(j) for j in snap.jobs if j.state in (JobState.RUNNING, JobState.STARTING)},
            job_done={j.name: j.progress.done for j in snap.jobs if j.progress is not None},
            job_tokens={j.name: j.progress.tokens for j in snap.jobs
                        if j.progress is not None and j.progress.tokens is not None},
        )
        if self.db is not None and not self.readonly:
            verdict = self.db.record(snap)
        else:
            verdict = step(self._samples[-1].t if self._samples else None, sample.t)
        if verdict == "skip":
            return sample
        if verdict == "rewind":
            for q in (self._samples, self.minutes):
                while q and q[-1].t >= sample.t:
                    q.pop()
        self._samples.append(sample)
        return sample

    def _minute_rolled(self, t: float, agg: Row) -> None:
        s = minute_sample(t, agg)
        if not self.minutes or s.t > self.minutes[-1].t:
            self.minutes.append(s)

    def since(self, t: float = 0.0) -> list[Sample]:
        return [s for s in self.samples if s.t > t]

    def greeting(self) -> list[Sample]:
        """What a console is sent when it connects: the last 12 hours, oldest first."""
        ring = list(self.samples)
        first = ring[0].t if ring else float("inf")
        return [m for m in self.minutes if m.t < first] + ring

    def read(self, op: ops.ReadHistory, node: str = "") -> ops.HistoryPage:
        """``ReadHistory``, in a thread: the ring is copied whole (list() of a deque holds the
        GIL), the database read on a connection of its own."""
        ring = list(self.samples)
        until = op.until if op.until is not None else float("inf")
        if op.resolution is None:
            first = ring[0].t if ring else self.clock()
            older: list[Sample] = []
            if self.db is not None and op.since < first:
                older = [s for s in self.db.samples(op.since, min(first, until)) if op.since < s.t < first]
            return ops.HistoryPage(samples=older + [s for s in ring if op.since < s.t <= until], node=node)
        if self.db is None:
            raise ValueError(f"node {node}: history is off on this node (the agent runs with --no-history)")
        resolution, points = self.db.read(op.since, op.until, op.resolution, op.gpu, op.job, op.gpus_only)
        return ops.HistoryPage(points=points, resolution=resolution, node=node)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


def step(newest: Optional[float], t: float) -> str:
    """A sample at ``t`` after the newest at ``newest``: "ok", "skip" (the clock went back a
    little) or "rewind" (it went back more than an hour)."""
    if newest is None or t > newest:
        return "ok"
    return "skip" if newest - t <= REWIND_SKIP_S else "rewind"
