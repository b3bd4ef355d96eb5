"""FleetState: pure data built from snapshots. No I/O, no UI code.

Widgets and headless commands both read it. ``apply`` takes one node's snapshot,
``apply_history`` backfills the sparkline series after a reconnect (and the coarse series the
charts draw longer ranges from: the greeting's 12 hours), ``apply_history_page`` keeps a page
of the node's history read for a chart's range, ``mark_unreachable`` records why a node
cannot be read; ``timeline`` holds the nodes' events (``timeline.py``). ``job_chart`` and
``node_chart`` build the charts (``chart.py``).
The ``*_rows`` methods and ``totals`` turn the state into the frozen rows of ``rows`` that
widgets only render: two equal rows draw the same line, so a table redraws a row only when
its row changed.
"""

from __future__ import annotations

import dataclasses
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Union

from ..agents.contract.vocab import AlertKind, EngineState, JobState, ShownState
from ..agents.contract.jobs import JobKind, JobSpec
from ..agents.contract.documents import over_plan
from ..agents.contract.ops import GPU_FIGURES, JOB_FIGURES, CopyDiff, HistoryPage
from ..agents.contract.staging import staging_text
from ..agents.contract.wire import Alert, Engine, Gpu, History, JobStatus, Progress, Snapshot
from . import chart as charts
from . import cost
from .formatting import (copy_text, engine_startup_text, human_duration, junk_flags, quality_flags, ready_text,
                         round_eta, round_figures, startup_text)
from .placements import Placement, moved_text
from .rows import (SPARK_BUCKET_S, AlertRow, FleetRow, GpuRow, JobDetail, JobRow, NodeRow, NodeState,
                                  ProcRow, Totals)
from .series import Coarse, Recent, Series
from .timeline import Timeline
from ..remote.client import NodeError, NodeView
from ..remote.fleet import LOCAL, Fleet

BUSY_UTIL_PCT = 5.0
GPU_SPARK = 10  # utilization buckets kept per GPU for its sparkline
GPU_SPARK_BUCKET_S = 5.0
# a job's figures over time, in its one Series, by the history's names (agents/contract/ops.py):
# the sparkline's tokens/s, then what the details chart draws (items done; an engine's running
# and queued requests and KV-cache use)
FIGURES = JOB_FIGURES[:5]
COARSE_FIGURES = FIGURES[:2]  # what a job's coarse series keeps: tokens/s and items done
PAGE_FIGURES = FIGURES  # what a job's chart asks the history for
# the JobDetail field each of the details' figures fills
_DETAIL_SERIES = {"done": "done_series", "running": "running_series", "queued": "queued_series",
                  "kv_usage": "kv_series"}
GPU_PAGE_FIGURE = GPU_FIGURES[1]  # util_pct: what a node's chart draws of its GPUs' history: their mean, per bucket
PAGE_RETRY_S = 60.0  # a page that could not be read is asked for again after this long

# the vocabulary for the rows built every second: a dict keyed by the members is quicker than
# the enum's own call, and takes a member (found by identity) or its plain value alike
_ALIVE = frozenset(s for s in JobState if s.alive)
_SHOWN = {**{s: ShownState(s.value) for s in JobState}, **{s: s for s in ShownState}}
_KINDS = {k: k for k in JobKind}
_ENGINE_STATES = {e: e for e in EngineState}
_NOT_STARTED = ShownState.NOT_STARTED
_RUNNING, _SHOWN_READY, _STALLED = JobState.RUNNING, ShownState.READY, AlertKind.STALLED  # no enum lookup per row
_PLAN_DRIFT, _IDLE_PAID = AlertKind.PLAN_DRIFT, AlertKind.IDLE_PAID
_ENGINE_READY, _ENGINE_FAILED = EngineState.READY, EngineState.FAILED
NOT_IN_FILE = "not in the fleet file"
_SAMPLED = (JobState.RUNNING, JobState.STARTING)  # the states whose tokens/s the sparkline records
_UNPRICED = cost.NodeCost(None, None, None)  # a node the fleet file gives no price
_NO_PLAN_NO_PRICE: dict[str, Any] = {}  # a job row's plan and cost cells without a plan.json or a price


# ---------------------------------------------------------------- the state


