"""AlertsTable: what needs the operator now, newest first."""

from __future__ import annotations

from typing import Sequence

from ..rows import AlertRow
from . import cells
from .live_table import Cell, Column, LiveTable

class AlertsTable(LiveTable[AlertRow]):
    """Two jobs on one GPU, memory no job owns, dead and stalled jobs, unreachable nodes,
    full and filling disks."""

    COLUMNS = (
        Column("SINCE", 8),
        Column("NODE", 12, drop=2),
        Column("ALERT", 19),
        Column("JOB / GPU", 12, drop=1),
        Column("WHAT", 0, least=40),
    )

    def render_cells(self, a: AlertRow) -> Sequence[Cell]:
        kind = ((a.kind.value.replace("_", " "), self.style("bad" if a.kind.severe else "warn")),)
        what = a.job or (f"GPU {a.gpu}" if a.gpu is not None else "-")
        return (cells.clock_time(a.since), a.node, kind, what, a.message)
