"""The clock seam: the rules that depend on time (restart backoff, the notify and heartbeat
deadlines, kill grace periods, a lost node) read it through a :class:`Clock` they are given,
the real one by default, so that each rule can be checked with a clock a test moves by hand,
in milliseconds, with no process and no real sleep.

Wall time (``time``) is what is stored and shown (an event's ``t``, a restart's ``next_at``);
``monotonic`` measures spans (a grace period, a deadline); ``sleep`` waits. A rule takes
``now`` as an argument where its caller already holds one (the watcher's tick), and a clock
where it waits by itself.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM: Clock = SystemClock()