@dataclass
class FleetState:
    fleet: Fleet
    nodes: dict[str, NodeView] = field(default_factory=dict)
    clock: Callable[[], float] = time.time
    spark_width: int = 12
    spark_bucket_s: float = SPARK_BUCKET_S
    timeline: Timeline = field(default_factory=Timeline)  # the nodes' events, merged (the events view)
    reads_history: bool = True  # charts of long ranges ask the nodes for their history (False: not connected)
    moves: dict[str, Placement] = field(default_factory=dict)  # jobs moved from this laptop (placements.moved)

    def __post_init__(self) -> None:
        self._series: dict[tuple[str, str], Series] = {}  # (node, job): its FIGURES
        self._gpu_util: dict[str, Recent] = {}  # node: its GPUs' utilization
        self._coarse: dict[tuple[str, str], Coarse] = {}  # (node, job): tokens/s and done a minute, 12 h
        self._node_coarse: dict[str, Coarse] = {}  # node: its GPUs' mean utilization a minute, 12 h
        # (node, job, range): the node's history, read for a job's chart; job None: for the node's
        # own chart (its GPUs' mean utilization)
        self._pages: dict[tuple[str, Optional[str], str], _Page] = {}
        self._last_t: dict[str, float] = {}  # newest sample time per node, live or backfilled
        self._fleet_rows: dict[str, tuple[tuple, list[FleetRow]]] = {}
        self._jobs: Optional[tuple[int, list[tuple[str, JobStatus]]]] = None
        self.version = 0  # bumped on every change: views skip work when it has not moved
        self.set_fleet(self.fleet)

    def set_fleet(self, fleet: Fleet) -> None:
        """The fleet file, read (again: the console re-reads it before a launch or relaunch)."""
        self.fleet = fleet
        self._specs: dict[str, JobSpec] = {j.name: j for j in self.fleet.jobs}
        self._engine_clients = engine_clients(self.fleet)
        self._prices = {n.name: n.price_per_hour for n in self.fleet.nodes}  # None: not priced
        self._costs: Optional[tuple[tuple, dict, dict]] = None
        self._spends: Optional[tuple[tuple, dict]] = None
        self.version += 1

    def set_moves(self, moves: dict[str, Placement]) -> None:
        """Where the moved jobs run now and where they came from (console/placements.py): their
        rows say "moved from gpu1 02:10"."""
        if moves != self.moves:
            self.moves = dict(moves)
            self.version += 1

    def moved_from(self, node: str, job: str) -> Optional[Placement]:
        """The placement of ``job`` when ``node`` is where it was moved to."""
        place = self.moves.get(job)
        return place if place is not None and place.node == node else None

    # ------------------------------------------------------------ input

    def expect(self, nodes: Iterable[str]) -> None:
        """Nodes the console will connect to: shown as connecting until they answer."""
        for name in nodes:
            self.nodes.setdefault(name, NodeView(name))
        self.version += 1

    def apply(self, snap: Snapshot) -> None:
        view = self.nodes.setdefault(snap.node, NodeView(snap.node))
        view.snapshot, view.error, view.unreachable_since = snap, None, None
        view.retry_in_s = view.told_at = None
        t = snap.t
        if t > self._last_t.get(snap.node, 0.0):
            self._last_t[snap.node] = t
            for j in snap.jobs:
                if j.state in _SAMPLED:
                    done = j.progress.done if j.progress is not None else None
                    series, e = self._series_of(snap.node, j.name), j.engine
                    tps = job_tokens_per_s(j)
                    if e is None:
                        series.add(t, tps, done)
                    else:
                        series.add(t, tps, done, e.running, e.queued, e.kv_usage)
                    self._coarse_of(snap.node, j.name).add(t, tps, done)
            util = _utilization(snap.gpus)
            self._util_of(snap.node).add(t, util)
            self._node_coarse_of(snap.node).add(t, _mean(util))
        self.version += 1

    def apply_history(self, history: History) -> None:
        """Fill the sparklines with what the agent saw while the console was away."""
        last = self._last_t.get(history.node, 0.0)
        newest = last
        for s in history.samples:
            if s.t <= last:
                continue  # seen live already
            for job, tps in s.job_tokens_per_s.items():
                self._series_of(history.node, job).add(s.t, tps)
                self._coarse_of(history.node, job).add(s.t, tps)
            for job, done in s.job_done.items():
                self._series_of(history.node, job).add(s.t, None, done)
                self._coarse_of(history.node, job).add(s.t, None, done)
            self._util_of(history.node).add(s.t, s.gpu_util)
            self._node_coarse_of(history.node).add(s.t, _mean(s.gpu_util))
            newest = max(newest, s.t)
        self._last_t[history.node] = newest
        self.version += 1

    def apply_history_page(self, node: str, job: Optional[str], rng: str, page: HistoryPage,
                           fetched_at: float) -> None:
        """A page of the node's history read for ``job``'s chart over ``rng`` (its points at the
        range's resolution), or for the node's own chart (``job`` None: its GPUs' points): kept
        per range until it is old (``_Page.fresh``)."""
        step = charts.STEP_S.get(page.resolution or "", 60.0)
        if job is None:
            self._pages[(node, None, rng)] = _gpu_page(page, step, fetched_at, fetched_at - charts.RANGES[rng])
            self.version += 1
            return
        figures: dict[str, list[charts.Bucket]] = {f: [] for f in PAGE_FIGURES}
        until = fetched_at - charts.RANGES[rng]
        for p in page.points:
            if p.job != job:
                continue
            end = p.t + step
            until = max(until, min(end, fetched_at))
            for f in PAGE_FIGURES:
                v = p.mean.get(f)
                if v is not None:
                    figures[f].append((p.t, end, v))
        self._pages[(node, job, rng)] = _Page(fetched_at, page.resolution or "", until, figures)
        self.version += 1

    def history_asked(self, node: str, job: Optional[str], rng: str, at: float) -> None:
        """A page was asked for: not asked again while the answer is due."""
        old = self._pages.get((node, job, rng))
        self._pages[(node, job, rng)] = _Page(at, "", old.until if old else 0.0, old.figures if old else {},
                                              asking=True)

    def history_asking(self, node: str, job: Optional[str], rng: str) -> bool:
        """Whether that page's read is under way."""
        page = self._pages.get((node, job, rng))
        return page is not None and page.asking

    def history_failed(self, node: str, job: Optional[str], rng: str, error: str, at: float) -> None:
        old = self._pages.get((node, job, rng))
        self._pages[(node, job, rng)] = _Page(at, old.resolution if old else "", old.until if old else 0.0,
                                              old.figures if old else {}, error=error)
        self.version += 1

    def mark_unreachable(self, node: str, error: Union[NodeError, str], since: Optional[float] = None,
                         retry_in_s: Optional[float] = None) -> None:
        view = self.nodes.setdefault(node, NodeView(node))
        view.error = error if isinstance(error, NodeError) else NodeError(node, error)
        view.unreachable_since = view.unreachable_since or since or self.clock()
        view.retry_in_s = retry_in_s
        view.told_at = self.clock()
        self.version += 1

    def set_copy(self, node: str, copy: Optional[CopyDiff]) -> None:
        """How this file's jobs differ from another copy's of its fleet on ``node``, as the node's
        last configure said (None: they do not): kept until a configure says otherwise."""
        view = self.nodes.setdefault(node, NodeView(node))
        if view.copy != copy:
            view.copy = copy
            self.version += 1

    def _util_of(self, node: str) -> Recent:
        r = self._gpu_util.get(node)
        if r is None:
            r = self._gpu_util[node] = Recent(GPU_SPARK_BUCKET_S, GPU_SPARK)
        return r

    def _coarse_of(self, node: str, job: str) -> Coarse:
        c = self._coarse.get((node, job))
        if c is None:
            c = self._coarse[(node, job)] = Coarse(len(COARSE_FIGURES))
        return c

    def _node_coarse_of(self, node: str) -> Coarse:
        c = self._node_coarse.get(node)
        if c is None:
            c = self._node_coarse[node] = Coarse(1)
        return c

    def _series_of(self, node: str, job: str) -> Series:
        s = self._series.get((node, job))
        if s is None:
            s = self._series[(node, job)] = Series(self.spark_bucket_s, figures=len(FIGURES))
        return s

    # ------------------------------------------------------------ derived views

    def jobs(self) -> list[tuple[str, JobStatus]]:
        """Every job of the fleet with its node; declared jobs on unreachable nodes included.
        Built once per state version: callers read the list, never change it."""
        if self._jobs is not None and self._jobs[0] == self.version:
            return self._jobs[1]
        out: list[tuple[str, JobStatus]] = []
        seen: set[str] = set()
        for name, view in self.nodes.items():
            if view.snapshot is None:
                continue
            declared = self._declared_on(name)
            for j in view.snapshot.jobs:
                # another fleet's job on a shared home: not shown, unless this file declares it
                # too (a copy of the file): then shown as it is, marked with its owner
                if not self.fleet.owns(j.fleet) and j.name not in declared:
                    continue
                out.append((name, j))
                seen.add(j.name)
                if j.task is not None:  # a cluster job's task row stands for its job
                    seen.add(j.task.job)
        for spec in self.fleet.jobs:
            if spec.name not in seen:
                out.append((spec.target or LOCAL, _unknown(spec)))
        self._jobs = (self.version, out)
        return out

    def _declared_on(self, node: str) -> set[str]:
        return {s.name for s in self.fleet.jobs_on(node)}

    def owned_elsewhere(self, node: str) -> dict[str, str]:
        """This fleet file's jobs on ``node`` that the node says another fleet owns: job -> owner."""
        view = self.nodes.get(node)
        if view is None or view.snapshot is None:
            return {}
        declared = self._declared_on(node)
        return {j.name: j.fleet for j in view.snapshot.jobs
                if j.fleet and j.name in declared and not self.fleet.owns(j.fleet)}

    def node_state(self, view: NodeView) -> NodeState:
        if not view.reachable:
            if view.error is None:
                return NodeState.CONNECTING
            # it answered, and its agent would not serve: its own state, never "unreachable"
            return NodeState.AGENT_FAILED if view.agent_failed else NodeState.UNREACHABLE
        return NodeState.OWNED_ELSEWHERE if self.owned_elsewhere(view.name) else NodeState.UP

    def alerts(self) -> list[tuple[str, Alert]]:
        """The nodes' alerts as they sent them (each with since when it is up on its node, the
        same in every console), and each node this console cannot reach, since it could not."""
        out = []
        for name, view in self.nodes.items():
            if view.error is not None and view.agent_failed:
                out.append((name, Alert(AlertKind.AGENT_FAILED, f"node {name}: its agent failed: {view.error.reason}",
                                        since=view.unreachable_since)))
            elif view.error is not None:
                out.append((name, Alert(AlertKind.UNREACHABLE, f"node {name} unreachable: {view.error.reason}",
                                        since=view.unreachable_since)))
            if view.snapshot is not None:
                out.extend((name, a) for a in view.snapshot.alerts)
        return out

    def totals(self) -> Totals:
        up = busy = gpus = 0
        for view in self.nodes.values():
            if not view.reachable:
                continue
            up += 1
            for g in view.snapshot.gpus:  # type: ignore[union-attr]
                gpus += 1
                if g.processes or (g.util_pct or 0) >= BUSY_UTIL_PCT:
                    busy += 1
        tps: Optional[float] = None
        slowest: tuple[Optional[float], Optional[str]] = (None, None)
        running = 0
        jobs = self.jobs()
        for node, j in jobs:
            if j.state not in _ALIVE:
                continue
            running += 1
            t = self._counted_tokens_per_s(j)
            if t is not None:
                tps = (tps or 0.0) + t
            eta = j.progress.eta_s if j.progress else None
            if eta is not None and (slowest[0] is None or eta > slowest[0]):
                slowest = (eta, j.name)
        simulated = any(v.snapshot is not None and v.snapshot.gpus_simulated for v in self.nodes.values())
        money = cost.fleet_cost(self.costs()[0].values())
        return Totals(nodes_up=up, nodes_total=len(self.nodes), gpus_busy=busy, gpus_total=gpus,
                      tokens_per_s=round_figures(tps), slowest_eta_s=round_eta(slowest[0]), slowest_job=slowest[1],
                      jobs_running=running, jobs_total=len(jobs), alerts=len(self.alerts()), gpus_simulated=simulated,
                      spent=cost.round_money(money.spent), to_finish=cost.round_money(money.to_finish),
                      priced=money.nodes_priced > 0, idle_per_hour=cost.round_money(self.idle_per_hour()),
                      burned=cost.round_money(self.burned()))

    def idle_per_hour(self) -> Optional[float]:
        """The dollars an hour of the priced GPUs idle past ``[alerts] idle_paid_s``: the nodes'
        ``idle_paid`` alerts, which carry it (the node's watcher knows since when a GPU is idle;
        the console, opened later, would not). None while no GPU is."""
        figures = [a.per_hour for view in self.nodes.values() if view.reachable and view.snapshot is not None
                   for a in view.snapshot.alerts if a.kind == _IDLE_PAID and a.per_hour is not None]
        return sum(figures) if figures else None

    def costs(self) -> tuple[dict[str, cost.NodeCost], dict[tuple[str, str], cost.JobCost]]:
        """Each node's price, spent and to finish; each live generation job's dollars per M
        tokens and per useful completion, by (node, job). Computed once per state and second.
        A priced node that does not answer has no figures (None: unknown, never $0)."""
        now = self.clock()
        key = (self.version, int(now))
        if self._costs is not None and self._costs[0] == key:
            return self._costs[1], self._costs[2]
        nodes: dict[str, cost.NodeCost] = dict.fromkeys(self.nodes, _UNPRICED)
        jobs: dict[tuple[str, str], cost.JobCost] = {}
        by_node: dict[str, list[JobStatus]] = {n: [] for n, price in self._prices.items() if price is not None}
        if by_node:  # no node has a price: nothing to count
            for node, j in self.jobs():
                if node in by_node:
                    by_node[node].append(j)
        for node, js in by_node.items():
            price = self._prices[node]
            view = self.nodes.get(node)
            if view is None:  # not in use (the implicit local node of a fleet of others): not counted
                continue
            if not view.reachable:
                nodes[node] = cost.NodeCost(price, None, None)
                continue
            nodes[node] = cost.NodeCost(price, cost.node_spent(price, js, now), cost.node_to_finish(price, js))
            jobs.update(((node, name), c) for name, c in cost.generation_costs(price, js).items())
        self._costs = (key, nodes, jobs)
        return nodes, jobs

    def spends(self) -> dict[str, cost.JobSpend]:
        """Each job's dollars over its attempts on every node it ran on, by name (a moved job's
        attempts on both nodes, each at its node's price), and what the killed, failed and
        lost ones burned. Computed once per state and second; {} when no node has a price."""
        now = self.clock()
        key = (self.version, int(now))
        if self._spends is not None and self._spends[0] == key:
            return self._spends[1]
        runs: dict[str, list] = {}
        if any(p is not None for p in self._prices.values()):
            for node, j in self.jobs():
                view = self.nodes.get(node)
                gpus = len(view.snapshot.gpus) if view is not None and view.snapshot is not None else 0
                runs.setdefault(j.name, []).append((node, j, self._prices.get(node), gpus))
        out = {name: cost.job_spend(rs, now) for name, rs in runs.items()}
        self._spends = (key, out)
        return out

    def burned(self) -> Optional[float]:
        """What the fleet's killed, failed and lost attempts cost; None when not known."""
        known = [s.burned for s in self.spends().values() if s.burned is not None]
        return sum(known) if known else None

    def _counted_tokens_per_s(self, j: JobStatus) -> Optional[float]:
        """A job's share of the fleet's tokens/s. A client of an engine of this fleet (a
        generate job against its servers, a router before its workers) is not counted, even
        when it scrapes figures of its own: the engine already counts them."""
        if j.name in self._engine_clients:
            return None
        if j.engine is not None and j.engine.tokens_per_s is not None:
            return j.engine.tokens_per_s
        return j.progress.tokens_per_s if j.progress else None

    # ------------------------------------------------------------ rows

    def fleet_rows(self) -> list[FleetRow]:
        """A node row, then one row per GPU, for every node."""
        now = self.clock()
        out: list[FleetRow] = []
        for name, view in self.nodes.items():
            snap = view.snapshot
            down_for = int(now - view.unreachable_since) if view.unreachable_since else None
            retry = None
            if view.retry_in_s is not None and view.told_at is not None:
                retry = max(0, int(round(view.told_at + view.retry_in_s - now)))
            key = (snap.seq if snap else None, snap.t if snap else None, str(view.error), down_for, retry, view.copy)
            cached = self._fleet_rows.get(name)
            if cached is not None and cached[0] == key:
                out.extend(cached[1])
                continue
            rows = self._node_rows(view, down_for, retry)
            self._fleet_rows[name] = (key, rows)
            out.extend(rows)
        return out

    def _node_rows(self, view: NodeView, down_for: Optional[int], retry: Optional[int]) -> list[FleetRow]:
        snap = view.snapshot
        name = view.name
        state = self.node_state(view)
        if snap is None:
            return [NodeRow(key=f"node:{name}", node=name, state=state, error=_reason(view),
                            since=view.unreachable_since, down_for_s=down_for, retry_in_s=retry)]
        h = snap.host
        rows: list[FleetRow] = [NodeRow(
            key=f"node:{name}", node=name, state=state, hostname=h.hostname, cpu_pct=int(round(h.cpu_pct)),
            cpu_count=h.cpu_count, mem_used_gib=round(h.mem_used_bytes / 2**30, 1),
            mem_total_gib=round(h.mem_total_bytes / 2**30, 1), load1=round(h.load1, 1), gpu_count=len(snap.gpus),
            gpu_error=snap.gpu_error, error=_reason(view), since=view.unreachable_since, down_for_s=down_for,
            retry_in_s=retry, owned_elsewhere=tuple(sorted(self.owned_elsewhere(name).items())),
            copy_differs=copy_text(view.copy))]
        stale = not view.reachable
        recent = self._gpu_util.get(name)
        for g in snap.gpus:
            rows.append(GpuRow.of(name, g, stale, recent.values(g.index) if recent is not None else ()))
            for p in g.processes:
                rows.append(ProcRow(f"proc:{name}:{g.host + ':' if g.host else ''}{g.index}:{p.pid}", name, g.index, p.pid,
                                    round(p.used_mib / 1024, 1), p.job,
                                    None if p.cpu_pct is None else int(round(p.cpu_pct)), p.command, stale))
        return rows

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
        elif j.staging is not None and j.staging.state == "failed":
            flags += (staging_text(j.staging),)
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

    # ------------------------------------------------------------ charts

    def job_chart(self, node: str, j: JobStatus, rng: Optional[str], width: int, now: float,
                  row: Optional[JobRow] = None) -> charts.Chart:
        """``j``'s chart over ``rng`` ending now, ``width`` columns: tokens/s; items done against its
        plan, when it has a plan.json; an engine's requests and KV cache. 1h from the 15 s series;
        the longer ranges from the node's history page when one was read, the coarse series after
        it (or for the whole window, until it is)."""
        row = row or self._job_row(node, j, now)
        first = j.first_started_at or j.started_at
        rng = rng if rng in charts.RANGES else charts.fit_range(now - first if first else None)
        start = now - charts.RANGES[rng]
        series = self._series.get((node, j.name))
        coarse = self._coarse.get((node, j.name))
        page = self._pages.get((node, j.name, rng)) if rng in charts.RESOLUTION else None

        def figure(i: int) -> tuple[Optional[float], ...]:
            got: list[charts.Bucket] = []
            if rng not in charts.RESOLUTION:
                got = series.buckets(start, i) if series is not None else []
            else:
                after = start
                if page is not None and page.figures:
                    got = list(page.figures.get(PAGE_FIGURES[i], ()))
                    after = page.until
                if i < len(COARSE_FIGURES):  # after the page: the coarse series (the greeting, then live)
                    got += [b for b in coarse.buckets(after, i) if b[0] >= after - 1e-6] if coarse is not None else []
                elif series is not None:  # an engine's figures: the last hour in memory
                    got += [b for b in series.buckets(after, i) if b[0] >= after - 1e-6]
            return charts.columns(got, start, now, width)

        tps = figure(0)
        panels = [charts.Panel(_tps_title(j, row, tps), tps)]
        if row.done is not None:
            total = row.total
            title = f"done  {_count(row.done)}" + (f" / {_count(total)}" if total else "")
            plan = j.plan
            line: tuple[Optional[float], ...] = ()
            if plan is not None and total:
                line = charts.plan_line(plan.since, plan.planned_wall_s, float(total), start, now, width)
                if line:
                    title += f"  plan ─ {human_duration(plan.planned_wall_s)}, now {human_duration(plan.projected_wall_s)}"
            if total and row.eta_s is not None and row.eta_s > 0:
                title += f"  finish in {human_duration(row.eta_s)} at the current rate"
            done = figure(1)
            last = max((i for i, v in enumerate(done) if v is not None), default=-1)
            panels.append(charts.Panel(title, charts.filled(done[:last + 1]) + done[last + 1:],
                                       float(total) if total else None, line, "count"))
        if row.engine_state is not None:
            for i, what, unit, top in ((2, "running requests", "count", None), (3, "queued requests", "count", None),
                                       (4, "KV cache use", "pct", 1.0)):
                values = figure(i)
                last_v = next((v for v in reversed(values) if v is not None), None)
                shown = "-" if last_v is None else (f"{100 * last_v:.0f}%" if unit == "pct" else f"{last_v:.0f}")
                panels.append(charts.Panel(f"{what}  now {shown}", values, top, (), unit))
        note, wants = self._chart_note(rng, page, now)
        return charts.Chart(rng, start, now, tuple(panels), note, wants)

    def _chart_note(self, rng: str, page: Optional["_Page"], now: float) -> tuple[str, bool]:
        """Where a chart's figures come from, and whether its page should be asked for."""
        if rng not in charts.RESOLUTION:
            return "", False
        if page is None:
            if not self.reads_history:
                return "from this console's 12 h", False
            return "from this console's 12 h; reading the node's history…", True
        if page.asking:
            return "reading the node's history…", False
        if page.error:
            return f"history: {page.error}", now - page.at >= PAGE_RETRY_S
        return f"node history at {page.resolution}", not page.fresh(rng, now)

    def node_chart(self, node: str, rng: Optional[str], width: int) -> Optional[charts.Chart]:
        """A node's GPUs, their mean utilization over ``rng`` (None: 24h). 1h from the coarse
        series (the greeting's 12 hours and every snapshot since); the longer ranges from the
        node's history page when one was read, the coarse series after it (or for the whole
        window, until it is), as a job's chart."""
        c = self._node_coarse.get(node)
        view = self.nodes.get(node)
        if view is None:
            return None
        now = self.clock()
        rng = rng if rng in charts.RANGES else "24h"
        start = now - charts.RANGES[rng]
        page = self._pages.get((node, None, rng)) if rng in charts.RESOLUTION else None
        got: list[charts.Bucket] = []
        after = start
        if page is not None and page.figures:
            got, after = list(page.figures.get(GPU_PAGE_FIGURE, ())), page.until
        if c is not None:
            got += [b for b in c.buckets(after) if b[0] >= after - 1e-6]
        values = charts.columns(got, start, now, width)
        gpus = len(view.snapshot.gpus) if view.snapshot is not None else 0
        seen = [v for v in values if v is not None]
        title = f"{node}  GPU utilization (mean of {gpus})  now {_pct(seen[-1] if seen else None)}  " \
                f"peak {_pct(max(seen) if seen else None)}"
        note, wants = self._chart_note(rng, page, now)
        return charts.Chart(rng, start, now, (charts.Panel(title, values, 100.0),), note, wants)

    def _detail_series(self, node: str, job: str, width: int, now: float) -> dict[str, tuple]:
        s = self._series.get((node, job))
        return {field: s.last(width, now, FIGURES.index(what)) if s is not None else ()
                for what, field in _DETAIL_SERIES.items()}

    def alert_rows(self) -> list[AlertRow]:
        out = []
        for node, a in self.alerts():
            key = "|".join(str(x) for x in (node, *a.ident()))
            out.append(AlertRow(key=key, node=node, kind=AlertKind(a.kind), message=a.message, job=a.job, gpu=a.gpu,
                                pid=a.pid, since=a.since))
        return out

    def to_json(self) -> dict[str, Any]:
        """The documented shape of ``gpudeck status --json``."""
        node_costs, job_costs = self.costs()
        spends = self.spends()
        s3_bytes = cost.fleet_s3(j for _, j in self.jobs())
        now = self.clock()
        nodes = [self._node_json(name, view, node_costs.get(name)) for name, view in self.nodes.items()]
        jobs = []
        for node, j in self.jobs():
            p = j.progress
            jobs.append({
                "name": j.name, "node": node, "owner": j.fleet, "owned_elsewhere": not self.fleet.owns(j.fleet),
                "kind": j.kind, "state": shown_state(j), "pids": j.pids or
                ([j.pid] if j.pid and j.state in _ALIVE else []),
                "gpus": j.gpus, "attempt": j.attempt, "exit_code": j.exit_code, "ended_at": j.ended_at,
                "done": p.done if p else None, "total": p.total if p else None,
                "tokens_per_s": job_tokens_per_s(j), "eta_s": p.eta_s if p else None,
                "quality": p.quality if p else {},
                "quality_window": dataclasses.asdict(p.window) if p and p.window else None,
                "last_tokens_per_s": p.last_tokens_per_s if p else None,
                "last_rate_at": p.last_rate_at if p else None,
                "engine": dataclasses.asdict(j.engine) if j.engine else None,
                "last_kill": dataclasses.asdict(j.last_kill) if j.last_kill else None,
                "restart": j.restart, "restarts": j.restarts, "max_restarts": j.max_restarts,
                "next_restart_at": j.next_restart_at, "restart_note": j.restart_note,
                "argv": j.argv, "spec_changes": j.spec_changes, "waiting": j.waiting, "adopted": j.adopted,
                "fenced": j.fenced,
                "error": j.error, "moved_from": _moved_json(self.moved_from(node, j.name)),
                "task": dataclasses.asdict(j.task) if j.task else None,
                "staging": dataclasses.asdict(j.staging) if j.staging else None,
                **cost.job_json(j, job_costs.get((node, j.name))), **cost.spend_json(spends.get(j.name)),
                **cost.s3_json(p, self.fleet.s3_price_per_gb_month),
                **_health_json(p),
                **_startup_json(p, now if j.state in _ALIVE else None, j.engine),
            })
        alerts = [{"node": n, **dataclasses.asdict(a)} for n, a in self.alerts()]
        money = cost.fleet_cost(node_costs.values())
        fleet = {"spent": cost.money_json(money.spent), "to_finish": cost.money_json(money.to_finish),
                 "nodes_priced": money.nodes_priced, "idle_per_hour": cost.money_json(self.idle_per_hour()),
                 "burned": cost.money_json(self.burned()),
                 "s3_bytes": s3_bytes, "s3_price_per_gb_month": self.fleet.s3_price_per_gb_month,
                 "s3_cost_per_month": cost.money_json(cost.s3_monthly(s3_bytes, self.fleet.s3_price_per_gb_month)),
                 "tokens_per_s": self.totals().tokens_per_s}
        return {"fleet": fleet, "nodes": nodes, "jobs": jobs, "alerts": alerts}

    def _node_json(self, name: str, view: NodeView, node_cost: Any) -> dict[str, Any]:
        """A node of ``gpudeck status --json``."""
        snap = view.snapshot
        return {
            "name": name,
            "state": self.node_state(view),
            "reachable": view.reachable,
            "owned_elsewhere": self.owned_elsewhere(name),
            "copy_differs": dataclasses.asdict(view.copy) if view.copy is not None else None,
            "error": str(view.error) if view.error is not None else None,
            "unreachable_since": view.unreachable_since,
            "gpus": [dataclasses.asdict(g) for g in snap.gpus] if snap else [],
            "gpu_error": snap.gpu_error if snap else None,
            "gpus_simulated": snap.gpus_simulated if snap else False,
            "containment": snap.containment if snap else None,
            "host": dataclasses.asdict(snap.host) if snap else None,
            "cluster": dataclasses.asdict(snap.cluster) if snap and snap.cluster else None,
            **cost.node_json(node_cost),
        }


