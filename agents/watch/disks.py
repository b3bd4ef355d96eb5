"""A disk filling up: each file system the jobs write to, its used bytes over the last
``[alerts] disk_trend_s`` (ten minutes) as the node samples them every tick, and the time to
full that rate projects. Under ``[alerts] disk_fill_s`` (a day) it is a ``disk_filling``
alert, the same in every console, since the node measures it and no console does.

The trend is in memory. A new agent measures it again; until it has enough to say (a fifth
of ``disk_trend_s``), a ``disk_filling`` the last agent left up stays up, said so, rather
than being resolved and raised again on no news.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Optional

from ..contract.units import human_duration
from ..contract.vocab import AlertKind, EventKind
from ..contract.wire import Host
from .conditions import Condition

SPAN_FRACTION = 0.2  # the rate is known once its points span this share of disk_trend_s
DELETED_BYTES = 1 << 30  # a GiB or more freed at once: the old trend says nothing now


class DiskTrend:
    """Bytes used on one file system over a window: how fast it fills."""

    __slots__ = ("_points", "restarted")

    def __init__(self) -> None:
        self._points: deque[tuple[float, int]] = deque()
        self.restarted = False  # the trend began again after a deletion (not at the agent's start)

    def add(self, t: float, used: int, window_s: float) -> None:
        if self._points and used < self._points[-1][1] - DELETED_BYTES:
            self._points.clear()
            self.restarted = True
        self._points.append((t, used))
        while len(self._points) > 2 and t - self._points[1][0] >= window_s:
            self._points.popleft()

    def rate(self, window_s: float) -> Optional[float]:
        """Bytes per second, once the trend spans long enough to mean something; else None."""
        if len(self._points) < 2:
            return None
        (t0, v0), (t1, v1) = self._points[0], self._points[-1]
        if t1 - t0 < SPAN_FRACTION * window_s:
            return None
        return (v1 - v0) / (t1 - t0)


class DiskFilling:
    """The ``disk_filling`` conditions of one node."""

    def __init__(self, held: Callable[[str], bool] = lambda key: False) -> None:
        self.held = held  # whether a condition is up (the watcher's record, kept across agents)
        self._trends: dict[str, DiskTrend] = {}

    def conditions(self, now: float, host: Optional[Host], fill_s: float, window_s: float) -> list[Condition]:
        out = []
        seen = set()
        for d in host.disks if host is not None else []:
            seen.add(d.path)
            trend = self._trends.get(d.path)
            if trend is None:
                trend = self._trends[d.path] = DiskTrend()
            trend.add(now, d.total_bytes - d.free_bytes, window_s)
            key = f"disk_filling:{d.path}"
            rate = trend.rate(window_s)
            free = f"{d.path}: {d.free_bytes / 2**30:.1f} GiB free"
            if rate is None:
                if not trend.restarted and self.held(key):  # a new agent, measuring again: no news yet
                    out.append(Condition(key, EventKind.DISK, f"{free}, filling (its rate is being measured "
                                                              f"again since the agent started)", AlertKind.DISK_FILLING))
                continue
            if rate > 0 and d.free_bytes > 0 and d.free_bytes / rate < fill_s:
                out.append(Condition(key, EventKind.DISK, f"{free}, filling at {rate / 2**20:.1f} MiB/s: full in "
                                                          f"{human_duration(d.free_bytes / rate)}", AlertKind.DISK_FILLING))
        for path in [p for p in self._trends if p not in seen]:  # a path the jobs no longer write to
            del self._trends[path]
        return out
