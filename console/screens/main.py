"""MainScreen: the header, the views (overview, fleet, jobs, logs, alerts, events) and the footer.

It holds no state of its own beyond what the operator chose (the active view, filters,
sort keys, the job whose log is shown): the app hands it the FleetState to render, and it
posts what only the app does (act on a job, open it, follow a log) as messages.
"""

from __future__ import annotations

from typing import Any, Optional

from textual import events, on
from textual.app import ComposeResult
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from ..actions import JobOp, no_target_notice, target_job, target_process
from ..chart import GUTTER, next_range
from ..messages import (DescribeRequested, DoctorRequested, HistoryWanted, JobActionRequested, LogFollowCancelled,
                        LogFollowRequested, PlansCompareRequested, ProcessAdoptRequested, ProcessKillRequested)
from ..bindings import bindings
from .filter_sort import LABELS, SORT_COLUMNS, SORT_FIELDS, SORTS, FilterAndSort
from .palette import FleetCommands
from ..selection import select_alerts, select_events, select_fleet, select_jobs, sorted_descending
from ..rows import FleetRow, GpuRow, JobRow, NodeRow
from ..state import FleetState
from ..timeline import listed
from ..widgets.alerts_table import AlertsTable
from ..widgets.cells import clock_time
from ..widgets.events_table import EventsTable
from ..widgets.filter_bar import FilterBar
from ..widgets.fleet_header import FleetHeader
from ..widgets.fleet_table import FleetTable
from ..widgets.job_chart import JobChart
from ..widgets.jobs_table import JobsTable
from ..widgets.live_table import LiveTable
from ..widgets.log_panel import LogPanel

VIEWS = ("overview", "fleet", "jobs", "logs", "alerts", "events")
TABLES = ("fleet", "jobs", "alerts", "events")  # the views that are one table
OVERVIEW_ALERTS = 3  # the newest alerts the overview shows


class Views(TabbedContent):
    """The views' tabs. A TabbedContent shows the pane of a widget that gets the focus, with a
    message that comes later: the focus set on the view shown at start would take back the
    view the operator chose meanwhile (a key pressed just after opening). Here a view is
    shown by choice only (the keys, the tabs, the palette's jumps), and the focus follows it."""

    def _on_tab_pane_focused(self, event: TabPane.Focused) -> None:
        event.prevent_default()  # TabbedContent's own handler would switch the pane
        event.stop()