# ---------------------------------------------------------------- helpers

COLLAPSE_MIN = 3  # pending tasks of one job in a row, waiting for one reason: shown as one row


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

    def key(node: str, j: JobStatus) -> Optional[tuple]:
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


# the hosts that mean "this node" in a URL a job on it is given
_LOOPBACK = frozenset(("127.0.0.1", "localhost", "0.0.0.0", "::1", "::"))


def _endpoint(url: str, node: str, hosts: dict[str, str]) -> Optional[tuple[str, int]]:
    """The (node, port) a job on ``node`` reaches through ``url``; None when the URL names a
    host that is no node of the fleet (or is not a URL)."""
    try:
        u = urllib.parse.urlsplit(url.strip())
        port = u.port or {"http": 80, "https": 443}.get(u.scheme)
    except ValueError:  # a port out of range or not a number
        return None
    host = (u.hostname or "").lower()
    if port is None or not host:
        return None
    target = node if host in _LOOPBACK else hosts.get(host)
    return (target, port) if target is not None else None


def engine_clients(fleet: Fleet) -> frozenset[str]:
    """The jobs whose ``servers`` / ``workers`` reach an engine of this fleet (a job with figures
    to scrape), however the URL is spelled: localhost or 127.0.0.1 or the node's host, a
    trailing slash or a path, the engine's ``port`` or its ``metrics_url``'s. Their tokens are
    the engine's, counted there."""
    hosts = {n.host.lower(): n.name for n in fleet.nodes if n.host}
    hosts.update((n.name.lower(), n.name) for n in fleet.nodes)
    engines: set[tuple[str, int]] = set()
    for s in fleet.jobs:
        if s.scrape_url is None:
            continue
        node = s.node or LOCAL
        if s.host.lower() not in _LOOPBACK:  # an engine bound to one address: reached through it too
            hosts.setdefault(s.host.lower(), node)
        try:
            metrics_port = urllib.parse.urlsplit(s.scrape_url).port
        except ValueError:
            metrics_port = None
        engines.update((node, port) for port in (s.port, metrics_port) if port)
    out = set()
    for s in fleet.jobs:
        if any(_endpoint(u, s.node or LOCAL, hosts) in engines for u in s.upstreams):
            out.add(s.name)
    return frozenset(out)


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


