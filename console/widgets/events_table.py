"""EventsTable: the fleet's timeline, oldest first, newest at the bottom, followed live."""

from __future__ import annotations

from typing import Sequence

from ..rows import EventRow
from ..timeline import severity
from . import cells
from .live_table import Cell, Column, LiveTable

_STYLE = {"error": "bad", "warning": "warn", "information": "ok", "": "muted"}


class EventsTable(LiveTable[EventRow]):
    """Died, restarted, gave up, stalled, finished, GPU health, disks, temperatures,
    deadlines and what cleared them, with the state changes, launches, kills and
    notifications between them. While the cursor is on the last row, it follows new rows."""

    COLUMNS = (
        Column("TIME", 8),
        Column("NODE", 12, drop=2),
        Column("KIND", 16),
        Column("JOB", 12, drop=1),
        Column("GPU", 3, align="right", drop=3),
        Column("MESSAGE", 0, least=30),
    )

    def show(self, rows: Sequence[EventRow]) -> None:
        following = self.row_count == 0 or self.cursor_key == self._keys[-1]
        super().show(rows)
        if following and self.row_count:
            self._set_cursor(self.row_count - 1)

    def render_cells(self, e: EventRow) -> Sequence[Cell]:
        kind = ((e.kind.replace("_", " "), self.style(_STYLE[severity(e)])),)
        gpu = str(e.gpu) if e.gpu is not None else ""
        return (cells.clock_time(e.t), e.node, kind, e.job or "", gpu, e.message)