class MainScreen(FilterAndSort, Screen[None]):
    COMMANDS = {FleetCommands}
    BINDINGS = bindings("main")  # console/keymap.py: the whole keymap, one table

    def __init__(self, fleet_state: FleetState, fleet_name: str, read_only: bool, initial: str = "overview") -> None:
        super().__init__(id="main")
        self.fleet_state = fleet_state  # the app's, kept up to date by the app
        self.fleet_name, self.read_only, self.initial = fleet_name, read_only, initial
        self.filters: dict[str, str] = {v: "" for v in VIEWS}
        self.sorts: dict[str, str] = {v: (SORTS[v][0] if SORTS[v] else "") for v in VIEWS}
        self.reversed: dict[str, bool] = {v: False for v in VIEWS}
        self.log_job: Optional[str] = None  # the job the logs view follows
        self._events_shown: tuple[int, str] = (-1, "")  # the timeline's version and the filter drawn last
        self._events_listed = ""  # what the events table lists, said over it
        self._chart_chosen = False  # the overview's chart was put on a job with a tokens/s series
        self._status_shown: Optional[str] = None  # the line under the view, as drawn last
        self.chart_range: Optional[str] = None  # the overview chart's range; None: the one that holds the run

    def compose(self) -> ComposeResult:
        yield FleetHeader(self.fleet_name, self.read_only, id="header")
        with Views(initial=self.initial, id="views"):
            with TabPane(LABELS["overview"], id="overview"):
                yield FleetTable(id="overview-fleet", empty_text="no nodes yet")
                yield JobsTable(id="overview-jobs", empty_text="no jobs: declare [[jobs]] in the fleet file")
                yield AlertsTable(id="overview-alerts", empty_text="no alerts")
                yield JobChart(id="overview-chart")
            with TabPane(LABELS["fleet"], id="fleet"):
                yield FleetTable(id="fleet-table", empty_text="no nodes yet")
            with TabPane(LABELS["jobs"], id="jobs"):
                yield JobsTable(id="jobs-table", empty_text="no jobs: declare [[jobs]] in the fleet file")
            with TabPane(LABELS["logs"], id="logs"):
                yield LogPanel(id="log-panel")
            with TabPane(LABELS["alerts"], id="alerts"):
                yield AlertsTable(id="alerts-table", empty_text="no alerts")
            with TabPane(LABELS["events"], id="events"):
                yield Static(id="events-summary", markup=False)
                yield EventsTable(id="events-table", empty_text="no events yet")
        yield Static(id="view-status")
        yield FilterBar()
        yield Footer(compact=True)

    composed = False
    """True once the views are mounted: the app draws into this screen only from then on."""

    def on_mount(self) -> None:
        self.composed = True
        self._focus_view(self.active)

    def on_resize(self, event: events.Resize) -> None:
        # under 100 columns the palette's hint pushed `? Help` off the footer; ctrl+p is in the help
        for footer in self.query(Footer):
            footer.show_command_palette = event.size.width >= 100

    # ------------------------------------------------------------ rendering

    @property
    def active(self) -> str:
        return self.query_one("#views", TabbedContent).active or self.initial

    def table(self, view: str) -> LiveTable[Any]:
        """The table of a view; the overview's is the one with the focus (else its jobs)."""
        if view == "overview":
            focused = self.focused
            if isinstance(focused, LiveTable) and (focused.id or "").startswith("overview-"):
                return focused
            return self.query_one("#overview-jobs", LiveTable)
        return self.query_one(f"#{view}-table", LiveTable)

    def show_state(self, state: FleetState) -> None:
        """Render what the active view shows; the hidden views catch up when shown."""
        header = self.query_one(FleetHeader)
        header.totals = state.totals()
        header.now = state.clock()
        view = self.active
        text, sort, rev = self.filters[view], self.sorts[view], self.reversed[view]
        if view == "overview":
            self._show_overview(state, text, sort, rev)
        elif view == "fleet":
            self.table("fleet").show(select_fleet(state.fleet_rows(), text, sort, rev))
        elif view == "jobs":
            self.table("jobs").show(select_jobs(state.job_rows(), text, sort, rev))
        elif view == "alerts":
            self.table("alerts").show(select_alerts(state.alert_rows(), text, sort, rev))
        elif view == "events":
            self._show_events(state, text)
        if view in TABLES or view == "overview":
            table = self.query_one("#overview-jobs" if view == "overview" else f"#{view}-table", LiveTable)
            table.mark_sort(SORT_COLUMNS.get(view, {}).get(sort), sorted_descending(sort, rev))
        if self.log_job is None:
            jobs = state.jobs()
            if jobs:
                self.log_job = jobs[0][1].name
        alerts = header.totals.alerts
        for v in VIEWS:
            if v != "logs":
                self._label(v, f"Alerts ({alerts})" if v == "alerts" and alerts else LABELS[v])
        self._show_status()

    def _show_overview(self, state: FleetState, text: str, sort: str, rev: bool) -> None:
        """GPUs (no process lines), jobs, the newest alerts, and the selected job's chart."""
        self.query_one("#overview-fleet", LiveTable).show(select_fleet(state.fleet_rows(), text, processes=False))
        jobs = self.query_one("#overview-jobs", LiveTable)
        jobs.show(select_jobs(state.job_rows(), text, sort, rev))
        if not self._chart_chosen and not jobs.moved_by_operator:
            self._chart_chosen = _cursor_on_a_rate(jobs)
        self.query_one("#overview-alerts", LiveTable).show(select_alerts(state.alert_rows())[:OVERVIEW_ALERTS])
        chart = self.query_one(JobChart)
        width = max(12, chart.size.width - GUTTER)
        fleet = self.query_one("#overview-fleet", LiveTable)
        node = _node_of(fleet.cursor_row) if self.focused is fleet else None
        if node is not None:  # on a node or a GPU: the node's GPUs over the range
            chart.chart = shown = state.node_chart(node, self.chart_range, width)
            if shown is not None and shown.wants:
                self.post_message(HistoryWanted(node, None, shown.range))
            return
        key = jobs.cursor_key
        detail = state.job_detail(key, spark_width=12, chart_range=self.chart_range, chart_width=width) if key else None
        chart.chart = detail.chart if detail is not None else None
        if detail is not None and detail.chart is not None and detail.chart.wants:
            self.post_message(HistoryWanted(detail.row.node, detail.row.name, detail.chart.range))

    def _show_events(self, state: FleetState, text: str) -> None:
        """The timeline, and over it what happened since the operator last looked and what the
        table lists (so the line over the rows never says nothing happened above a list of it)."""
        if self._events_shown != (state.timeline.version, text):  # 2,000 rows: compared only when they moved
            self._events_shown = (state.timeline.version, text)
            rows = select_events(state.timeline.rows(), text)
            self._events_listed = listed(rows, state.clock())
            self.table("events").show(rows)
        summary = self.query_one("#events-summary", Static)
        opening = state.timeline.summary
        if opening and state.timeline.summary_at is not None:  # said once: as of then, not of now
            opening = f"on opening ({clock_time(state.timeline.summary_at)}): {opening}"
        said = "  ·  ".join(x for x in (opening, self._events_listed) if x)
        summary.set_class(bool(said), "-shown")
        if str(summary.content) != said:
            summary.update(said)

    def _show_status(self) -> None:
        """The active view's filter and sort, said under it (the tab label is easy to miss)."""
        view = self.active
        parts = []
        if self.filters[view]:
            parts.append(f"filter {self.filters[view]!r} (esc clears)")
        if SORTS[view] and (self.sorts[view] != SORTS[view][0] or self.reversed[view]):
            arrow = "▼" if sorted_descending(self.sorts[view], self.reversed[view]) else "▲"
            parts.append(f"sort {self.sorts[view]} {arrow} (its letter again flips it, F6 sort by)")
        if view == "logs" and self.query_one(LogPanel).term:
            parts.append(f"search {self.query_one(LogPanel).term!r} (n/N next/previous, esc clears)")
        text = " · ".join(parts)
        if text == self._status_shown:
            return  # an update lays the screen out again: once a second at fleet scale is measurable
        self._status_shown = text
        status = self.query_one("#view-status", Static)
        status.set_class(bool(parts), "-shown")
        status.update(Content(text))

    def _label(self, view: str, text: str) -> None:
        extra = []
        if self.filters[view]:
            extra.append(f"/{self.filters[view]}")
        if SORTS[view] and (self.sorts[view] != SORTS[view][0] or self.reversed[view]):
            arrow = "▼" if sorted_descending(self.sorts[view], self.reversed[view]) else "▲"
            extra.append(f"by {self.sorts[view]} {arrow}")
        label = text + (f" [{' '.join(extra)}]" if extra else "")
        tab = self.query_one("#views", TabbedContent).get_tab(view)
        if tab.label_text != label:
            tab.label = Content(label)  # plain text: a filter may hold brackets

    # ------------------------------------------------------------ selection

    def selected_job(self) -> Optional[str]:
        """The job the keys act on: the row under the cursor in the active view."""
        view = self.active
        if view == "logs":
            return self.log_job
        return target_job(self.table(view).cursor_row)

    def selected_node(self) -> Optional[str]:
        """The node `d` checks: the node of the row under the cursor (a node, a GPU, a process,
        a job, an alert, an event; in the logs view, the followed job's); with none, the only node
        of a fleet of one."""
        view = self.active
        if view == "logs":
            row = self.fleet_state.job_row(self.log_job) if self.log_job else None
        else:
            row = self.table(view).cursor_row
        node = getattr(row, "node", None)
        if node is None and len(self.fleet_state.nodes) == 1:
            node = next(iter(self.fleet_state.nodes))
        return node

    @on(LiveTable.Highlighted, "#jobs-table, #overview-jobs")
    def _job_highlighted(self, event: LiveTable.Highlighted) -> None:
        row = event.table.row(event.key) if event.key else None
        if row is not None:
            self.log_job = row.acts_on
            if event.table.id == "overview-jobs":  # the chart follows the cursor
                self.show_state(self.fleet_state)

    @on(LiveTable.Highlighted, "#overview-fleet")
    def _node_highlighted(self, event: LiveTable.Highlighted) -> None:
        if self.focused is event.table:  # the chart follows the cursor onto a node
            self.show_state(self.fleet_state)

    @on(LiveTable.Selected)
    def _row_selected(self, event: LiveTable.Selected) -> None:
        self.action_describe()  # a double click

    def action_describe(self) -> None:
        """`enter` or `d`: the row under the cursor, every field whole (in the logs view, its job)."""
        view = self.active
        if view == "logs":
            row = self.fleet_state.job_row(self.log_job) if self.log_job else None
        else:
            row = self.table(view).cursor_row
        if row is None:
            self.notify("nothing to describe: no row under the cursor", severity="warning", timeout=3)
            return
        self.post_message(DescribeRequested(row))

    # ------------------------------------------------------------ views

    @on(TabbedContent.TabActivated, "#views")
    def _view_changed(self, event: TabbedContent.TabActivated) -> None:
        view = event.pane.id or ""
        self.show_state(self.fleet_state)
        self._focus_view(view)
        self.refresh_bindings()
        self.sync_log_follow()

    def sync_log_follow(self) -> None:
        """Follow the log the logs view shows, and only while it is shown."""
        if self.active == "logs" and self.log_job is not None:
            panel = self.query_one(LogPanel)
            panel.show_job(self.log_job)
            self.post_message(LogFollowRequested(self.log_job))
        else:
            self.post_message(LogFollowCancelled())

    def on_screen_resume(self) -> None:
        if self.is_mounted and self.query(TabbedContent):
            self.sync_log_follow()

    def _focus_view(self, view: str) -> None:
        if self.query_one(FilterBar).is_open:
            return  # the filter opened meanwhile (a view's switch handled late): its keys stay the filter's
        if view == "logs":
            self.query_one(LogPanel).log_widget.focus()
        elif view in VIEWS:
            self.table(view).focus()

    def focus_row(self, view: str, key: str) -> bool:
        """Show ``view`` with its cursor on the row ``key`` (the command palette's jumps)."""
        self.action_view(view)
        self.filters[view] = ""
        self.show_state(self.fleet_state)
        table = self.query_one("#overview-jobs" if view == "overview" else f"#{view}-table", LiveTable)
        table.focus()
        return table.move_cursor_to_key(key)

    def on_job_chart_resized(self, event: JobChart.Resized) -> None:
        if self.composed and self.active == "overview":
            self.show_state(self.fleet_state)

    def action_chart_range(self, step: int) -> None:
        """`t` / `T`: the overview chart's next (previous) range: 1h, 6h, 24h, 7d."""
        if self.active != "overview":
            self.notify("the chart's range: in the overview (0) or a job's details (enter)", timeout=3)
            return
        shown = self.query_one(JobChart).chart
        self.chart_range = next_range(shown.range if shown is not None else "1h", step)
        self.show_state(self.fleet_state)

    def action_view(self, view: str) -> None:
        self.query_one("#views", TabbedContent).active = view

    def action_logs(self) -> None:
        """`l`: the log of the job under the cursor, in the logs view (k9s's key for logs)."""
        job = self.selected_job()
        if job is None:
            self.notify("select a job first (in the jobs view, or a GPU a job holds)", severity="warning", timeout=3)
            return
        self.log_job = job
        if self.active == "logs":
            self.sync_log_follow()
        else:
            self.action_view("logs")  # the view change follows its log

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        if self.active == "logs":
            self.query_one(LogPanel).search(event.value)
            self._show_status()
        else:
            self.filters[self.active] = event.value
            self.show_state(self.fleet_state)
        self.refresh_bindings()

    @on(FilterBar.Closed)
    def _filter_closed(self, event: FilterBar.Closed) -> None:
        self._focus_view(self.active)
        self.show_state(self.fleet_state)

    # ------------------------------------------------------------ job keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> Optional[bool]:
        if action in ("job", "adopt_process") and self.read_only:
            return False  # read-only: kill, relaunch, launch and adopt are not in the footer, and do nothing
        if not self.is_mounted or not self.composed:
            return True
        view = self.active
        if action == "clear_filter":  # escape means something only while there is a filter
            return bool(self.filters[view] or (view == "logs" and self.query_one(LogPanel).term))
        if action == "next_match":
            return view == "logs" and bool(self.query_one(LogPanel).term)
        if action in ("sort", "reverse"):
            return bool(SORTS[view])
        if action == "sort_by":  # a letter of a column this view does not have does nothing
            return parameters[0] in SORT_FIELDS[view] if parameters else False
        return True

    def action_doctor(self) -> None:
        """`D` (and `:doctor`): the checks of `gpudeck doctor` on the selected row's node, in a screen."""
        node = self.selected_node()
        if node is None:
            self.notify("select a node first (in the fleet view, or a job, alert or event on it)", severity="warning",
                        timeout=4)
            return
        self.post_message(DoctorRequested(node))

    def action_plans(self) -> None:
        """`p`: the fleet file's [[plans]] side by side, as `gpudeck plan compare -f FLEET`."""
        self.post_message(PlansCompareRequested())

    def action_adopt_process(self) -> None:
        process = target_process(self.table(self.active).cursor_row) if self.active != "logs" else None
        if process is None:
            self.notify("select a GPU process that belongs to no job first (in the fleet view)", severity="warning",
                        timeout=4)
            return
        self.post_message(ProcessAdoptRequested(*process))

    def action_job(self, word: str) -> None:
        """A job key (console/keymap.py: ``job('kill')``): the op it names, on the selected job,
        or a kill on the selected GPU process of no job."""
        job_op = JobOp.bound(word)
        job = self.selected_job()
        process = target_process(self.table(self.active).cursor_row) if self.active != "logs" else None
        if job is None and job_op == JobOp.KILL and process is not None:
            self.post_message(ProcessKillRequested(*process))
            return
        if job is None:
            n = no_target_notice(job_op)
            self.notify(n.text, severity=n.severity, timeout=n.timeout)  # type: ignore[arg-type]
            return
        self.post_message(JobActionRequested(job_op, job))


def _node_of(row: Optional[FleetRow]) -> Optional[str]:
    return row.node if isinstance(row, (NodeRow, GpuRow)) else None


def _cursor_on_a_rate(jobs: LiveTable[Any]) -> bool:
    """Put the overview's cursor, and so its chart, on the first job with a tokens/s series: the
    first row may be a job that never ran (a chart of nothing). False while no job has one yet."""
    def has_rate(row: object) -> bool:
        return isinstance(row, JobRow) and (row.tokens_per_s is not None or any(v is not None for v in row.spark))

    if has_rate(jobs.cursor_row):
        return True
    pick = next((r for r in jobs.rows() if has_rate(r)), None)
    if pick is None:
        return False
    jobs.move_cursor_to_key(pick.key)
    jobs.moved_by_operator = False
    return True
