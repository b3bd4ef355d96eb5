"""The charts the console draws of a job and of a node, and the pages of the nodes' history
they read for their longer ranges (``apply_history_page``; ``_Page``). The 1h range draws
from the state's own series; chart.py lays the columns out.

Part of ``FleetState`` (console/state.py), which mixes ``Charts`` in. No I/O, no UI code."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..agents.contract.ops import GPU_FIGURES, JOB_FIGURES, HistoryPage
from ..agents.contract.vocab import JobState
from ..agents.contract.wire import JobStatus
from ..remote.client import NodeView
from . import chart as charts
from .formatting import human_duration
from .rows import JobRow
from .series import Coarse, Series
from .state_jobs import _ALIVE

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


class Charts:
    """A job's chart, a node's chart, and the history pages they read."""

    nodes: dict[str, NodeView]
    reads_history: bool
    version: int
    _series: dict[tuple[str, str], Series]
    _coarse: dict[tuple[str, str], Coarse]
    _node_coarse: dict[str, Coarse]
    _pages: dict[tuple[str, Optional[str], str], "_Page"]

    if TYPE_CHECKING:  # the other parts of FleetState
        def clock(self) -> float: ...
        def _job_row(self, node: str, j: JobStatus, now: float, spark_width: Optional[int] = None) -> JobRow: ...

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

    def _detail_series(self, node: str, job: str, width: int, now: float) -> dict[str, tuple[Optional[float], ...]]:
        s = self._series.get((node, job))
        return {field: s.last(width, now, FIGURES.index(what)) if s is not None else ()
                for what, field in _DETAIL_SERIES.items()}


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
    buckets: list[charts.Bucket] = [(t, t + step, sum(vs) / len(vs)) for t, vs in sorted(by_t.items())]
    if buckets:
        until = max(until, min(buckets[-1][1], fetched_at))
    return _Page(fetched_at, page.resolution or "", until, {GPU_PAGE_FIGURE: buckets})


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
