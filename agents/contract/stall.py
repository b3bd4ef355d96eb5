"""When a live job's lack of progress counts as a stall: the one rule behind the ``stalled``
alert (agents/node/alerts.py) and ``restart_on_stall`` (agents/watch/restarts.py).

A job that says it is starting up (its progress.json's ``phase`` is one of
:data:`STARTUP_PHASES`, since ``phase_since``) is not stalled, for up to
:data:`STARTUP_CAP_S` of that phase: a 27B model's kernels take minutes to compile on a
fresh node, and a restart for it would only compile them again. Past the cap, or when the
job says nothing, the usual rule holds. A job that says it began ``running`` counts its
silence from then, not from an earlier change (the start-up made none).

An engine says its start-up through its own log lines and /health (``Engine.phase``,
agents/sense/loading.py): spared the same way up to the cap, and past it counted from when its
loading figure last moved, so a load that still moves is never a stall.
"""

from __future__ import annotations

from typing import Optional

from .wire import Engine, Progress

STARTUP_PHASES = ("starting", "loading", "compiling", "capturing", "preparing")
STARTUP_CAP_S = 1800.0  # 30 min: longer than any compile seen (the 27B hybrid: about 2 min on a fresh H200)


def starting_up(p: Optional[Progress], now: float, cap_s: float = STARTUP_CAP_S) -> bool:
    """The job says it is in a start-up phase, and has been for no more than ``cap_s``."""
    return (p is not None and p.phase in STARTUP_PHASES and p.phase_since is not None
            and now - p.phase_since <= cap_s)


def quiet_since(p: Optional[Progress], changed: Optional[float], now: float, started_at: Optional[float] = None,
                cap_s: float = STARTUP_CAP_S) -> Optional[float]:
    """From when the job's lack of progress counts (unix time), or None: it is starting up
    (within the cap), or nothing says when it last moved."""
    if starting_up(p, now, cap_s):
        return None
    points = [t for t in (changed, started_at) if t is not None]
    if p is not None and p.phase is not None and p.phase not in STARTUP_PHASES and p.phase_since is not None:
        points.append(min(p.phase_since, now))  # its start-up ended then
    return max(points) if points else None


def engine_quiet_since(e: Optional[Engine], now: float, cap_s: float = STARTUP_CAP_S) -> Optional[float]:
    """An engine that is starting up (its ``phase``): from when its lack of progress counts
    (unix time), or None: it is not starting up, or has been for no more than ``cap_s``.
    Past the cap, its silence counts from the last move of its loading figure (from the
    phase's start where it prints none)."""
    if e is None or e.phase not in STARTUP_PHASES or e.phase_since is None or now - e.phase_since <= cap_s:
        return None
    return max(t for t in (e.phase_moved_at, e.phase_since) if t is not None)


def engine_starting_up(e: Optional[Engine]) -> bool:
    """The engine says it is starting up (loading its model, capturing its graphs)."""
    return e is not None and e.phase in STARTUP_PHASES