@dataclass
class _Page:
    """A page of a node's history for one job's chart (or the node's own) over one range: its
    figures as buckets, read at ``at`` up to ``until``; or the read under way (``asking``), or
    why it failed."""

    at: float
    resolution: str
    until: float
    figures: dict[str, list[charts.Bucket]]
    asking: bool = False
    error: Optional[str] = None

    def fresh(self, rng: str, now: float) -> bool:
        """Read again after a 24th of its range (15 min for 6h, an hour for 24h): the coarse
        series fills what came after it meanwhile."""
        return now - self.at < max(60.0, charts.RANGES[rng] / 24)


def _gpu_page(page: HistoryPage, step: float, fetched_at: float, until: float) -> "_Page":
    """A page of a node's GPU points as the node chart's buckets: the mean of its GPUs'
    utilization in each bucket (the GPUs the node had then; a GPU without a reading is left out)."""
    by_t: dict[float, list[float]] = {}
    for p in page.points:
        v = p.mean.get(GPU_PAGE_FIGURE) if p.gpu is not None else None
        if v is not None:
            by_t.setdefault(p.t, []).append(v)
    buckets = [(t, t + step, sum(vs) / len(vs)) for t, vs in sorted(by_t.items())]
    if buckets:
        until = max(until, min(buckets[-1][1], fetched_at))
    return _Page(fetched_at, page.resolution or "", until, {GPU_PAGE_FIGURE: buckets})


