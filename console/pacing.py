"""How often the console redraws: as often as its redraws can afford, no more.

Agents tick out of phase, so at fleet scale a snapshot lands every few milliseconds. Redrawing
for each one (a 50 ms timer armed per snapshot) meant 20 to 30 redraws a second, each one
cheap but all of them together 16% of a core at 1,024 GPUs. :class:`RedrawPacer` keeps the
time spent redrawing at most ``share`` of the wall time: it keeps a moving average of what a
redraw costs, and spaces redraws at least ``cost / share`` apart (never less than ``least_s``,
never more than ``most_s``). Snapshots that arrive meanwhile are drawn together by the next
redraw. A key press is not paced: the screen draws it at once.

Pure data, no textual: the app asks :meth:`RedrawPacer.delay` when something arrives, arms a
timer for that long (once: arrivals while it is armed change nothing), says when a redraw
begins (:meth:`RedrawPacer.drawing`) and, once it is painted, what it cost
(:meth:`RedrawPacer.measured`).
"""

from __future__ import annotations

from typing import Optional


class RedrawPacer:
    """When the next redraw may come, from what the last ones cost."""

    def __init__(self, least_s: float = 0.05, share: float = 0.05, most_s: float = 1.0, weight: float = 0.25) -> None:
        self.least_s = least_s  # arrivals within this window are drawn together, however cheap a redraw
        self.share = share  # the part of the wall time redraws may take
        self.most_s = most_s  # a redraw however dear comes at least this often
        self.weight = weight  # of the newest redraw in the moving average
        self.cost_s: Optional[float] = None  # the moving average of a redraw's cost; None before the first
        self.last_at: Optional[float] = None  # when the last redraw began
        self.redraws = 0

    @property
    def interval_s(self) -> float:
        """The least time between two redraws that keeps them within ``share`` of the wall time."""
        cost = self.cost_s or 0.0
        return min(self.most_s, max(self.least_s, cost / self.share))

    def delay(self, now: float) -> float:
        """How long to wait, from ``now``, before the redraw that shows what just arrived: the
        coalescing window, or what is left of the interval since the last redraw began."""
        if self.last_at is None:
            return self.least_s
        return max(self.least_s, self.last_at + self.interval_s - now)

    def drawing(self, now: float) -> None:
        """A redraw begins: the next waits out the interval from here."""
        self.redraws += 1
        self.last_at = now

    def measured(self, cost_s: float) -> None:
        """What a redraw cost (its CPU time, painting included), into the moving average."""
        cost_s = max(0.0, cost_s)
        self.cost_s = cost_s if self.cost_s is None else self.cost_s + self.weight * (cost_s - self.cost_s)
