"""DescribeScreen: a row of any view with every field whole (`enter` or `d`, as in k9s).

For a job it has two tabs: its fields (`d`), and its chart over the range picked (`t`, `T`)
above its log, tail then follow (`l`): what the job screen was. The app hands it the
FleetState and redraws it with the views; it asks the app to follow the log, to read the
node's history for the chart and to act on the job with messages."""

from __future__ import annotations

from typing import Any, Callable, Optional

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import ContentSwitcher, Footer, Static

from ..actions import JobOp
from ..bindings import bindings
from ..chart import GUTTER, next_range
from ..describe import Described, describe
from ..messages import HistoryWanted, JobActionRequested, LogFollowRequested
from ..state import FleetState
from ..widgets.fleet_header import FleetHeader
from ..widgets.job_chart import JobChart
from ..widgets.job_details import JobDetails
from ..widgets.log_panel import LogPanel

Finder = Callable[[FleetState], Any]  # the described row as the state has it now (None: gone)


class Scroller(VerticalScroll):
    """The describe's text: j k g G scroll it, as the arrows and Home End do."""

    BINDINGS = bindings("scroll")


class DescribeScreen(Screen[None]):
    BINDINGS = bindings("describe")

    def __init__(self, fleet_state: FleetState, find: Finder, first: Described, fleet_name: str,
                 read_only: bool) -> None:
        super().__init__(id="describe")
        self.fleet_state = fleet_state  # the app's, kept up to date by the app
        self.find = find
        self.described = first
        self.job = first.job  # a job's: its chart and log too
        self.key = f"{first.node}/{first.job}" if first.job else ""
        self.fleet_name, self.read_only = fleet_name, read_only
        self.chart_range: Optional[str] = None  # the range picked; None: the one that holds the run
        self.gone = False  # the row is no longer in the state: the last fields stay, said so

    def compose(self) -> ComposeResult:
        yield FleetHeader(self.fleet_name, self.read_only)
        if self.job is None:
            with Scroller(id="fields"):
                yield Static(id="describe-fields")
        else:
            # two tabs, switched by their keys (the footer says them): a tab bar would take the
            # row that keeps the chart's time axis on an 80x24 terminal
            with ContentSwitcher(initial="fields", id="describe-tabs"):
                with Scroller(id="fields"):
                    yield Static(id="describe-fields")
                with Vertical(id="log"):
                    yield JobDetails(self.job, id="details")
                    yield JobChart(id="job-chart")
                    yield LogPanel(id="job-log")
        yield Footer(compact=True)

    composed = False
    """True once the widgets are mounted: the app draws into this screen only from then on."""

    def on_mount(self) -> None:
        self.composed = True
        self.query_one("#fields").focus()
        if self.job is not None:
            self.query_one(LogPanel).show_job(self.job)
            self.post_message(LogFollowRequested(self.job, restart=True))
        self.show_state(self.fleet_state)

    def on_resize(self, event: events.Resize) -> None:
        # as the views' footer: under 100 columns the palette's hint would push `q Quit` off it
        for footer in self.query(Footer):
            footer.show_command_palette = event.size.width >= 100

    def show_state(self, state: FleetState) -> None:
        header = self.query_one(FleetHeader)
        header.totals = state.totals()
        header.now = state.clock()
        row = self.find(state)
        self.gone = row is None
        if row is not None:
            self.described = describe(row, state)
        self.query_one("#describe-fields", Static).update(self._render_fields())
        if self.job is not None:
            self._show_job(state)

    def _render_fields(self) -> Table:
        grid = Table.grid(padding=(0, 2), expand=True)
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold", ratio=1)  # whole: a long word folds to the next line, never cut
        title = Text(self.described.title, style="bold")
        if self.gone:
            title.append("  (no longer in the fleet's state: as it was last)", style="italic")
        grid.add_row(title, "")
        for label, value in self.described.fields:
            grid.add_row(label, Text(value))
        return grid

    def _show_job(self, state: FleetState) -> None:
        chart = self.query_one(JobChart)
        detail = state.job_detail(self.key, spark_width=max(60, chart.size.width - 2), chart_range=self.chart_range,
                                  chart_width=max(12, chart.size.width - GUTTER))
        self.query_one(JobDetails).detail = detail
        chart.chart = detail.chart if detail is not None else None
        if detail is not None and detail.chart is not None and detail.chart.wants:
            self.post_message(HistoryWanted(detail.row.node, detail.row.name, detail.chart.range))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> Optional[bool]:
        if action == "job":
            return not self.read_only and self.job is not None
        if action in ("tab", "chart_range"):
            return self.job is not None
        return True

    def action_tab(self, tab: str) -> None:
        """`d`: the fields; `l`: the chart and the log."""
        self.query_one("#describe-tabs", ContentSwitcher).current = tab
        (self.query_one("#fields") if tab == "fields" else self.query_one(LogPanel).log_widget).focus()

    def action_job(self, word: str) -> None:
        """A job key (console/keymap.py: ``job('kill')``): the op it names, on this job."""
        if self.job is not None:
            self.post_message(JobActionRequested(JobOp.bound(word), self.job))

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
