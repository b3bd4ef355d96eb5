"""What is wrong on the node this tick, as :class:`Condition` s: thresholds from ``[alerts]``,
a disk filling up (watch/disks.py),
GPU health (agents/sense/health.py), idle GPUs under running jobs, deadlines, jobs off their plan,
a job's S3 backlog, resting servers and junk completions (what its progress.json says), priced GPUs idle (the
node's price comes with the fleet's watch settings), and the agent's own alerts
(agents/node/alerts.py) carried into the timeline."""

from __future__ import annotations

from collections import deque
from typing import Callable, Optional

from ..sense.health import GpuHealth
from ..contract.vocab import AlertKind, EventKind, JobState
from ..contract.jobs import JobSpec
from ..contract.documents import drift_text, over_plan
from ..contract.stall import STARTUP_PHASES, engine_starting_up
from ..contract.units import human_bytes, human_duration, index_ranges
from ..contract.wire import Alert, Gpu, Host, JobStatus
from .conditions import Condition
from .disks import DiskFilling
from ..contract.watching import QUALITY_PCT, AlertThresholds

XID_SHOWN_S = 600.0  # an XID error stays among the node's alerts this long
SLIP_SAMPLE_S = 60.0  # a job's projected finish is remembered once a minute, for a day
SLIP_FRACTION = 0.25  # the projection moving later by more than this (of the time it had left) is news
_CARRIED = {AlertKind.SHARED_GPU, AlertKind.UNOWNED_GPU_PROCESS, AlertKind.ENGINE_FAILED, AlertKind.NO_SUCH_GPU}


def _fmt_t(t: float) -> str:
    import time
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def carried_key(a: Alert) -> Optional[str]:
    """The condition an alert of agents/node/alerts.py is carried into the timeline as (its key in
    watch/conditions.py, which knows since when it is up); None for one that is not."""
    if a.kind is AlertKind.STALLED and a.job:
        return f"stalled:{a.job}"
    if a.kind in _CARRIED:
        what = a.job or (f"gpu{a.gpu}" if a.gpu is not None else "") + (f"-pid{a.pid}" if a.pid else "")
        return f"alert:{a.kind.value}:{what}"
    if a.kind is AlertKind.DISK_FULL:  # under 5% free: the disk_free_pct condition of the same path
        return f"disk:{a.message.split(':', 1)[0]}"
    return None


class Checks:
    def __init__(self, node: str = "", held: Callable[[str], bool] = lambda key: False) -> None:
        self.node = node  # named in the idle_paid message
        self.disks = DiskFilling(held)
        self._idle_since: dict[tuple[str, int], float] = {}
        self._paid_idle_since: dict[int, float] = {}  # GPU index -> idle since (unix time)
        self._xids: deque[tuple[float, Condition]] = deque(maxlen=256)
        self._proj: dict[str, deque[tuple[float, float]]] = {}

    def evaluate(self, now: float, gpus: list[Gpu], jobs: list[JobStatus], host: Optional[Host],
                 alerts: list[Alert], health: list[GpuHealth], limits: AlertThresholds,
                 specs: dict[str, JobSpec], price_per_hour: Optional[float] = None
                 ) -> tuple[list[Condition], list[Condition]]:
        """(conditions true now, one-off happenings of this tick)."""
        owner = _owners(gpus, jobs)
        now_true: list[Condition] = []
        for a in alerts:
            if a.kind is AlertKind.STALLED and a.job:
                now_true.append(Condition(carried_key(a) or "", EventKind.STALLED, a.message, job=a.job))
            elif a.kind in _CARRIED:
                now_true.append(Condition(carried_key(a) or "", EventKind.ALERT, a.message, job=a.job, gpu=a.gpu))
        now_true += self._thresholds(gpus, host, alerts, limits, owner)
        now_true += self.disks.conditions(now, host, limits.disk_fill_s, limits.disk_trend_s)
        now_true += self._idle(now, gpus, jobs, limits)
        now_true += self._deadlines(now, jobs, specs)
        now_true += _plan_drift(now, jobs, limits)
        now_true += s3_backlog(now, jobs, limits) + servers_resting(now, jobs, limits) + quality(jobs, limits)
        now_true += self._idle_paid(now, gpus, jobs, limits, price_per_hour)
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

    def shown(self, now: float) -> list[tuple[float, Condition]]:
        """XID errors of the last ten minutes, each with when it came (for the snapshot's alerts)."""
        return [(t, c) for t, c in self._xids if now - t < XID_SHOWN_S]

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
            if j.state is not JobState.RUNNING or getting_ready(j):
                continue
            for i in j.gpus:
                util = gpus[i].util_pct if i < len(gpus) else None
                if util is None:
                    continue
                key = (j.name, i)
                if util > 0:
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

    def _idle_paid(self, now: float, gpus: list[Gpu], jobs: list[JobStatus], limits: AlertThresholds,
                   price: Optional[float]) -> list[Condition]:
        """The node's GPUs idle for ``idle_paid_s``, as one condition with the dollars an hour
        they cost (the node's price spread over its GPUs). Its key names the GPUs: when the set
        changes, the old one resolves and the new one comes up, each with its own figure."""
        if not price or not gpus or any(g.host is not None for g in gpus):  # no price, or a cluster's GPUs
            self._paid_idle_since.clear()
            return []
        idle = set(idle_gpus(gpus, jobs))
        for i in [i for i in self._paid_idle_since if i not in idle]:
            del self._paid_idle_since[i]
        for i in idle:
            self._paid_idle_since.setdefault(i, now)
        over = sorted(i for i, t in self._paid_idle_since.items() if now - t >= limits.idle_paid_s)
        if not over:
            return []
        per_hour = price / len(gpus) * len(over)
        since = min(self._paid_idle_since[i] for i in over)
        which = index_ranges(over)
        on = f" on {self.node}" if self.node else ""
        return [Condition(f"idle_paid:{which}", EventKind.IDLE_PAID,
                          f"GPU {which}{on}: ${per_hour:,.2f}/h idle since {_hhmm(since)}",
                          AlertKind.IDLE_PAID, None, over[0] if len(over) == 1 else None, per_hour=per_hour)]

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
            # the projections of the last day, one a minute, kept as a sliding minimum: only those
            # no later one undercuts (the first is the day's earliest finish, the oldest of equals;
            # the newest is always there). min() over the whole day made this the tick's costliest
            # line after a day (1,441 projections a job)
            hist = self._proj.setdefault(j.name, deque(maxlen=int(86400 / SLIP_SAMPLE_S) + 1))
            while hist and now - hist[0][0] > 86400:
                hist.popleft()
            if not hist or now - hist[-1][0] >= SLIP_SAMPLE_S:
                while hist and hist[-1][1] > finish:
                    hist.pop()
                hist.append((now, finish))
            t0, f0 = hist[0]
            if f0 > t0 and finish - f0 > SLIP_FRACTION * (f0 - t0):
                out.append(Condition(f"deadline-slip:{j.name}", EventKind.DEADLINE,
                                     f"job {j.name}: projected finish moved from {_fmt_t(f0)} to {_fmt_t(finish)} "
                                     f"(+{(finish - f0) / 3600:.1f} h, more than 25% of what was left)",
                                     AlertKind.DEADLINE, j.name))
        return out


