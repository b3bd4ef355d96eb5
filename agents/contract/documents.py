"""The documents one process writes and another reads: a job's progress.json (written by a
worker, read by the agent), plan.json (written by `gpudeck plan`, read by the agent), the
watcher's watch.json and the node's events file; each read back with its fields checked, each
written by the one atomic writer (:mod:`.atomic`)."""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from .units import human_duration

# ---------------------------------------------------------------- plan.json

PLAN_FILE = "plan.json"
MAX_PLAN_BYTES = 4 * 2**20  # a plan is a few KiB; anything this big is not one


def read_plan(path: str) -> tuple[Optional[float], Optional[float]]:
    """(projected_wall_s, written_at) of a plan.json; ValueError says what is wrong with it."""
    with open(path, "rb") as f:
        data = f.read(MAX_PLAN_BYTES + 1)
    if len(data) > MAX_PLAN_BYTES:
        raise ValueError(f"larger than {MAX_PLAN_BYTES // 2**20} MiB: not a plan")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    except RecursionError:
        raise ValueError("JSON nested too deep: not a plan") from None
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
    wall, written = doc.get("projected_wall_s"), doc.get("written_at")
    if wall is not None and not (_finite(wall) and wall > 0):
        raise ValueError(f"'projected_wall_s' must be seconds above 0 (or null), got {wall!r}")
    if written is not None and not _finite(written):
        raise ValueError(f"'written_at' must be a unix time (or null), got {written!r}")
    return (float(wall) if wall is not None else None), (float(written) if written is not None else None)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def drift_pct(planned_s: Optional[float], projected_s: Optional[float]) -> Optional[float]:
    """How far the projection is off the plan, in percent of the plan (+: slower); one decimal."""
    if planned_s is None or projected_s is None or not planned_s > 0:
        return None
    return round((projected_s / planned_s - 1.0) * 100.0, 1)


def over_plan(drift: Optional[float], limit_pct: float) -> bool:
    """Whether a run heads for more than ``limit_pct`` percent over its plan: what the
    ``plan_drift`` alert, the console's flag and its warning colour mean. Never the faster side."""
    return drift is not None and drift > limit_pct


def drift_text(planned_s: Optional[float], projected_s: Optional[float]) -> str:
    """``planned 5d 2h, now 16d 11h (+224%)``; ``planned 5d 2h, now -`` while there is no projection."""
    if planned_s is None:
        return "no planned wall time"
    pct = drift_pct(planned_s, projected_s)
    if pct is None:
        return f"planned {human_duration(planned_s)}, now -"
    return f"planned {human_duration(planned_s)}, now {human_duration(projected_s)} ({pct:+.0f}%)"
