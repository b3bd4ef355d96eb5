"""A clock a test moves by hand (agents/contract/clock.py's seam): ``sleep`` advances it at
once, so a rule that waits (a kill's grace, a deadline) runs through its time in
microseconds, and ``advance`` moves it between two calls of a rule that takes ``now``."""

from __future__ import annotations


class FakeClock:
    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start  # wall time; monotonic time moves with it, from 0
        self._start = start
        self.slept = 0.0  # the total the code under test waited

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now - self._start

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        assert seconds >= 0, "a clock does not go back"
        self.now += seconds
