"""Time series the state keeps per job and per disk: tokens/s for the sparklines, and
bytes used for the disk-filling trend."""

from __future__ import annotations

from collections import deque
from operator import add
from typing import Optional, Sequence

from .formatting import round_figures
from .rows import SPARK_BUCKET_S

SPARK_KEEP = 240  # buckets kept per job: one hour
DISK_FILL_WINDOW_S = 600.0  # free-space trend measured over ten minutes
DISK_FILL_MIN_SPAN_S = 120.0  # ... measured over two minutes at least


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

    def __len__(self) -> int:
        return len(self._buckets)


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


class DiskTrend:
    """Bytes used on one file system over the last minutes: how fast it fills."""

    __slots__ = ("_points",)

    def __init__(self) -> None:
        self._points: deque[tuple[float, int]] = deque()

    def add(self, t: float, used: int) -> None:
        if self._points and used < self._points[-1][1] - (1 << 30):
            self._points.clear()  # a GiB or more was deleted: the old trend says nothing now
        self._points.append((t, used))
        while len(self._points) > 2 and t - self._points[1][0] >= DISK_FILL_WINDOW_S:
            self._points.popleft()

    def rate(self) -> Optional[float]:
        """Bytes per second, once the trend spans long enough to mean something."""
        if len(self._points) < 2:
            return None
        (t0, v0), (t1, v1) = self._points[0], self._points[-1]
        if t1 - t0 < DISK_FILL_MIN_SPAN_S:
            return None
        return (v1 - v0) / (t1 - t0)
