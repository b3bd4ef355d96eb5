"""FleetState: pure data built from snapshots. No I/O, no UI code.

Widgets and headless commands both read it. ``apply`` takes one node's snapshot,
``apply_history`` backfills the sparkline series after a reconnect (and the coarse series the
charts draw longer ranges from: the greeting's 12 hours), ``apply_history_page`` keeps a page
of the node's history read for a chart's range, ``mark_unreachable`` records why a node
cannot be read; ``timeline`` holds the nodes' events (``timeline.py``).
The ``*_rows`` methods and ``totals`` turn the state into the frozen rows of ``rows`` that
widgets only render: two equal rows draw the same line, so a table redraws a row only when
its row changed.

This module holds the state and its input; its views are parts mixed in, one module each:
  state_jobs.py    the jobs table's rows and FLAGS, a job's details (``JobRows``)
  state_nodes.py   the fleet table's rows, the nodes' states, the alerts (``NodeViews``)
  state_costs.py   the totals, the costs and spends (``Costs``)
  state_charts.py  a job's and a node's charts, the history pages they read (``Charts``)
  state_json.py    ``gpudeck status --json`` (``StateJson``)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Union

from ..agents.contract.jobs import JobSpec
from ..agents.contract.ops import CopyDiff
from ..agents.contract.vocab import JobState, ShownState
from ..agents.contract.wire import Gpu, History, JobStatus, Snapshot
from ..remote.client import NodeError, NodeView
from ..remote.fleet import LOCAL, Fleet
from .placements import Placement
from .rows import SPARK_BUCKET_S, FleetRow
from .series import Coarse, Recent, Series
from .state_charts import (COARSE_FIGURES, FIGURES, GPU_PAGE_FIGURE, PAGE_FIGURES, PAGE_RETRY_S, Charts, _Page,
                           cells_rate)
from .state_costs import BUSY_UTIL_PCT, Costs, engine_clients
from .state_jobs import COLLAPSE_MIN, NOT_IN_FILE, JobRows, collapse_pending, job_tokens_per_s, shown_state
from .state_json import StateJson
from .state_nodes import NodeViews
from .timeline import Timeline

__all__ = ["BUSY_UTIL_PCT", "COARSE_FIGURES", "COLLAPSE_MIN", "FIGURES", "GPU_PAGE_FIGURE", "GPU_SPARK",
           "GPU_SPARK_BUCKET_S", "NOT_IN_FILE", "PAGE_FIGURES", "PAGE_RETRY_S", "FleetState", "cells_rate",
           "collapse_pending", "engine_clients", "job_tokens_per_s", "shown_state"]

GPU_SPARK = 10  # utilization buckets kept per GPU for its sparkline
GPU_SPARK_BUCKET_S = 5.0
_SAMPLED = (JobState.RUNNING, JobState.STARTING)  # the states whose tokens/s the sparkline records


@dataclass
class FleetState(JobRows, NodeViews, Costs, Charts, StateJson):
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
        self._fleet_rows: dict[str, tuple[tuple[Any, ...], list[FleetRow]]] = {}
        self._jobs: Optional[tuple[int, list[tuple[str, JobStatus]]]] = None
        self.version = 0  # bumped on every change: views skip work when it has not moved
        self.set_fleet(self.fleet)

    def set_fleet(self, fleet: Fleet) -> None:
        """The fleet file, read (again: the console re-reads it before a launch or relaunch)."""
        self.fleet = fleet
        self._specs: dict[str, JobSpec] = {j.name: j for j in self.fleet.jobs}
        self._engine_clients = engine_clients(self.fleet)
        self._prices = {n.name: n.price_per_hour for n in self.fleet.nodes}  # None: not priced
        self._costs = None
        self._spends = None
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


def _utilization(gpus: list[Gpu]) -> list[Optional[float]]:
    """A node's GPU utilization by GPU index (its GPUs are 0..n-1 in order, as a rule)."""
    util = [g.util_pct for g in gpus]
    if [g.index for g in gpus] == list(range(len(gpus))):
        return util
    out: list[Optional[float]] = [None] * (max(g.index for g in gpus) + 1)
    for g, u in zip(gpus, util):
        out[g.index] = u
    return out


def _mean(values: list[Optional[float]]) -> Optional[float]:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def _unknown(spec: JobSpec) -> JobStatus:
    """A declared job on a node the console cannot read: no node reports its state."""
    return JobStatus(name=spec.name, kind=spec.kind, state=ShownState.UNKNOWN,  # type: ignore[arg-type]
                     gpus=list(spec.gpus))
