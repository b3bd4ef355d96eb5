"""Reading the history back (``HistoryDB``'s reads, from any thread): each read opens its own
read-only connection, which WAL lets run while a tick writes. A tier's rows come with the
tail its roll-ups have not reached yet, made from the tier below, so the current hour and
minute are never missing."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Callable, Optional

from ..contract.ops import HistoryPoint
from ..contract.wire import Sample
from .rows import (GPU_METRICS, JOB_METRICS, POINTS_PER_SERIES, Row, Tier, _as_agg, _point, merge, minute_sample,
                   raw_sample)


class HistoryReads:
    """The reads of a history file at ``path`` (mixed into ``HistoryDB``, which sets these)."""

    path: Path
    tiers: tuple[Tier, ...]
    clock: Callable[[], float]  # what "now" is when reading without an `until`

    def _reader(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5.0)

    def counts(self) -> dict[str, int]:
        with _closing(self._reader()) as c:
            return {t.name: c.execute(f"SELECT count(*) FROM {t.table}").fetchone()[0] for t in self.tiers}

    def _buckets(self, c: sqlite3.Connection, level: int, since: float, until: float) -> list[tuple[float, Row]]:
        """Level ``level``'s rows in [since, until] as aggregates, with the tail its roll-ups have
        not reached yet made from the level below (the current hour from its minutes and the
        current minute's samples)."""
        tier = self.tiers[level]
        if not tier.bucket_s:
            return [(t, _as_agg(json.loads(d), False))
                    for t, d in c.execute(f"SELECT t, d FROM {tier.table} WHERE t >= ? AND t <= ? ORDER BY t",
                                          (since, until))]
        b = tier.bucket_s
        start = int(since // b) * b
        mark = self._mark_of(c, tier.table)
        end = until if mark is None else min(until, mark - 1e-9)
        out = [(float(t), json.loads(d))
               for t, d in c.execute(f"SELECT t, d FROM {tier.table} WHERE t >= ? AND t <= ? ORDER BY t", (start, end))]
        tail_from = max(start, mark if mark is not None else start)
        if tail_from <= until:
            groups: dict[int, list[Row]] = {}
            for t, agg in self._buckets(c, level - 1, tail_from, until):
                groups.setdefault(int(t // b) * b, []).append(agg)
            last = out[-1][0] if out else -1.0
            out += [(float(k), merge(v)) for k, v in sorted(groups.items()) if k > last]
        return out

    @staticmethod
    def _mark_of(c: sqlite3.Connection, table: str) -> Optional[int]:
        row = c.execute("SELECT v FROM meta WHERE k = ?", (table,)).fetchone()
        return int(row[0]) if row else None

    def resolution_for(self, since: float, until: float, now: float) -> Tier:
        """The finest tier that still holds ``since`` and gives at most a few thousand points."""
        span = until - since
        for tier in self.tiers:
            if since >= now - tier.keep_s and span / max(tier.bucket_s, 1) <= POINTS_PER_SERIES:
                return tier
        return self.tiers[-1]

    def read(self, since: float, until: Optional[float] = None, resolution: str = "auto",
             gpu: Optional[int] = None, job: Optional[str] = None,
             gpus_only: bool = False) -> tuple[str, list[HistoryPoint]]:
        """Points in [since, until] at ``resolution`` ("1s", "1m", "1h", "auto"), a GPU's and a
        job's each, in time order; ``gpu``, ``job``: only that one (a GPU filter leaves the jobs out,
        and a job filter the GPUs, unless both are given); ``gpus_only``: no job's."""
        now = self.clock()
        until = now if until is None else until
        # nothing is kept before the last tier's span: a time further back (a console's
        # "9999999999w") asks for the same rows and would not fit an SQLite integer
        since, until = (max(t, now - self.tiers[-1].keep_s) for t in (since, until))
        tier = self.resolution_for(since, until, now) if resolution == "auto" else self._tier(resolution)
        if not self.path.exists():
            return tier.name, []
        level = self.tiers.index(tier)
        with _closing(self._reader()) as c:
            rows = self._buckets(c, level, since, until)
        want_gpus = job is None or gpu is not None
        want_jobs = (gpu is None or job is not None) and not gpus_only
        out: list[HistoryPoint] = []
        for t, agg in rows:
            if want_gpus:
                for key, ent in agg["g"].items():
                    if gpu is None or key.rsplit(":", 1)[-1] == str(gpu):
                        out.append(_point(t, ent, GPU_METRICS, gpu=key))
            if want_jobs:
                for key, ent in agg["j"].items():
                    if job is None or key == job:
                        out.append(_point(t, ent, JOB_METRICS, job=key))
        return tier.name, out

    def _tier(self, name: str) -> Tier:
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise ValueError(f"history: no resolution {name!r}; expected auto, {', '.join(t.name for t in self.tiers)}")

    def samples(self, since: float, until: Optional[float] = None) -> list[Sample]:
        """Compact samples for the sparklines: a minute's means (items and tokens: its last) for
        each minute in [since, until]."""
        now = self.clock()
        until = now if until is None else until
        if not self.path.exists():
            return []
        with _closing(self._reader()) as c:
            return [minute_sample(t, agg) for t, agg in self._buckets(c, 1, since, until)]


    def raw_samples(self, since: float) -> list[Sample]:
        """The samples of the raw tier after ``since``, compact."""
        if not self.path.exists():
            return []
        with _closing(self._reader()) as c:
            rows = c.execute(f"SELECT t, d FROM {self.tiers[0].table} WHERE t > ? ORDER BY t", (since,)).fetchall()
        return [raw_sample(t, json.loads(d)) for t, d in rows]


class _closing:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, *exc: Any) -> None:
        self.conn.close()
