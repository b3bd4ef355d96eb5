"""Time series the state keeps per job and per disk: tokens/s for the sparklines, and
bytes used for the disk-filling trend."""

from __future__ import annotations

from collections import deque
from typing import Optional

from gpudeck.console.formatting import round_figures
from gpudeck.console.rows import SPARK_BUCKET_S

SPARK_KEEP = 240  # buckets kept per job: one hour
DISK_FILL_WINDOW_S = 600.0  # free-space trend measured over ten minutes
DISK_FILL_MIN_SPAN_S = 120.0  # ... measured over two minutes at least


class Series:
    """tokens/s of one job in fixed time buckets (mean per bucket), oldest dropped first."""

    __slots__ = ("bucket_s", "keep", "_buckets")

    def __init__(self, bucket_s: float = SPARK_BUCKET_S, keep: int = SPARK_KEEP) -> None:
        self.bucket_s, self.keep = bucket_s, keep
        self._buckets: dict[int, list[float]] = {}  # bucket -> [sum, count]

    def add(self, t: float, value: Optional[float]) -> None:
        if value is None:
            return
        b = int(t // self.bucket_s)
        cell = self._buckets.get(b)
        if cell is None:
            self._buckets[b] = [value, 1.0]
            if len(self._buckets) > self.keep:
                del self._buckets[min(self._buckets)]
        else:
            cell[0] += value
            cell[1] += 1

    def last(self, n: int, now: float) -> tuple[Optional[float], ...]:
        """The ``n`` buckets that end with ``now``'s; a bucket without data is None."""
        end = int(now // self.bucket_s)
        out = []
        for b in range(end - n + 1, end + 1):
            cell = self._buckets.get(b)
            out.append(None if cell is None else round_figures(cell[0] / cell[1]))
        return tuple(out)

    def __len__(self) -> int:
        return len(self._buckets)


class Recent:
    """The last ``keep`` bucket means of one reading (a GPU's utilization), kept as a tuple
    that is rebuilt only when a bucket closes: cheap enough for every GPU of a fleet."""

    __slots__ = ("bucket_s", "_closed", "_bucket", "_sum", "_n", "_values", "_dirty")

    def __init__(self, bucket_s: float, keep: int) -> None:
        self.bucket_s = bucket_s
        self._closed: deque[Optional[float]] = deque(maxlen=keep)
        self._bucket: Optional[int] = None
        self._sum, self._n = 0.0, 0
        self._values: tuple[Optional[float], ...] = ()
        self._dirty = False

    def add(self, t: float, value: Optional[float]) -> None:
        if value is None:
            return
        b = int(t // self.bucket_s)
        if b != self._bucket:
            if self._n:
                gap = min(b - self._bucket, self._closed.maxlen or 1) if self._bucket is not None else 1
                self._closed.append(round(self._sum / self._n))
                self._closed.extend([None] * (gap - 1))  # buckets with no reading
            self._bucket, self._sum, self._n = b, 0.0, 0
        self._sum += value
        self._n += 1
        self._dirty = True

    def values(self) -> tuple[Optional[float], ...]:
        """The bucket means, oldest first, the one still filling last; rebuilt only after a reading."""
        if self._dirty:
            now = (round(self._sum / self._n),) if self._n else ()
            self._values = (tuple(self._closed) + now)[-(self._closed.maxlen or 1):]
            self._dirty = False
        return self._values


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
