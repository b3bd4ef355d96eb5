"""What is wrong on the node this tick, as :class:`Condition` s: thresholds from ``[alerts]``,
GPU health (agents/health.py), idle GPUs under running jobs, deadlines, jobs off their plan,
and the agent's own alerts (agents/alerts.py) carried into the timeline."""

from __future__ import annotations

from collections import deque
from typing import Optional

from ..health import GpuHealth
from ..contract.vocab import AlertKind, EventKind, JobState
from ..contract.jobs import JobSpec
from ..contract.documents import drift_text, over_plan
from ..contract.wire import Alert, Gpu, Host, JobStatus
from .conditions import Condition
from ..contract.watching import AlertThresholds

XID_SHOWN_S = 600.0  # an XID error stays among the node's alerts this long
SLIP_SAMPLE_S = 60.0  # a job's projected finish is remembered once a minute, for a day
SLIP_FRACTION = 0.25  # the projection moving later by more than this (of the time it had left) is news
_CARRIED = {AlertKind.SHARED_GPU, AlertKind.UNOWNED_GPU_PROCESS, AlertKind.ENGINE_FAILED, AlertKind.NO_SUCH_GPU}


def _fmt_t(t: float) -> str:
    import time
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


class Checks:
    def __init__(self) -> None:
        self._idle_since: dict[tuple[str, int], float] = {}
        self._xids: deque[tuple[float, Condition]] = deque(maxlen=256)
        self._proj: dict[str, deque[tuple[float, float]]] = {}

    def evaluate(self, now: float, gpus: list[Gpu], jobs: list[JobStatus], host: Optional[Host],
                 alerts: list[Alert], health: list[GpuHealth], limits: AlertThresholds,
                 specs: dict[str, JobSpec]) -> tuple[list[Condition], list[Condition]]:
        """(conditions true now, one-off happenings of this tick)."""
        owner = _owners(gpus, jobs)
        now_true: list[Condition] = []
        for a in alerts:
            if a.kind is AlertKind.STALLED and a.job:
                now_true.append(Condition(f"stalled:{a.job}", EventKind.STALLED, a.message, job=a.job))
            elif a.kind in _CARRIED:
                what = a.job or (f"gpu{a.gpu}" if a.gpu is not None else "") + (f"-pid{a.pid}" if a.pid else "")
                now_true.append(Condition(f"alert:{a.kind.value}:{what}", EventKind.ALERT, a.message, job=a.job,
                                          gpu=a.gpu))
        now_true += self._thresholds(gpus, host, alerts, limits, owner)
        now_true += self._idle(now, gpus, jobs, limits)
        now_true += self._deadlines(now, jobs, specs)
        now_true += _plan_drift(jobs, limits)
        once: list[Condition] = []
        for h in health:
            now_true += _health(h, owner.get(h.index))
            for xid in h.xids:
                c = Condition(f"gpu_health:xid:{h.index}:{xid}", EventKind.GPU_HEALTH,
                              f"{_sim(h)}GPU {h.index}: XID error {xid}" + _on(owner.get(h.index)),
                              AlertKind.GPU_XID, owner.get(h.index), h.index)
                once.append(c)
                self._xids.append((now, c))
        once += self._slips(now, jobs, specs)
        return now_true, once

    def shown(self, now: float) -> list[Condition]:
        """XID errors of the last ten minutes (for the snapshot's alerts)."""
        return [c for t, c in self._xids if now - t < XID_SHOWN_S]

    def _thresholds(self, gpus: list[Gpu], host: Optional[Host], alerts: list[Alert], limits: AlertThresholds,
                    owner: dict[int, str]) -> list[Condition]:
        out = []
        for g in gpus:
            if g.temp_c is not None and g.temp_c >= limits.gpu_temp_c:
                out.append(Condition(f"temperature:{g.index}", EventKind.TEMPERATURE,
                                     f"GPU {g.index} at {g.temp_c:.0f} C (limit {limits.gpu_temp_c:g} C)"
                                     + _on(owner.get(g.index)), AlertKind.GPU_HOT, owner.get(g.index), g.index))
        shown = {a.message.split(":", 1)[0] for a in alerts if a.kind is AlertKind.DISK_FULL}
        for d in host.disks if host is not None else []:
            if d.total_bytes and 100.0 * d.free_bytes / d.total_bytes < limits.disk_free_pct:
                out.append(Condition(f"disk:{d.path}", EventKind.DISK,
                                     f"{d.path}: only {d.free_bytes / 2**30:.1f} GiB free "
                                     f"({100 * d.free_bytes / d.total_bytes:.1f}%, limit {limits.disk_free_pct:g}%)",
                                     None if d.path in shown else AlertKind.DISK_FULL))
        return out

    def _idle(self, now: float, gpus: list[Gpu], jobs: list[JobStatus], limits: AlertThresholds) -> list[Condition]:
        out = []
        seen = set()
        for j in jobs:
            if j.state is not JobState.RUNNING:
                continue
            for i in j.gpus:
                if i >= len(gpus) or gpus[i].util_pct is None:
                    continue
                key = (j.name, i)
                if gpus[i].util_pct > 0:
                    continue
                seen.add(key)
                since = self._idle_since.setdefault(key, now)
                if now - since >= limits.idle_gpu_s:
                    out.append(Condition(f"gpu_health:idle:{i}:{j.name}", EventKind.GPU_HEALTH,
                                         f"GPU {i}: 0% use for {now - since:.0f} s while job {j.name} runs on it",
                                         AlertKind.GPU_IDLE, j.name, i))
        for key in [k for k in self._idle_since if k not in seen]:
            del self._idle_since[key]
        return out

    def _deadlines(self, now: float, jobs: list[JobStatus], specs: dict[str, JobSpec]) -> list[Condition]:
        out = []
        for j in jobs:
            spec = specs.get(j.name)
            due = spec.deadline_t if spec is not None else None
            p = j.progress
            if due is None or p is None or not j.state.alive or p.eta_s is None:
                continue
            finish = now + p.eta_s
            if finish > due:
                out.append(Condition(f"deadline:{j.name}", EventKind.DEADLINE,
                                     f"job {j.name}: projected to finish {_fmt_t(finish)}, after its deadline "
                                     f"{_fmt_t(due)} ({(finish - due) / 3600:.1f} h late at the current rate)",
                                     AlertKind.DEADLINE, j.name))
        return out

    def _slips(self, now: float, jobs: list[JobStatus], specs: dict[str, JobSpec]) -> list[Condition]:
        """A projected finish that moved later by more than a quarter of the time it had left,
        within a day."""
        out = []
        for j in jobs:
            spec = specs.get(j.name)
            p = j.progress
            if spec is None or spec.deadline is None or p is None or p.eta_s is None or not j.state.alive:
                continue
            finish = now + p.eta_s
            hist = self._proj.setdefault(j.name, deque(maxlen=int(86400 / SLIP_SAMPLE_S) + 1))
            while hist and now - hist[0][0] > 86400:
                hist.popleft()
            if not hist or now - hist[-1][0] >= SLIP_SAMPLE_S:
                hist.append((now, finish))
            t0, f0 = min(hist, key=lambda x: x[1])
            if f0 > t0 and finish - f0 > SLIP_FRACTION * (f0 - t0):
                out.append(Condition(f"deadline-slip:{j.name}", EventKind.DEADLINE,
                                     f"job {j.name}: projected finish moved from {_fmt_t(f0)} to {_fmt_t(finish)} "
                                     f"(+{(finish - f0) / 3600:.1f} h, more than 25% of what was left)",
                                     AlertKind.DEADLINE, j.name))
        return out


