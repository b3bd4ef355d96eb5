"""Time series the state keeps per job and per node: tokens/s for the sparklines, and the coarse
series (a minute a bucket, 12 hours) the charts draw longer ranges from. (A disk's trend is
the node's: agents/watch/disks.py.)"""

from __future__ import annotations

from array import array
from collections import deque
from operator import add
from typing import Optional, Sequence

from .formatting import round_figures
from .rows import SPARK_BUCKET_S

SPARK_KEEP = 240  # buckets kept per job: one hour


class Series:
    """One job's figures in fixed time buckets (a mean per bucket for each figure on its own),
    oldest dropped first. ``figures`` values per bucket: FleetState keeps one Series per job
    with tokens/s, items done and an engine's figures, so a snapshot costs one lookup a job."""

    __slots__ = ("bucket_s", "keep", "_buckets", "_width")

    def __init__(self, bucket_s: float = SPARK_BUCKET_S, keep: int = SPARK_KEEP, figures: int = 1) -> None:
        self.bucket_s, self.keep, self._width = bucket_s, keep, figures
        self._buckets: dict[int, list[float]] = {}  # bucket -> [sum, count] per figure

    def add(self, t: float, *values: Optional[float]) -> None:
        """One reading of the first ``len(values)`` figures; None: no reading of that figure."""
        b = int(t // self.bucket_s)
        cell = self._buckets.get(b)
        i = 0
        for v in values:
            if v is not None:
                if cell is None:
                    cell = self._buckets[b] = [0.0] * (2 * self._width)
                    if len(self._buckets) > self.keep:
                        del self._buckets[min(self._buckets)]
                cell[i] += v
                cell[i + 1] += 1
            i += 2

    def last(self, n: int, now: float, figure: int = 0) -> tuple[Optional[float], ...]:
        """The ``n`` buckets that end with ``now``'s; a bucket without data is None."""
        end = int(now // self.bucket_s)
        k = 2 * figure
        out = []
        get = self._buckets.get
        for b in range(end - n + 1, end + 1):
            cell = get(b)
            out.append(None if cell is None or not cell[k + 1] else round_figures(cell[k] / cell[k + 1]))
        return tuple(out)

    def buckets(self, since: float, figure: int = 0) -> list[tuple[float, float, Optional[float]]]:
        """(start, end, mean) of each bucket that ends after ``since`` with a reading of ``figure``."""
        k, bs = 2 * figure, self.bucket_s
        return [(b * bs, (b + 1) * bs, cell[k] / cell[k + 1]) for b, cell in sorted(self._buckets.items())
                if cell[k + 1] and (b + 1) * bs > since]

    def __len__(self) -> int:
        return len(self._buckets)


COARSE_BUCKET_S = 60.0
COARSE_KEEP = 720  # a minute a bucket for 12 hours: the greeting's span


class Coarse:
    """A figure or two of one job (or one node) a minute, for 12 hours, in flat arrays: 720
    float32 means per figure and the bucket each slot holds, about 8.6 KiB for two figures
    whatever the readings, so a fleet of 512 jobs and 256 nodes keeps its night in a few MiB
    (bench/console_scale.py --charts measures it). The bucket still filling is a sum and a
    count per figure; a reading older than it fills an empty slot only."""

    __slots__ = ("bucket_s", "keep", "_slot", "_means", "_cur", "_sum", "_n")

    def __init__(self, figures: int = 2, bucket_s: float = COARSE_BUCKET_S, keep: int = COARSE_KEEP) -> None:
        self.bucket_s, self.keep = bucket_s, keep
        self._slot = array("i", [-1]) * keep  # the bucket each slot holds; -1: none
        self._means = [array("f", [0.0]) * keep for _ in range(figures)]
        self._cur = -1
        self._sum = [0.0] * figures
        self._n = [0] * figures

    def add(self, t: float, *values: Optional[float]) -> None:
        b = int(t // self.bucket_s)
        if b != self._cur:
            if b < self._cur:
                self._past(b, values)
                return
            self._close()
            self._cur = b
        s, n = self._sum, self._n
        for i, v in enumerate(values):
            if v is not None:
                s[i] += v
                n[i] += 1

    def _past(self, b: int, values: Sequence[Optional[float]]) -> None:
        slot = b % self.keep
        if b <= self._cur - self.keep or self._slot[slot] == b:
            return
        self._slot[slot] = b
        for i, m in enumerate(self._means):
            v = values[i] if i < len(values) else None
            m[slot] = float("nan") if v is None else v

    def _close(self) -> None:
        if self._cur < 0 or not any(self._n):
            return
        slot = self._cur % self.keep
        self._slot[slot] = self._cur
        for i, m in enumerate(self._means):
            n = self._n[i]
            m[slot] = self._sum[i] / n if n else float("nan")
            self._sum[i], self._n[i] = 0.0, 0

    def buckets(self, since: float, figure: int = 0) -> list[tuple[float, float, Optional[float]]]:
        """(start, end, mean) of each minute that ends after ``since``, oldest first, the one
        still filling last; NaN where that minute had no reading of ``figure``."""
        bs, means = self.bucket_s, self._means[figure]
        first = int(since // bs)
        got = sorted((b, means[i]) for i, b in enumerate(self._slot) if b >= first and b != self._cur)
        out: list[tuple[float, float, Optional[float]]] = [(b * bs, (b + 1) * bs, float(v)) for b, v in got]
        if self._cur >= first and self._n[figure]:
            out.append((self._cur * bs, (self._cur + 1) * bs, self._sum[figure] / self._n[figure]))
        return out


class Recent:
    """The last ``keep`` bucket means of one reading on each GPU of a node (its utilization),
    fed all of a node's GPUs at once. A GPU's values are a tuple rebuilt only when a bucket
    closes, plus the mean of the bucket still filling: cheap enough for every GPU of a fleet."""

    __slots__ = ("bucket_s", "keep", "_closed", "_bucket", "_sum", "_count", "_missing", "_per_gpu")

    def __init__(self, bucket_s: float, keep: int) -> None:
        self.bucket_s, self.keep = bucket_s, keep
        self._closed: deque[tuple[Optional[int], ...]] = deque(maxlen=keep)  # a mean per GPU, per bucket
        self._bucket: Optional[int] = None
        self._sum: list[float] = []  # the bucket still filling: per GPU, the sum of its readings ...
        self._count = 0  # ... over this many readings of the node ...
        self._missing: list[int] = []  # ... less those without a reading of that GPU
        self._per_gpu: Optional[list[tuple[Optional[int], ...]]] = None  # the closed buckets, per GPU

    def add(self, t: float, readings: Sequence[Optional[float]]) -> None:
        """One reading per GPU, by index; None: no reading of that GPU."""
        b = int(t // self.bucket_s)
        if b != self._bucket:
            self._close(b)
        sums = self._sum
        if len(readings) == len(sums) and None not in readings:  # the rule: one sum per GPU, in C
            self._sum = list(map(add, sums, readings))
        else:
            if len(readings) > len(sums):
                self._missing.extend([self._count] * (len(readings) - len(sums)))
                sums.extend([0.0] * (len(readings) - len(sums)))
            missing = self._missing
            for i in range(len(sums)):
                v = readings[i] if i < len(readings) else None
                if v is None:
                    missing[i] += 1
                else:
                    sums[i] += v
        self._count += 1

    def _close(self, b: int) -> None:
        if self._count:
            c = self._count
            if any(self._missing):
                self._closed.append(tuple(self._mean(i) for i in range(len(self._sum))))
            else:
                self._closed.append(tuple([round(s / c) for s in self._sum]))
            gap = min(b - self._bucket, self.keep) if self._bucket is not None and b > self._bucket else 1
            self._closed.extend([()] * (gap - 1))  # buckets with no reading
        self._bucket, self._per_gpu, self._count = b, None, 0
        self._sum, self._missing = [0.0] * len(self._sum), [0] * len(self._sum)

    def _mean(self, gpu: int) -> Optional[int]:
        n = self._count - self._missing[gpu]
        return round(self._sum[gpu] / n) if n else None

    def values(self, gpu: int) -> tuple[Optional[float], ...]:
        """A GPU's bucket means, oldest first, the one still filling last."""
        per_gpu = self._per_gpu
        if per_gpu is None or len(per_gpu) < len(self._sum):
            per_gpu = self._per_gpu = [tuple(c[i] if i < len(c) else None for c in self._closed)
                                       for i in range(len(self._sum))]
        if gpu >= len(per_gpu):
            return ()
        now = self._mean(gpu)
        if now is None:
            return per_gpu[gpu]
        out = per_gpu[gpu] + (now,)
        return out[1:] if len(out) > self.keep else out
