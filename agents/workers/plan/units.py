"""Durations, deadlines, sizes and lists on the command line (stdlib only)."""

from __future__ import annotations

import datetime as _dt
import re
import time
from typing import Optional

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class UsageError(ValueError):
    """Bad input on the command line; ``str()`` names the option."""


def parse_duration(text: str) -> Optional[float]:
    """``5d``, ``36h``, ``1d12h``, ``90m``, ``3600`` (seconds) -> seconds; None when it is not one."""
    t = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhdw])", t)
    if not parts or "".join(a + b for a, b in parts) != t:
        return None
    return sum(float(a) * _UNITS[b] for a, b in parts)


def parse_deadline(text: str, now: Optional[float] = None) -> float:
    """Seconds from now until ``--deadline``: a duration (``5d``) or an ISO time
    (``2025-07-01T18:00``, local time unless it names its zone)."""
    now = time.time() if now is None else now
    d = parse_duration(text)
    if d is not None:
        if d <= 0:
            raise UsageError(f"--deadline {text!r}: must be more than zero")
        return d
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


def human_duration(s: Optional[float]) -> str:
    if s is None:
        return "-"
    if s < 90:
        return f"{s:.0f}s"
    if s < 5400:
        return f"{s / 60:.1f}m"
    if s < 2 * 86400:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


def human_bytes(n: Optional[float]) -> str:
    """Decimal units (TB = 10^12 bytes), as disks and S3 bills count."""
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} PB"


def human_bytes_binary(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    return f"{n:.1f} PiB"
