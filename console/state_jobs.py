"""A job as the console says it: its row in the jobs table (its cells and FLAGS), its details,
and the helpers that name its state (``shown_state``), fold a cluster job's pending tasks
(``collapse_pending``) and say its tokens/s (``job_tokens_per_s``).

Part of ``FleetState`` (console/state.py), which mixes ``JobRows`` in. No I/O, no UI code."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Optional, Union

from ..agents.contract.documents import over_plan
from ..agents.contract.jobs import JobKind, JobSpec
from ..agents.contract.staging import staging_text
from ..agents.contract.vocab import AlertKind, EngineState, JobState, ShownState
from ..agents.contract.wire import JobStatus, Progress
from ..remote.client import NodeView
from ..remote.fleet import Fleet
from . import chart as charts
from . import cost
from .formatting import (engine_startup_text, junk_flags, quality_flags, ready_text, round_eta, round_figures,
                         startup_text)
from .placements import Placement, moved_text
from .rows import JobDetail, JobRow
from .series import Series

# the vocabulary for the rows built every second: a dict keyed by the members is quicker than
# the enum's own call, and takes a member (found by identity) or its plain value alike
_ALIVE = frozenset(s for s in JobState if s.alive)
_SHOWN: dict[Union[JobState, ShownState], ShownState] = {**{s: ShownState(s.value) for s in JobState},
                                                          **{s: s for s in ShownState}}
_KINDS = {k: k for k in JobKind}
_ENGINE_STATES = {e: e for e in EngineState}
_NOT_STARTED = ShownState.NOT_STARTED
_RUNNING, _SHOWN_READY, _STALLED = JobState.RUNNING, ShownState.READY, AlertKind.STALLED  # no enum lookup per row
_PLAN_DRIFT = AlertKind.PLAN_DRIFT
_ENGINE_READY, _ENGINE_FAILED = EngineState.READY, EngineState.FAILED
NOT_IN_FILE = "not in the fleet file"
_NO_PLAN_NO_PRICE: dict[str, Any] = {}  # a job row's plan and cost cells without a plan.json or a price
COLLAPSE_MIN = 3  # pending tasks of one job in a row, waiting for one reason: shown as one row


class JobRows:
    """The jobs table's rows and a job's details, from the state's jobs, series and costs."""

    fleet: Fleet
    nodes: dict[str, NodeView]
    spark_width: int
    spark_bucket_s: float
    moves: dict[str, Placement]
    _series: dict[tuple[str, str], Series]
    _specs: dict[str, JobSpec]
    _prices: dict[str, Optional[float]]

    if TYPE_CHECKING:  # the other parts of FleetState
        def clock(self) -> float: ...
        def jobs(self) -> list[tuple[str, JobStatus]]: ...
        def costs(self) -> tuple[dict[str, cost.NodeCost], dict[tuple[str, str], cost.JobCost]]: ...
        def spends(self) -> dict[str, cost.JobSpend]: ...
        def job_chart(self, node: str, j: JobStatus, rng: Optional[str], width: int, now: float,
                      row: Optional[JobRow] = None) -> charts.Chart: ...
        def _detail_series(self, node: str, job: str, width: int, now: float) -> dict[str, tuple[Any, ...]]: ...

    def job_rows(self) -> list[JobRow]:
        now = self.clock()
        return [self._job_row(node, j, now) for node, j in collapse_pending(self.jobs())]

    def job_row(self, job: str) -> Optional[JobRow]:
        """The row ``job`` shows on: its own, or the folded run of pending tasks it opens (``acts_on``)."""
        return next((r for r in self.job_rows() if job in (r.name, r.target)), None)

    def _plan_and_cost(self, node: str, j: JobStatus) -> dict[str, Any]:
        """A job row's plan and cost cells, and the flags their alerts add."""
        priced = self._prices.get(node) is not None
        plan = j.plan
        if plan is None and not priced:
            return _NO_PLAN_NO_PRICE
        out: dict[str, Any] = {"priced": priced}
        if plan is not None:
            out.update(planned_s=round_eta(plan.planned_wall_s), projected_s=round_eta(plan.projected_wall_s),
                       drift_pct=None if plan.drift_pct is None else int(round(plan.drift_pct)),
                       plan_off=over_plan(plan.drift_pct, self.fleet.alerts.plan_drift_pct))
        c = self.costs()[1].get((node, j.name)) if priced else None
        if c is not None:
            out.update(cost_per_m_tokens=cost.round_money(c.per_m_tokens),
                       cost_per_useful=cost.round_money(c.per_useful))
        return out

    def _job_row(self, node: str, j: JobStatus, now: float, spark_width: Optional[int] = None) -> JobRow:
        p, e = j.progress, j.engine
        view = self.nodes.get(node)
        stale = view is None or not view.reachable
        series = self._series.get((node, j.name))
        width = spark_width or self.spark_width
        spark = series.last(width, now) if series is not None else (None,) * width
        state = _SHOWN[j.state]
        if state is _NOT_STARTED and _queued(j):  # a task sbatch gave Slurm, waiting in its queue
            state = ShownState.QUEUED
        alive = j.state in _ALIVE
        if e is not None and j.state == _RUNNING and e.state == _ENGINE_READY:
            state = _SHOWN_READY
        flags = self._flags(node, j, state, now)
        place = self.moves.get(j.name)
        moved = None if place is None else moved_text(place, now) if node == place.node else \
            f"moved to {place.node}" if node == place.moved_from else None
        return JobRow(
            key=f"{node}/{j.name}", name=j.name, node=node, kind=_KINDS[j.kind], state=state, gpus=tuple(j.gpus),
            attempt=j.attempt, tokens_per_s=round_figures(job_tokens_per_s(j)) if alive else None,
            spark=spark, done=p.done if p else None, total=p.total if p else None,
            rate_per_s=round_figures(p.rate_per_s) if p and alive else None,
            eta_s=round_eta(p.eta_s) if p and alive else None, flags=flags, exit_code=j.exit_code,
            engine_state=_ENGINE_STATES[e.state] if e else None,
            running=int(e.running) if e and e.running is not None else None,
            queued=int(e.queued) if e and e.queued is not None else None,
            kv_usage=round(e.kv_usage, 3) if e and e.kv_usage is not None else None,
            accept_length=round(e.accept_length, 2) if e and e.accept_length is not None else None,
            stale=stale, pid=j.pid if alive else None, moved=moved, ready=ready_text(e) if alive else None,
            **_startup_cells(j, alive),
            **self._plan_and_cost(node, j),
            **_health_cells(p, now), **_task_cells(j))

    def _flags(self, node: str, j: JobStatus, state: ShownState, now: float) -> tuple[str, ...]:
        """A job row's FLAGS: its quality, alerts, start-up, waits, and where it came from."""
        p, e = j.progress, j.engine
        view = self.nodes.get(node)
        alive = j.state in _ALIVE
        flags = quality_flags(p.quality if p else {})
        if p is not None and p.error:
            flags += ("progress?",)
        if e is not None and e.state == _ENGINE_FAILED:
            flags += ("engine!",)
        if view is not None and view.snapshot is not None:
            if any(a.kind == _STALLED and a.job == j.name for a in view.snapshot.alerts):
                flags += (_STALLED.value,)  # the alert, named on its job
            if p is not None and p.window is not None:  # its quality alerts: "junk cut 100%"
                flags += junk_flags([a.kind.value for a in view.snapshot.alerts if a.job == j.name], p.window)
            if j.plan is not None and j.plan.drift_pct is not None and \
                    any(a.kind == _PLAN_DRIFT and a.job == j.name for a in view.snapshot.alerts):
                flags += (f"plan {j.plan.drift_pct:+.0f}%",)
        if j.plan is not None and j.plan.error:
            flags += ("plan?",)
        if p is not None and p.blocked and alive:
            flags += ("blocked",)  # it cannot write its output (a full disk): generation paused
        if alive and (starting := staging_text(j.staging) or startup_text(p, now) or engine_startup_text(e, now)):
            flags += (starting,)  # "staging 42% (23 of 54 GB, 1.1 GB/s)", "loading 13%, 40s": a start, not a stall
        elif j.staging is not None and j.staging.state == "failed" and (failed := staging_text(j.staging)):
            flags += (failed,)
        if j.waiting:  # its `after`: what it waits for, or why it is blocked
            flags += (j.waiting if len(j.waiting) <= 60 else j.waiting[:59] + "…",)
        if state is ShownState.QUEUED:
            flags += ("queued by Slurm" + (f": {j.task.reason}" if j.task and j.task.reason else ""),)
        if j.adopted and alive:
            flags += ("adopted",)
        elif alive and self.fleet.path is not None and (j.task.job if j.task is not None else j.name) not in self._specs:
            flags += (NOT_IN_FILE,)  # dropped from the file while it runs: shown, never killed (console/reload.py)
        if j.fenced and j.state is JobState.FENCED:  # where the job went: "the job moved to node b at …"
            flags += (j.fenced.replace("the job moved", "moved", 1),)
        return flags

    def job_detail(self, key: str, spark_width: int = 60, chart_range: Optional[str] = None,
                   chart_width: Optional[int] = None) -> Optional[JobDetail]:
        """The details of the job ``key`` ("node/name"), with its chart over ``chart_range`` (None:
        the least range that holds its run, ``chart.fit_range``) in ``chart_width`` columns."""
        node, _, name = key.partition("/")
        for n, j in self.jobs():
            if n == node and j.name == name:
                now = self.clock()
                row = self._job_row(n, j, now)
                series = self._series.get((n, j.name))
                spec = self._specs.get(j.name)
                try:
                    command = spec.describe() if spec else None
                except (ImportError, AttributeError, ValueError) as exc:  # a worker not installed here
                    command = f"({type(exc).__name__}: {exc})"
                p, e = j.progress, j.engine
                return JobDetail(
                    row=row, pids=tuple(j.pids), started_at=j.started_at, ended_at=j.ended_at,
                    log_path=j.log_path, quality=tuple(sorted((p.quality if p else {}).items())),
                    progress_error=p.error if p else None, engine_url=e.url if e else None,
                    engine_error=e.error if e else None, command=command,
                    last_kill=j.last_kill, argv=tuple(j.argv),
                    last_tokens_per_s=p.last_tokens_per_s if p else None,
                    last_rate_at=p.last_rate_at if p else None, error=j.error, plan=j.plan,
                    useful=cost.useful_share(p), servers=tuple(p.servers) if p else (),
                    uploads=p.uploads if p else None, at=now, window=p.window if p else None,
                    spend=self.spends().get(j.name), s3_price_per_gb_month=self.fleet.s3_price_per_gb_month,
                    spark=series.last(spark_width, now) if series else (None,) * spark_width,
                    bucket_s=self.spark_bucket_s, **self._detail_series(n, j.name, spark_width, now),
                    chart=self.job_chart(n, j, chart_range, chart_width or spark_width, now, row))
        return None


