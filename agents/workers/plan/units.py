"""Deadlines and lists on the command line (stdlib only); durations and sizes are the
contract's (agents/contract/units.py)."""

from __future__ import annotations

import datetime as _dt
import re
import time
from typing import Optional

from ...contract.units import parse_duration


class UsageError(ValueError):
    """Bad input on the command line; ``str()`` names the option."""


def parse_deadline(text: str, now: Optional[float] = None) -> float:
    """Seconds from now until ``--deadline``: a duration (``5d``) or an ISO time
    (``2025-07-01T18:00``, local time unless it names its zone)."""
    now = time.time() if now is None else now
    try:
        return float(parse_duration(text))  # type: ignore[arg-type]
    except ValueError as exc:
        if re.fullmatch(r"[\d.\s]+[a-z]*", text.strip().lower()):  # a duration, wrong: say so
            raise UsageError(f"--deadline {text!r}: {exc}") from None
    try:
        when = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--deadline {text!r}: expected a duration like 5d, 36h or 1d12h, or an ISO time "
                         f"like 2025-07-01T18:00") from None
    left = when.timestamp() - now
    if left <= 0:
        raise UsageError(f"--deadline {text!r}: that time has passed")
    return left


def parse_levels(text: str) -> list[int]:
    """``1,32,64,128`` -> [1, 32, 64, 128] (sorted, distinct, each at least 1)."""
    try:
        levels = sorted({int(x) for x in text.replace(" ", "").split(",") if x})
    except ValueError:
        raise UsageError(f"--concurrency {text!r}: expected comma-separated integers like 1,32,64,128") from None
    if not levels or levels[0] < 1:
        raise UsageError(f"--concurrency {text!r}: give levels of at least 1")
    return levels
