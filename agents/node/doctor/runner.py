"""Each check in a thread of its own, with its own timeout."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Callable

from ...contract.ops import Check
from .base import FAIL

log = logging.getLogger("agents")


Task = tuple[str, float, Callable[[], list[Check]]]


def run_checks(tasks: list[Task]) -> list[Check]:
    """Each task in a thread of its own, each bounded by its own timeout; the lines in the
    tasks' order. A task that does not finish in time is a failed line saying so (its thread is
    left to end by itself: a hung stat cannot be cancelled)."""
    results: dict[int, list[Check]] = {}
    started = []
    for i, (name, _, fn) in enumerate(tasks):
        def body(i: int = i, name: str = name, fn: Callable[[], list[Check]] = fn) -> None:
            t0 = time.monotonic()
            try:
                got = fn()
            except Exception as exc:  # noqa: BLE001 -- a bug of ours: one line, the traceback in the log
                log.exception("doctor: the %s check failed", name)
                got = [Check(name, FAIL, f"the check itself failed: {type(exc).__name__}: {exc}",
                             "a bug of gpudeck's: the agent's log has the traceback")]
            took = round(time.monotonic() - t0, 2)
            results[i] = [c if c.seconds is not None else replace(c, seconds=took) for c in got]

        thread = threading.Thread(target=body, name=f"doctor-{name}", daemon=True)
        thread.start()
        started.append((thread, time.monotonic()))
    out: list[Check] = []
    for i, (thread, began) in enumerate(started):
        name, timeout, _ = tasks[i]
        thread.join(max(0.0, began + timeout - time.monotonic()))
        got = results.get(i)
        if got is None:
            got = [Check(name, FAIL, f"the check did not finish within {timeout:g} s",
                         "something it reads does not answer (a dead mount, an endpoint): see the detail of a "
                         "second run, or the agent's log", seconds=timeout)]
        out += got
    return out