def _task_cells(j: JobStatus) -> dict[str, Any]:
    """A cluster task's row: its scheduler id, and for a folded run (collapse_pending: its task is
    the run's first) the first task, which the keys act on."""
    t = j.task
    if t is None:
        return {}
    first = f"{t.job}/{t.index}"
    return {"task_id": f"{t.array_id}_{t.index}" if t.array_id else None,
            "target": first if j.name != first else None}


def shown_state(j: JobStatus) -> ShownState:
    """A job's state as the console and `status` say it (`status --json`'s ``state``): never
    launched ``not_started``, a cluster task in Slurm's queue ``queued``, else its own state
    (``unknown``: on a node that cannot be read)."""
    shown = _SHOWN[j.state]
    return ShownState.QUEUED if shown is _NOT_STARTED and _queued(j) else shown


def _queued(j: JobStatus) -> bool:
    """A cluster task Slurm holds (sbatch gave it an array id, or squeue lists it): not a task
    never submitted, which is not started like any job never launched."""
    return j.task is not None and (j.task.array_id is not None or j.task.scheduler_state is not None)


def collapse_pending(jobs: list[tuple[str, JobStatus]]) -> list[tuple[str, JobStatus]]:
    """A cluster job's pending tasks that wait for the same reason, in a run, as one row:
    ``extract/[16-255]`` (240 tasks), so 256 tasks read as a few lines."""
    out: list[tuple[str, JobStatus]] = []
    run: list[tuple[str, JobStatus]] = []

    def key(node: str, j: JobStatus) -> Optional[tuple[str, str, Optional[str], Optional[str]]]:
        t = j.task
        if t is None or j.state is not JobState.PENDING or j.progress is not None or j.last_kill is not None:
            return None
        return (node, t.job, t.reason, t.note)

    def flush() -> None:
        if len(run) >= COLLAPSE_MIN:
            node, first = run[0]
            last = run[-1][1]
            assert first.task is not None and last.task is not None
            task = dataclasses.replace(first.task, note=f"{len(run)} tasks" + (f"; {first.task.note}" if
                                                                                 first.task.note else ""))
            out.append((node, dataclasses.replace(first, name=f"{first.task.job}/[{first.task.index}-"
                                                              f"{last.task.index}]", task=task)))
        else:
            out.extend(run)
        run.clear()

    for node, j in jobs:
        k = key(node, j)
        if run and (k is None or k != key(*run[-1]) or j.task is None or
                    j.task.index != (run[-1][1].task.index + 1 if run[-1][1].task else -1)):
            flush()
        if k is None:
            out.append((node, j))
        else:
            run.append((node, j))
    flush()
    return out