PLAN_WARMUP_S = 300.0  # an attempt's first minutes (at most) are its warm-up: no drift is judged
PLAN_WARMUP_SHARE = 0.1  # ... nor more than this share of the planned wall time (a plan of minutes)


def plan_warming_up(j: JobStatus, now: float) -> bool:
    """The job's projection is not yet its pace: it is getting ready (its servers loading, its
    model staging), or its attempt began less than PLAN_WARMUP_S ago (at most a tenth of its
    plan): a rate over its first window still holds the ramp from nothing, and a loaded
    machine's slow start (the demo's engines warming up) made a drift alarm of it."""
    if getting_ready(j):
        return True
    planned = j.plan.planned_wall_s if j.plan is not None else None
    if j.started_at is None or planned is None:
        return False
    return now - j.started_at < min(PLAN_WARMUP_S, PLAN_WARMUP_SHARE * planned)


def _plan_drift(now: float, jobs: list[JobStatus], limits: AlertThresholds) -> list[Condition]:
    """A live job heading for a wall time more than ``plan_drift_pct`` over its plan.json; it
    clears once back within. A job ahead of its plan raises nothing (``over_plan``), nor one
    in its warm-up (:func:`plan_warming_up`)."""
    out = []
    for j in jobs:
        p = j.plan
        if not j.state.alive or p is None or not over_plan(p.drift_pct, limits.plan_drift_pct) \
                or plan_warming_up(j, now):
            continue
        out.append(Condition(f"plan_drift:{j.name}", EventKind.PLAN_DRIFT,
                             f"job {j.name}: {drift_text(p.planned_wall_s, p.projected_wall_s)}, more than "
                             f"{limits.plan_drift_pct:g}% over its plan ({p.path})", AlertKind.PLAN_DRIFT, j.name))
    return out


def s3_backlog(now: float, jobs: list[JobStatus], limits: AlertThresholds) -> list[Condition]:
    """A live job whose oldest upload has waited more than ``s3_backlog_s`` (its progress.json's
    ``uploads``: S3 slow, unreachable or refusing)."""
    out = []
    for j in jobs:
        u = j.progress.uploads if j.progress is not None else None
        if not j.state.alive or u is None or not u.pending or u.oldest_pending_at is None:
            continue
        waited = now - u.oldest_pending_at
        if waited <= limits.s3_backlog_s:
            continue
        size = f" ({human_bytes(u.pending_bytes)})" if u.pending_bytes is not None else ""
        last = (f"; last upload {human_duration(now - u.last_upload_at)} ago" if u.last_upload_at is not None
                else "; nothing uploaded yet")
        why = f": {u.last_error}" if u.last_error else ""
        out.append(Condition(f"s3_backlog:{j.name}", EventKind.S3_BACKLOG,
                             f"job {j.name}: {u.pending} file(s){size} waiting to go to S3, the oldest for "
                             f"{human_duration(waited)}{last}{why}", AlertKind.S3_BACKLOG, j.name))
    return out


