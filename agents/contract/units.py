"""Units: the one grammar of a duration (fleet file, command line, plan), the one spelling of a
duration and of a size on screen and in messages, and deadlines."""

from __future__ import annotations

import re
from typing import Any, Optional


_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_SCALE = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
NEVER = ("never", "0", "0s", "0m", "0h")
DURATION_EXAMPLES = "a duration such as \"90s\", \"30m\", \"2h\", \"1d12h\" or a number of seconds"


def parse_duration(text: Any, *, never: bool = False) -> Optional[float]:
    """The one grammar of a duration, as seconds: a number of seconds (``3600``, ``"3600"``) or
    parts of ``ms s m h d w`` (``"500ms"``, ``"45s"``, ``"30m"``, ``"2h"``, ``"1d12h"``, ``"1w"``).
    With ``never=True``, ``"never"`` or zero means no limit: None. ValueError says what was expected."""
    if never and (text == 0 or (isinstance(text, str) and text.strip().lower() in NEVER)):
        return None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    elif isinstance(text, str):
        t = text.strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(\.\d+)?", t):  # a number of seconds
            value = float(t)
        else:
            parts = _PART.findall(t)
            if not parts or "".join(a + b for a, b in parts) != t:
                raise ValueError(f"expected {DURATION_EXAMPLES}" + (", or 'never'" if never else "") + f", got {text!r}")
            value = sum(float(a) * _SCALE[b] for a, b in parts)
    else:
        raise ValueError(f"expected {DURATION_EXAMPLES}, got {text!r}")
    if not value > 0 or value == float("inf"):
        raise ValueError("expected a duration above 0" + (" (or 'never')" if never else "") + f", got {text!r}")
    return value


def human_duration(seconds: Optional[float]) -> str:
    """5d 3h, 2h 05m, 4m 10s, 12s; '-' when unknown. The one spelling of a duration, for the
    node's messages and every view of the console."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m:02d}m"
    if m:
        return f"{m}m {s:02d}s"
    return f"{s}s"


def parse_deadline(text: Any) -> float:
    """``"2026-12-05T00:00:00Z"`` (ISO 8601; no zone: UTC) as unix time; ValueError otherwise."""
    import datetime as dt

    if not isinstance(text, str):
        raise ValueError(f"expected a date and time such as \"2026-12-05T00:00:00Z\", got {text!r}")
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"expected a date and time such as \"2026-12-05T00:00:00Z\", got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.timestamp()


def human_bytes(n: Optional[float], binary: bool = False) -> str:
    """The one spelling of a size: decimal units (TB = 10^12 bytes, as disks and S3 bills count),
    or binary ones (GiB, as GPU memory counts) with ``binary=True``; '-' when unknown."""
    if n is None:
        return "-"
    step, units = (1024.0, ("B", "KiB", "MiB", "GiB", "TiB", "PiB")) if binary else \
        (1000.0, ("B", "KB", "MB", "GB", "TB", "PB"))
    for unit in units:
        if abs(n) < step or unit == units[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= step
    return f"{n:.1f} {units[-1]}"


def index_ranges(indexes: list[int]) -> str:
    """``[0, 1, 2, 3, 6, 9, 10]`` -> ``"0-3,6,9-10"``: sorted, once each, runs joined (GPU
    indexes, a Slurm array's task ids)."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(set(indexes)):
        if run and i != run[-1] + 1:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(i)
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)
