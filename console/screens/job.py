"""JobScreen: one job in full, its chart over the range picked (`t`, `T`), above its log
(tail, then follow).

The app hands it the FleetState; it asks the app to follow the log, to read the node's
history for the chart's range and to act on the job with messages."""

from __future__ import annotations

from typing import Optional

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer

from ..actions import JobOp
from ..chart import GUTTER, next_range
from ..messages import HistoryWanted, JobActionRequested, LogFollowRequested
from .bindings import job_bindings
from ..state import FleetState
from ..widgets.fleet_header import FleetHeader
from ..widgets.job_chart import JobChart
from ..widgets.job_details import JobDetails
from ..widgets.log_panel import LogPanel


class JobScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,backspace", "back", "Back", id="job.back"),
        *job_bindings(),
        Binding("t", "chart_range(1)", "Range", id="chart.range"),
        Binding("T", "chart_range(-1)", "Range back", show=False, key_display="T", id="chart.range_back"),
    ]

    def __init__(self, fleet_state: FleetState, job: str, key: str, fleet_name: str, read_only: bool) -> None:
        super().__init__(id="job-screen")
        self.fleet_state = fleet_state  # the app's, kept up to date by the app
        self.job, self.key = job, key
        self.fleet_name, self.read_only = fleet_name, read_only
        self.chart_range: Optional[str] = None  # the range picked; None: the one that holds the run

    def compose(self) -> ComposeResult:
        yield FleetHeader(self.fleet_name, self.read_only)
        yield JobDetails(self.job, id="details")
        yield JobChart(id="job-chart")
        yield LogPanel(id="job-log")
        yield Footer(compact=True)

    composed = False
    """True once the widgets are mounted: the app draws into this screen only from then on."""

    def on_mount(self) -> None:
        self.composed = True
        self.query_one(LogPanel).show_job(self.job)
        self.query_one(LogPanel).log.focus()
        self.show_state(self.fleet_state)
        self.post_message(LogFollowRequested(self.job, restart=True))

    def show_state(self, state: FleetState) -> None:
        header = self.query_one(FleetHeader)
        header.totals = state.totals()
        header.now = state.clock()
        chart = self.query_one(JobChart)
        detail = state.job_detail(self.key, spark_width=max(60, chart.size.width - 2), chart_range=self.chart_range,
                                  chart_width=max(12, chart.size.width - GUTTER))
        self.query_one(JobDetails).detail = detail
        chart.chart = detail.chart if detail is not None else None
        if detail is not None and detail.chart is not None and detail.chart.wants:
            self.post_message(HistoryWanted(detail.row.node, detail.row.name, detail.chart.range))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> Optional[bool]:
        if action == "job" and self.read_only:
            return False  # read-only: not in the footer, and they do nothing
        return True

    def action_job(self, op: str) -> None:
        self.post_message(JobActionRequested(JobOp(op), self.job))

    def on_job_chart_resized(self, event: JobChart.Resized) -> None:
        if self.composed:
            self.show_state(self.fleet_state)

    def action_chart_range(self, step: int) -> None:
        """`t` / `T`: the chart's next (previous) range: 1h, 6h, 24h, 7d."""
        shown = self.query_one(JobChart).chart
        self.chart_range = next_range(shown.range if shown is not None else "1h", step)
        self.show_state(self.fleet_state)

    def action_back(self) -> None:
        self.dismiss()