def _mean(values: list[Optional[float]]) -> Optional[float]:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def cells_rate(v: Optional[float]) -> str:
    """1,234 / 56.7 / 0.42; '-' when unknown (as the tables' cells spell a rate)."""
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}" if a >= 10 else f"{v:.2f}"


def _tps_title(j: JobStatus, row: JobRow, tps: tuple[Optional[float], ...]) -> str:
    """The tokens/s panel's title: the rate now and the peak; for an ended job its last rate,
    said as such, and when it ended."""
    seen = [v for v in tps if v is not None] + ([row.tokens_per_s] if row.tokens_per_s is not None else [])
    peak = cells_rate(max(seen) if seen else None)
    if j.state in _ALIVE or j.state in (JobState.PENDING, JobState.BLOCKED):  # a rate now, or none yet
        now_tps = cells_rate(row.tokens_per_s if row.tokens_per_s is not None else (seen[-1] if seen else None))
        return f"{j.name}  tokens/s  now {now_tps}  peak {peak}"
    p = j.progress
    last = p.last_tokens_per_s if p is not None and p.last_tokens_per_s is not None else (seen[-1] if seen else None)
    ended = f" at {time.strftime('%H:%M', time.localtime(j.ended_at))}" if j.ended_at else ""
    return f"{j.name}  tokens/s  {j.state}{ended}, no rate now  last {cells_rate(last)}  peak {peak}"