def job_tokens_per_s(j: JobStatus) -> Optional[float]:
    """A live job's tokens/s; None for a job that is not running (its last figure is
    ``progress.last_tokens_per_s``, shown as such)."""
    if j.state not in _ALIVE:
        return None
    if j.progress is not None and j.progress.tokens_per_s is not None:
        return j.progress.tokens_per_s
    if j.engine is not None:
        return j.engine.tokens_per_s
    return None


_NO_HEALTH: dict[str, Any] = {}  # a job row's S3 and server cells for a job that reports neither


def _health_cells(p: Optional[Progress], now: float) -> dict[str, Any]:
    """A job row's S3 backlog, the age of its last upload and its servers resting, rounded to
    what the cells show."""
    if p is None or (p.uploads is None and not p.servers):
        return _NO_HEALTH
    out: dict[str, Any] = {}
    u = p.uploads
    if u is not None:
        out.update(uploads_pending=u.pending, uploads_bytes=u.pending_bytes,
                   last_upload_s=round_eta(max(0.0, now - u.last_upload_at)) if u.last_upload_at is not None else None)
    if p.servers:
        out.update(servers_down=p.servers_down, servers_total=len(p.servers))
    return out


def _startup_cells(j: JobStatus, alive: bool) -> dict[str, Any]:
    """A job row's start-up figure for its DONE cell: a stage copying, or an engine loading."""
    s, e = j.staging, j.engine
    if not alive:
        return {}
    if s is not None and s.active and s.pct is not None:
        return {"startup": f"staging {s.pct:.0f}%", "startup_frac": s.pct / 100}
    if e is not None and e.phase is not None and e.phase_pct is not None:
        return {"startup": f"{e.phase} {e.phase_pct:.0f}%", "startup_frac": e.phase_pct / 100}
    return {}