def servers_resting(now: float, jobs: list[JobStatus], limits: AlertThresholds) -> list[Condition]:
    """A live job with more than ``servers_resting_pct`` of its servers resting or failing for
    more than ``servers_resting_s`` each (its progress.json's ``servers``)."""
    out = []
    for j in jobs:
        servers = j.progress.servers if j.progress is not None else []
        if not j.state.alive or not servers:
            continue
        long = [s for s in servers if s.down and s.down_since is not None and now - s.down_since > limits.servers_resting_s]
        if not long or 100.0 * len(long) / len(servers) <= limits.servers_resting_pct:
            continue
        worst = min(s.down_since for s in long if s.down_since is not None)
        last = next((s.last_error for s in long if s.last_error), None)
        out.append(Condition(f"servers_resting:{j.name}", EventKind.SERVERS_RESTING,
                             f"job {j.name}: {len(long)}/{len(servers)} servers resting or failing, the longest for "
                             f"{human_duration(now - worst)} ({', '.join(s.url for s in long)})"
                             + (f": {last}" if last else ""), AlertKind.SERVERS_RESTING, j.name))
    return out


QUALITY_JUDGED_FROM = 100  # completions in a job's window before its shares are judged
# each quality problem (agents/workers/generate/quality.py): its alert and how a message says it
QUALITY_ALERTS = {"cut_at_max_tokens": (AlertKind.QUALITY_CUT, "cut at max_tokens"),
                  "empty_answer": (AlertKind.QUALITY_EMPTY, "empty (no answer, no reasoning)"),
                  "no_answer": (AlertKind.QUALITY_NO_ANSWER, "with reasoning and no answer"),
                  "repetition": (AlertKind.QUALITY_REPETITION, "ending in a loop")}


def quality(jobs: list[JobStatus], limits: AlertThresholds) -> list[Condition]:
    """A live generate job whose last completions (its progress.json's ``window``, at least
    :data:`QUALITY_JUDGED_FROM` of them) have more than an ``[alerts]`` ``*_pct`` share of a
    problem: one condition per problem, naming the share, the window and the newest id that had it."""
    out = []
    for j in jobs:
        w = j.progress.window if j.progress is not None else None
        if not j.state.alive or w is None or w.n < QUALITY_JUDGED_FROM:
            continue
        for key, problem in QUALITY_PCT.items():
            limit = getattr(limits, key)
            share = w.share(problem)
            if share is None or not 100.0 * share > limit:
                continue
            kind, what = QUALITY_ALERTS[problem]
            example = w.examples.get(problem)
            pct = round(100.0 * share, 1)
            out.append(Condition(f"quality:{problem}:{j.name}", EventKind.QUALITY,
                                 f"job {j.name}: {pct:g}% of its last {w.n:,} completions {what} (limit {limit:g}%)"
                                 + (f"; e.g. id {example}" if example else ""), kind, j.name,
                                 details={"problem": problem, "share_pct": pct, "window": w.n, "limit_pct": limit,
                                          "example": example}))
    return out


def idle_gpus(gpus: list[Gpu], jobs: list[JobStatus]) -> list[int]:
    """The GPUs doing nothing now: at 0% use (with no job, or under a job that does not use
    them), or with no use reported and neither a live job nor a process on them. A GPU whose
    job is getting ready for it (its engine loading, its model staging, its start-up phase)
    is not idle: it is paid for the start."""
    held = {i for j in jobs if j.state.alive for i in j.gpus}
    readying = {i for j in jobs if j.state.alive and getting_ready(j) for i in j.gpus}
    return [g.index for g in gpus if g.index not in readying and (
        (g.util_pct is not None and g.util_pct <= 0)
        or (g.util_pct is None and g.index not in held and not g.processes))]


def getting_ready(j: JobStatus) -> bool:
    """The job says it is starting up: its engine loads (agents/sense/loading.py), or its own
    progress names a start-up phase (staging its model, compiling)."""
    return (engine_starting_up(j.engine) or (j.staging is not None and j.staging.active)
            or (j.progress is not None and j.progress.phase in STARTUP_PHASES))


def _hhmm(t: float) -> str:
    import time
    return time.strftime("%H:%M UTC", time.gmtime(t))


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
        if not g.processes:
            continue
        names = sorted({p.job for p in g.processes if p.job})
        if names:
            owner[g.index] = ", ".join(names)
    return owner


def _on(job: Optional[str]) -> str:
    return f" (job {job})" if job else ""


def _sim(h: GpuHealth) -> str:
    return "(simulated) " if h.simulated else ""
