"""The history's format, pure (no SQLite): its tiers, the row a sample makes, the aggregates
a minute or an hour rolls up to, and the compact samples and points that reads hand out.
db.py stores these rows; reads.py reads them back.

Per GPU: memory used, utilization, temperature, power. Per job: its state (a bucket's last),
tokens/s, items done, the engine's running and queued requests and KV use, the tokens
counter, and for a generate job the shares of its last completions cut, empty, without an
answer and looping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ..contract.ops import GPU_FIGURES, HISTORY_KEPT_S, JOB_FIGURES, QUALITY_FIGURES, HistoryPoint
from ..contract.vocab import JobState
from ..contract.wire import Gpu, JobStatus, Sample, Snapshot

# A row as stored (JSON): {"g": {gpu: entity}, "j": {job: entity}}, an entity a list of figures
# (raw_row's) or of stats (an aggregate's, below)
Row = dict[str, dict[str, list[Any]]]

# a row's figures in order (agents/contract/ops.py names them): a job's quality shares last,
# from generate's window (agents/workers/generate/quality.py)
GPU_METRICS = GPU_FIGURES
JOB_METRICS = JOB_FIGURES + QUALITY_FIGURES
WINDOW_PROBLEMS = ("cut_at_max_tokens", "empty_answer", "no_answer", "repetition")


@dataclass(frozen=True)
class Tier:
    name: str  # what `gpudeck history --resolution` calls it
    table: str
    bucket_s: int  # 0: every sample
    keep_s: int


TIERS = (Tier("1s", "s1", 0, 3600), Tier("1m", "m1", 60, 7 * 86400), Tier("1h", "h1", 3600, HISTORY_KEPT_S))
POINTS_PER_SERIES = 720  # "auto" picks the finest tier that gives at most this many points a series


def _r(v: Any, nd: int = 1) -> Optional[float]:
    return None if v is None else round(float(v), nd)


def job_tps(job: JobStatus) -> Optional[float]:
    """A job's tokens/s as the history keeps it: its progress's, else its engine's."""
    if job.progress is not None and job.progress.tokens_per_s is not None:
        return round(job.progress.tokens_per_s, 2)
    if job.engine is not None and job.engine.tokens_per_s is not None:
        return round(job.engine.tokens_per_s, 2)
    return None


def gpu_key(g: Gpu) -> str:
    return f"{g.host}:{g.index}" if g.host else str(g.index)


def raw_row(snap: Snapshot) -> Row:
    """One sample: {"g": {gpu: [mem, util, temp, power]}, "j": {job: [state, tps, done, running,
    queued, kv, tokens, (cut%, empty%, no-answer%, repetition%: a job with a quality window)]}}."""
    gpus = {gpu_key(g): [_r(g.mem_used_mib), _r(g.util_pct), _r(g.temp_c), _r(g.power_w)] for g in snap.gpus}
    jobs = {}
    for j in snap.jobs:
        p, e = j.progress, j.engine
        row = [j.state.value, job_tps(j), p.done if p else None,
               e.running if e else None, e.queued if e else None, _r(e.kv_usage, 3) if e else None,
               p.tokens if p else None]
        w = p.window if p else None
        if w is not None and w.n:
            row += [_r(100.0 * w.counts.get(k, 0) / w.n) for k in WINDOW_PROBLEMS]
        jobs[j.name] = row
    return {"g": gpus, "j": jobs}


# ------------------------------------------------------------ aggregates
# An aggregate entity is [n, state, stat | None per metric]: n the samples it has, state a
# job's last (None for a GPU). A stat is the figure alone when every one of the n samples had
# the same; [lo, mean, hi] when each had one; [lo, mean, hi, count] when only ``count`` did.
# A raw entity is one of n=1 whose stats are its figures, so minutes, hours and the tail beyond
# a mark merge alike.


def stat(s: Any, n: int) -> Optional[tuple[float, float, float, int]]:
    """(lo, mean, hi, count) of a stored stat."""
    if s is None:
        return None
    if not isinstance(s, list):
        return (s, s, s, n)
    return (s[0], s[1], s[2], s[3] if len(s) > 3 else n)


def _stored(lo: float, mean: float, hi: float, count: int, n: int) -> Any:
    mean = round(mean, 3) if abs(mean) < 10 else round(mean, 1)
    if count == n:
        return lo if lo == hi else [lo, mean, hi]
    return [lo, mean, hi, count]


def _as_agg(row: Row, bucketed: bool) -> Row:
    if bucketed:
        return row
    return {"g": {k: [1, None, *vals] for k, vals in row["g"].items()}, "j": {k: [1, *vals] for k, vals in row["j"].items()}}


