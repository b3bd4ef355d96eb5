"""Rates from counters over a time window, resets included, and ETAs."""

from __future__ import annotations

from collections import deque
from typing import Optional


class CounterRate:
    """Rate of a monotonically growing counter over the last ``window_s`` seconds.

    A counter that goes down was reset (a restarted engine, a truncated file): the
    increase since the reset is counted from zero, as Prometheus' rate() does.
    """

    def __init__(self, window_s: float = 60.0, min_span_s: float = 0.0) -> None:
        self.window_s = window_s
        self.min_span_s = min_span_s  # a rate over less than this is noise: say nothing yet
        self._points: deque[tuple[float, float]] = deque()  # (t, accumulated increase)
        self._last: Optional[float] = None
        self._acc = 0.0

    def add(self, t: float, value: float) -> None:
        if self._last is not None:
            self._acc += value - self._last if value >= self._last else value
        self._last = value
        self._points.append((t, self._acc))
        while len(self._points) > 2 and t - self._points[1][0] >= self.window_s:
            self._points.popleft()

    def rate(self) -> Optional[float]:
        if len(self._points) < 2:
            return None
        (t0, v0), (t1, v1) = self._points[0], self._points[-1]
        if t1 - t0 <= 0 or t1 - t0 < self.min_span_s:
            return None
        return (v1 - v0) / (t1 - t0)


def eta_seconds(done: int, total: Optional[int], rate: Optional[float]) -> Optional[float]:
    if total is None:
        return None
    if done >= total:
        return 0.0
    if not rate or rate <= 0:
        return None
    return (total - done) / rate
