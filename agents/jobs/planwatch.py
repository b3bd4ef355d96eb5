"""A job's plan against how it goes.

`gpudeck plan generate|extract` writes ``plan.json`` beside the output (``OUT/plan.json``),
with the run's ``projected_wall_s``. For a job whose spec has an ``out``, the agent looks for
that file with one stat(2) per tick and reads it only when its mtime or size changed. It
sets against the plan the wall time the job now heads for: the time since it started plus
its ETA. Since when: the job's first start (``JobStatus.first_started_at``; restarts and
relaunches go on from it), or the plan's ``written_at`` when the plan came later (a plan made
mid-run projects only what was left then). A job that ended with exit code 0 took what it
took: its end minus that start.

A plan.json that cannot be read is named on the job (``JobPlan.error``) and in the agent's
log, once per version of the file; the last good figures are kept, as for progress.json.
The watcher raises ``plan_drift`` when the projection is more than ``[alerts] plan_drift_pct``
over the plan (agents/watch/checks.py, ``over_plan``): only the slower side. A run ahead of its
plan costs less and ends sooner than budgeted; waking someone for it is noise (the demo's first
alert was one). The figures say how far either way all the same.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ..contract.jobs import JobSpec
from ..contract.vocab import JobState
from ..contract.documents import PLAN_FILE, drift_pct, read_plan  # noqa: F401 -- PLAN_FILE: the agent's name for it
from ..contract.wire import JobPlan, Progress
from .backend import JobFacts

log = logging.getLogger("agents")

_ALIVE = frozenset(s for s in JobState if s.alive)


def projected_wall(since: Optional[float], now: float, state: Any, eta_s: Optional[float],
                   ended_at: Optional[float]) -> Optional[float]:
    """The wall time the run heads for: a live job's time since ``since`` plus its ETA; a job
    that ended with exit code 0, what it took. None when that is not known."""
    if since is None:
        return None
    if state in _ALIVE:
        return None if eta_s is None else max(0.0, now - since) + eta_s
    if state == JobState.EXITED and ended_at is not None:
        return max(0.0, ended_at - since)
    return None


@dataclass(frozen=True)
class _Reading:
    stamp: tuple[int, int]  # (mtime_ns, size) of the version read
    planned_wall_s: Optional[float] = None
    written_at: Optional[float] = None
    error: Optional[str] = None


class PlanWatch:
    """The plans of one node's jobs: read when they change, set against each job's progress."""

    def __init__(self, job_dir: Callable[[str], Path]) -> None:
        self._job_dir = job_dir  # a job's state directory: where a relative cwd-less out is found
        self._paths: dict[str, tuple[JobSpec, Optional[str]]] = {}
        self._readings: dict[str, _Reading] = {}  # by path

    def fields(self, name: str, spec: Optional[JobSpec], rec: Optional[JobFacts], progress: Optional[Progress],
               now: float) -> dict[str, Any]:
        """``first_started_at`` and ``plan`` of the job's JobStatus."""
        if rec is None:
            return {}
        first = rec.first_started_at or rec.started_at
        path = self._path(name, spec) if spec is not None else None
        reading = self._reading(name, path) if path is not None else None
        if reading is None or path is None:
            return {"first_started_at": first}
        since = first
        if first is not None and reading.written_at is not None:
            since = max(first, reading.written_at)
        projected = projected_wall(since, now, rec.state, progress.eta_s if progress else None, rec.ended_at)
        plan = JobPlan(path=path, planned_wall_s=reading.planned_wall_s,
                       projected_wall_s=None if projected is None else round(projected, 1),
                       drift_pct=drift_pct(reading.planned_wall_s, projected), since=since,
                       written_at=reading.written_at, error=reading.error)
        return {"first_started_at": first, "plan": plan}

    def _path(self, name: str, spec: JobSpec) -> Optional[str]:
        cached = self._paths.get(name)
        if cached is not None and cached[0] is spec:
            return cached[1]
        out = spec.worker.out if spec.worker is not None else None
        path = None
        if isinstance(out, str) and out:
            out = os.path.expanduser(out)
            if not os.path.isabs(out):  # as the job sees it: from its cwd
                out = os.path.join(os.path.expanduser(spec.cwd) if spec.cwd else str(self._job_dir(name)), out)
            path = os.path.join(out, PLAN_FILE)
        self._paths[name] = (spec, path)
        return path

    def _reading(self, name: str, path: str) -> Optional[_Reading]:
        """The plan at ``path``, read again only when its mtime or size changed; None when there is none."""
        last = self._readings.get(path)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._readings.pop(path, None)
            return None
        except OSError as exc:
            stamp = (-1, -1)
            if last is None or last.stamp != stamp:
                log.warning("job %s: cannot look at %s: %s", name, path, exc.strerror or exc)
            return self._keep(path, last, stamp, f"{path}: {exc.strerror or exc}")
        stamp = (st.st_mtime_ns, st.st_size)
        if last is not None and last.stamp == stamp:
            return last
        try:
            wall, written = read_plan(path)
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            log.warning("job %s: %s: %s; its plan is not compared%s", name, path, why,
                        " (the last good one still is)" if last is not None and last.planned_wall_s else "")
            return self._keep(path, last, stamp, f"{path}: {why}")
        reading = self._readings[path] = _Reading(stamp, wall, written)
        return reading

    def _keep(self, path: str, last: Optional[_Reading], stamp: tuple[int, int], error: str) -> _Reading:
        reading = _Reading(stamp, last.planned_wall_s if last else None, last.written_at if last else None, error)
        self._readings[path] = reading
        return reading