def _count(n: Optional[float]) -> str:
    if n is None:
        return "-"
    if n < 100_000:
        return f"{n:,.0f}"
    return f"{n / 1000:.1f}k" if n < 10_000_000 else f"{n / 1e6:.2f}M"


def _pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.0f}%"


def _utilization(gpus: list[Gpu]) -> list[Optional[float]]:
    """A node's GPU utilization by GPU index (its GPUs are 0..n-1 in order, as a rule)."""
    util = [g.util_pct for g in gpus]
    if [g.index for g in gpus] == list(range(len(gpus))):
        return util
    out: list[Optional[float]] = [None] * (max(g.index for g in gpus) + 1)
    for g, u in zip(gpus, util):
        out[g.index] = u
    return out


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


def _moved_json(place: Optional[Placement]) -> Optional[dict[str, Any]]:
    """A moved job's ``moved_from`` in ``status --json``: the node it left, when, and the attempt id."""
    if place is None:
        return None
    return {"node": place.moved_from, "at": place.at, "attempt_id": place.attempt_id}


def _health_json(p: Optional[Progress]) -> dict[str, Any]:
    """A job's uploads, servers and ``blocked`` in ``status --json`` (docs/commands.md)."""
    if p is None:
        return {"uploads": None, "servers": [], "servers_resting": None, "servers_total": None, "blocked": None}
    return {"uploads": dataclasses.asdict(p.uploads) if p.uploads is not None else None,
            "servers": [dataclasses.asdict(s) for s in p.servers],
            "servers_resting": p.servers_down if p.servers else None,
            "servers_total": len(p.servers) if p.servers else None, "blocked": p.blocked}


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


