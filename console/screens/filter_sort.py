"""The main screen's filter and sort keys: `/` filters a view (or searches the log), escape
drops the filter, `s` and `S` step the sort and turn it round, a column's shift+letter sorts by
it (k9s), F6 picks a sort from the view's columns (htop).

Part of ``MainScreen`` (screens/main.py), which mixes ``FilterAndSort`` in; the filter bar's
own messages are handled there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..keymap import key_of
from ..selection import ALERT_SORTS, FLEET_SORTS, JOB_SORTS, sorted_descending
from ..state import FleetState
from ..widgets.filter_bar import FilterBar
from ..widgets.log_panel import LogPanel
from .sort_picker import SortPicker

if TYPE_CHECKING:
    from textual.screen import Screen

    _ScreenPart = Screen[None]
else:
    _ScreenPart = object

LABELS = {"overview": "Overview", "fleet": "Fleet", "jobs": "Jobs", "logs": "Logs", "alerts": "Alerts",
          "events": "Events"}
SORTS = {"overview": JOB_SORTS, "fleet": FLEET_SORTS, "jobs": JOB_SORTS, "alerts": ALERT_SORTS, "logs": (),
         "events": ()}  # the events stay in time order
_JOB_COLUMNS = {"name": "JOB", "node": "NODE", "state": "STATE", "tokens/s": "TOK/S", "rate": "RATE", "eta": "ETA",
                "progress": "PROGRESS", "cost": "$/MTOK"}
# the shift+letter sort keys (keymap.SORT_KEYS: sort_by('tokens')) to each view's sort keys
_JOB_FIELDS = {"job": "name", "node": "node", "state": "state", "tokens": "tokens/s", "rate": "rate",
               "progress": "progress", "eta": "eta", "cost": "cost"}
SORT_FIELDS = {"overview": _JOB_FIELDS, "jobs": _JOB_FIELDS,
               "fleet": {"node": "name", "state": "problems", "memory": "memory", "util": "util"},
               "alerts": {"since": "newest", "node": "node", "state": "kind"}, "logs": {}, "events": {}}
SORT_COLUMNS = {"overview": _JOB_COLUMNS, "jobs": _JOB_COLUMNS,
                "fleet": {"name": "NODE / GPU", "memory": "MEMORY", "util": "UTIL"},
                "alerts": {"newest": "SINCE", "node": "NODE", "kind": "ALERT"}}  # the header a sort marks


class FilterAndSort(_ScreenPart):
    """The filter and the sort of each view, as the operator chose them."""

    fleet_state: FleetState
    filters: dict[str, str]
    sorts: dict[str, str]
    reversed: dict[str, bool]

    if TYPE_CHECKING:  # the other parts of MainScreen
        @property
        def active(self) -> str: ...
        def show_state(self, state: FleetState) -> None: ...
        def _show_status(self) -> None: ...

    def action_filter(self) -> None:
        """`/`: filter the view, or search the log in the logs view."""
        view = self.active
        bar = self.query_one(FilterBar)
        bar.placeholder = ("search the log (enter: keep, escape: clear)" if view == "logs" else
                           "filter: a job, node, kind or state (enter: keep, escape: clear)")
        bar.open(self.query_one(LogPanel).term if view == "logs" else self.filters[view])

    def action_clear_filter(self) -> None:
        """Escape: drop the view's filter (or the log search)."""
        if self.active == "logs":
            self.query_one(LogPanel).search("")
        self.filters[self.active] = ""
        self.show_state(self.fleet_state)
        self.refresh_bindings()

    def action_next_match(self, step: int) -> None:
        if self.query_one(LogPanel).next_match(step) is None:
            self.notify("no line matches the search", timeout=3)
        self._show_status()

    def action_sort(self) -> None:
        """`s`: the next sort key, ascending; the key is marked in the header and said below."""
        view = self.active
        keys = SORTS[view]
        if not keys:
            self.notify(f"the {view} view has no sort", timeout=3)
            return
        self.sorts[view] = keys[(keys.index(self.sorts[view]) + 1) % len(keys)]
        self.reversed[view] = False
        self.show_state(self.fleet_state)

    def action_reverse(self) -> None:
        """`S`: the same sort, the other way round."""
        if SORTS[self.active]:
            self.reversed[self.active] = not self.reversed[self.active]
            self.show_state(self.fleet_state)

    def action_sort_by(self, field: str) -> None:
        """A column's shift+letter (k9s): sort by it; pressed again, the other way round."""
        view = self.active
        how = SORT_FIELDS[view].get(field)
        if how is None:
            return
        if self.sorts[view] == how:
            self.reversed[view] = not self.reversed[view]
        else:
            self.sorts[view], self.reversed[view] = how, False
        self.show_state(self.fleet_state)

    def action_sort_picker(self) -> None:
        """F6 (htop's "sort by"): the view's columns, each with its letter; enter picks one."""
        view = self.active
        fields = SORT_FIELDS[view]
        if not fields:
            self.notify(f"the {view} view has no sort" + (" (it stays in time order)" if view == "events" else ""),
                        timeout=3)
            return
        columns = SORT_COLUMNS.get(view, {})
        lines = []
        for field, how in fields.items():
            label = columns.get(how) or how
            arrow = "▼" if sorted_descending(how, False) else "▲"
            now = ""
            if self.sorts[view] == how:
                now = f"   sorted now {'▼' if sorted_descending(how, self.reversed[view]) else '▲'}"
            lines.append((field, key_of(f"sort.{field}", self.app_keymap()), f"{label:<12} {arrow} {how}{now}"))
        current = next((f for f, how in fields.items() if how == self.sorts[view]), None)

        def picked(field: Optional[str]) -> None:
            if field is not None:
                self.action_sort_by(field)

        self.app.push_screen(SortPicker(LABELS[view].lower(), lines, current), picked)

    def app_keymap(self) -> dict[str, str]:
        return dict(getattr(self.app, "_keymap", {}) or {})