def _plan_drift(jobs: list[JobStatus], limits: AlertThresholds) -> list[Condition]:
    """A live job heading for a wall time more than ``plan_drift_pct`` over its plan.json; it
    clears once back within. A job ahead of its plan raises nothing (``over_plan``)."""
    out = []
    for j in jobs:
        p = j.plan
        if not j.state.alive or p is None or not over_plan(p.drift_pct, limits.plan_drift_pct):
            continue
        out.append(Condition(f"plan_drift:{j.name}", EventKind.PLAN_DRIFT,
                             f"job {j.name}: {drift_text(p.planned_wall_s, p.projected_wall_s)}, more than "
                             f"{limits.plan_drift_pct:g}% over its plan ({p.path})", AlertKind.PLAN_DRIFT, j.name))
    return out


def _health(h: GpuHealth, job: Optional[str]) -> list[Condition]:
    out = []
    if h.ecc_uncorrected:
        out.append(Condition(f"gpu_health:ecc:{h.index}", EventKind.GPU_HEALTH,
                             f"{_sim(h)}GPU {h.index}: {h.ecc_uncorrected} uncorrected ECC error(s) since the "
                             f"driver loaded" + _on(job), AlertKind.GPU_ECC, job, h.index))
    if h.pages_pending:
        out.append(Condition(f"gpu_health:pages:{h.index}", EventKind.GPU_HEALTH,
                             f"{_sim(h)}GPU {h.index}: retired pages or row remapping pending (a GPU reset is due)"
                             + _on(job), AlertKind.GPU_PAGES, job, h.index))
    for reason in h.throttle:
        out.append(Condition(f"gpu_health:throttle:{h.index}:{reason}", EventKind.GPU_HEALTH,
                             f"{_sim(h)}GPU {h.index}: clocks slowed down ({reason})" + _on(job),
                             AlertKind.GPU_THROTTLE, job, h.index))
    return out


def _owners(gpus: list[Gpu], jobs: list[JobStatus]) -> dict[int, str]:
    owner: dict[int, str] = {}
    for j in jobs:
        if j.state.alive:
            for i in j.gpus:
                owner.setdefault(i, j.name)
    for g in gpus:
        names = sorted({p.job for p in g.processes if p.job})
        if names:
            owner[g.index] = ", ".join(names)
    return owner


def _on(job: Optional[str]) -> str:
    return f" (job {job})" if job else ""


def _sim(h: GpuHealth) -> str:
    return "(simulated) " if h.simulated else ""
