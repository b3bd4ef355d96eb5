"""Waiting on a condition, never on a sleep: the suite's one waiter, sync and async.

Both poll ``cond()`` every ``interval`` seconds until it returns something truthy and return
that value (so a wait can hand back what it found: a snapshot, a reply, the screen's text).
``cond`` is always called once more after the deadline passed, so a slow poll never fails a
condition that holds. On timeout they raise AssertionError naming ``what`` and the timeout,
with ``detail()`` (what was on screen, the messages received so far) appended when given; it
is called at that moment, not when the wait began. An exception from ``cond`` is not caught:
it fails the test at once, with its own traceback.

The default timeout is generous: the suite runs on a busy 2-core CI machine, and a wait that
holds returns as soon as it holds.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Optional

TIMEOUT = 30.0
INTERVAL = 0.05


def _timed_out(timeout: float, what: str, detail: Optional[Callable[[], str]]) -> AssertionError:
    extra = f"\n{detail()}" if detail else ""
    return AssertionError(f"timed out after {timeout:g} s waiting for {what}{extra}")


def wait_for(cond: Callable[[], Any], timeout: float = TIMEOUT, what: str = "condition", interval: float = INTERVAL,
             detail: Optional[Callable[[], str]] = None) -> Any:
    """Poll ``cond`` until it returns something truthy and return that; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, detail)
        time.sleep(interval)


async def wait_for_async(cond: Callable[[], Any], timeout: float = TIMEOUT, what: str = "condition",
                         interval: float = INTERVAL, detail: Optional[Callable[[], str]] = None,
                         pause: Optional[Callable[[float], Awaitable[Any]]] = None) -> Any:
    """``wait_for`` for async tests: the event loop runs between polls, through ``pause``
    (asyncio.sleep unless given: a TUI test passes its Pilot's pause)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, detail)
        await (pause or asyncio.sleep)(interval)