class MinuteFold:
    """The minute still filling, folded in memory one raw row at a time: per GPU and job, the
    samples, the last state, and per figure [lo, sum, hi, count]. ``whole``: it has every
    sample of its minute (it began with the minute's first, in this process); a minute that
    is not whole is rolled up from its rows instead. ``aggregate()`` is what ``merge`` makes of
    the same rows."""

    __slots__ = ("bucket", "whole", "_ents")

    def __init__(self, bucket: int, whole: bool) -> None:
        self.bucket, self.whole = bucket, whole
        self._ents: Row = {"g": {}, "j": {}}

    def add(self, row: Row) -> None:
        for side, state_first in (("g", False), ("j", True)):
            ents = self._ents[side]
            for key, vals in row[side].items():
                ent: Optional[list[Any]] = ents.get(key)
                figures = vals[1:] if state_first else vals
                if ent is None:
                    fresh: list[Any] = [0, None] + [None] * len(figures)
                    ent = ents[key] = fresh
                elif len(ent) < len(figures) + 2:
                    ent.extend([None] * (len(figures) + 2 - len(ent)))
                ent[0] += 1
                if state_first and vals[0] is not None:
                    ent[1] = vals[0]
                for i, v in enumerate(figures, 2):
                    if v is None:
                        continue
                    st = ent[i]
                    if st is None:
                        ent[i] = [v, v, v, 1]
                    else:
                        if v < st[0]:
                            st[0] = v
                        elif v > st[2]:
                            st[2] = v
                        st[1] += v
                        st[3] += 1

    def aggregate(self) -> Row:
        out: Row = {"g": {}, "j": {}}
        for side, ents in self._ents.items():
            for key, ent in ents.items():
                n = ent[0]
                out[side][key] = [n, ent[1]] + [None if st is None else _stored(st[0], st[1] / st[3], st[2], st[3], n)
                                                for st in ent[2:]]
        return out


def merge(rows: Iterable[Row]) -> Row:
    """Aggregates (in time order) merged into one: min of mins, max of maxes, mean by count,
    the last state."""
    acc: Row = {"g": {}, "j": {}}
    for row in rows:
        for side in ("g", "j"):
            for key, ent in row[side].items():
                n = ent[0]
                cur: Optional[list[Any]] = acc[side].get(key)
                if cur is None:
                    empty: list[Any] = [0, None] + [None] * (len(ent) - 2)
                    cur = acc[side][key] = empty
                cur[0] += n
                if ent[1] is not None:
                    cur[1] = ent[1]
                if len(cur) < len(ent):
                    cur.extend([None] * (len(ent) - len(cur)))
                for i in range(2, len(ent)):
                    s = stat(ent[i], n)
                    if s is None:
                        continue
                    c = cur[i]
                    if c is None:
                        cur[i] = list(s)
                    else:
                        total = c[3] + s[3]
                        cur[i] = [min(c[0], s[0]), (c[1] * c[3] + s[1] * s[3]) / total, max(c[2], s[2]), total]
    for ents in acc.values():
        for ent in ents.values():
            for i in range(2, len(ent)):
                if ent[i] is not None:
                    lo, mean, hi, count = ent[i]  # [lo, mean, hi, count], as made above
                    ent[i] = _stored(lo, mean, hi, count, ent[0])
    return acc



def raw_sample(t: float, row: Row) -> Sample:
    gpus = [v for _, v in sorted(row["g"].items(), key=lambda kv: _gpu_order(kv[0]))]
    jobs = row["j"]
    alive = (JobState.RUNNING.value, JobState.STARTING.value)
    return Sample(t=t, gpu_mem_mib=[g[0] or 0.0 for g in gpus], gpu_util=[g[1] for g in gpus],
                  job_tokens_per_s={k: v[1] for k, v in jobs.items() if v[0] in alive},
                  job_done={k: v[2] for k, v in jobs.items() if v[2] is not None},
                  job_tokens={k: v[6] for k, v in jobs.items() if v[6] is not None})


def minute_sample(t: float, agg: Row) -> Sample:
    """A minute's aggregate as a compact sample at the minute's middle."""
    def mean(ent: list[Any], i: int) -> Optional[float]:
        s = stat(ent[2 + i], ent[0]) if 2 + i < len(ent) else None
        return None if s is None else s[1]

    def top(ent: list[Any], i: int) -> Optional[int]:
        s = stat(ent[2 + i], ent[0]) if 2 + i < len(ent) else None
        return None if s is None else int(s[2])

    gpus = sorted(agg["g"].items(), key=lambda kv: _gpu_order(kv[0]))
    jobs = agg["j"]
    return Sample(
        t=t + 30.0,
        gpu_mem_mib=[mean(e, 0) or 0.0 for _, e in gpus],
        gpu_util=[mean(e, 1) for _, e in gpus],
        job_tokens_per_s={k: mean(e, 0) for k, e in jobs.items()
                          if e[1] in (JobState.RUNNING.value, JobState.STARTING.value)},
        job_done={k: d for k, e in jobs.items() if (d := top(e, 1)) is not None},
        job_tokens={k: d for k, e in jobs.items() if (d := top(e, 5)) is not None},
    )


def _gpu_order(key: str) -> tuple[str, int]:
    host, _, index = key.rpartition(":")
    return (host, int(index) if index.isdigit() else 0)


def _point(t: float, ent: list[Any], names: tuple[str, ...], gpu: Optional[str] = None,
           job: Optional[str] = None) -> HistoryPoint:
    lo: dict[str, Optional[float]] = {}
    mean: dict[str, Optional[float]] = {}
    hi: dict[str, Optional[float]] = {}
    for i, name in enumerate(names):
        s = stat(ent[2 + i], ent[0]) if 2 + i < len(ent) else None
        if s is not None:
            lo[name], mean[name], hi[name] = s[0], s[1], s[2]
    return HistoryPoint(t=t, gpu=gpu, job=job, state=ent[1], n=ent[0], mean=mean,
                        lo=lo if ent[0] > 1 else {}, hi=hi if ent[0] > 1 else {})