def _startup_json(p: Optional[Progress], now: Optional[float], e: Optional[Engine] = None) -> dict[str, Any]:
    """A job's start-up in ``status --json``: its phase (while it is alive), the seconds in
    it, and its last start's seconds to the first durable output; an engine's phase, how far
    (``phase_pct``, where it prints one) and its time to ready, where its job says none."""
    if (p is None or p.phase is None) and e is not None and (e.phase is not None or e.ready_s is not None):
        alive = now is not None and e.phase is not None
        return {"phase": e.phase if alive else None, "phase_pct": e.phase_pct if alive else None,
                "phase_s": round(max(0.0, now - e.phase_since), 1) if alive and e.phase_since is not None else None,
                "startup_s": e.ready_s}
    alive = p is not None and now is not None
    return {"phase": p.phase if alive else None, "phase_pct": None,
            "phase_s": round(max(0.0, now - p.phase_since), 1) if alive and p.phase_since is not None else None,
            "startup_s": p.startup_s if p is not None else None}


def _unknown(spec: JobSpec) -> JobStatus:
    """A declared job on a node the console cannot read: no node reports its state."""
    return JobStatus(name=spec.name, kind=spec.kind, state=ShownState.UNKNOWN,  # type: ignore[arg-type]
                     gpus=list(spec.gpus))


def _reason(view: NodeView) -> Optional[str]:
    """Why a node cannot be read, as its row shows it (the row names the node)."""
    return view.error.reason if view.error is not None else None
