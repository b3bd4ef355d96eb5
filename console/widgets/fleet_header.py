"""FleetHeader: the fleet in one line: nodes, GPUs, tokens/s, the slowest ETA, dollars (and
those an hour that idle priced GPUs cost), alerts."""

from __future__ import annotations

from typing import Optional

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..cost import dollars
from ..formatting import human_duration
from ..rows import Totals
from . import cells


class FleetHeader(Widget):
    COMPONENT_CLASSES = {"fleet-header--title", "fleet-header--muted", "fleet-header--bad", "fleet-header--ok",
                         "fleet-header--badge"}

    totals: reactive[Optional[Totals]] = reactive(None)
    """The numbers to show; None before the first snapshot."""

    now: reactive[float] = reactive(0.0)
    """The time shown at the right, from the app's clock."""

    def __init__(self, fleet_name: str, read_only: bool = False, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.fleet_name = fleet_name
        self.read_only = read_only

    def render(self) -> Text:
        st = self.get_component_rich_style
        tot = self.totals
        clock = cells.clock_time(self.now) + " " if self.now else ""
        if tot is None:
            t = self._title(short=False)
            t.append("  waiting for the first snapshot…", st("fleet-header--muted"))
            return self._with_clock(t, clock)
        full = self._title(short=False)
        _join(full, [text for _, text in self._fields(tot)], " │ ", st("fleet-header--muted"))
        if full.cell_len + len(clock) + 1 <= self.size.width:
            return self._with_clock(full, clock)
        return self._narrow(tot, clock)

    def _narrow(self, tot: Totals, clock: str) -> Text:
        """Short labels and no fleet name; then the least needed figures go, the jobs count and
        the clock first, so that the alert count and the dollars always stay; what was dropped
        comes back where the room left over takes it."""
        fields = self._fields(tot, short=True)
        if clock:
            fields.append((CLOCK_RANK, Text(clock)))
        shown = set(range(len(fields)))

        def line(which: set[int]) -> tuple[Text, str]:
            t = self._title(short=True)
            _join(t, [fields[i][1] for i in sorted(which) if fields[i][0] != CLOCK_RANK], "│",
                  self.get_component_rich_style("fleet-header--muted"))
            return t, clock if any(fields[i][0] == CLOCK_RANK for i in which) else ""

        def fits(which: set[int]) -> bool:
            t, c = line(which)
            return t.cell_len + len(c) + 1 <= self.size.width

        dropped = []
        while not fits(shown):
            droppable = [i for i in shown if fields[i][0] < KEPT_RANK]
            if not droppable:
                break
            gone = min(droppable, key=lambda i: fields[i][0])
            shown.discard(gone)
            dropped.append(gone)
        for i in reversed(dropped):
            if fits(shown | {i}):
                shown.add(i)
        return self._with_clock(*line(shown))

    def _title(self, short: bool) -> Text:
        st = self.get_component_rich_style
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" gpudeck ", st("fleet-header--title"))
        if not short:
            t.append(f" {self.fleet_name} ", st("fleet-header--muted"))
        if self.read_only:
            t.append(" RO " if short else " READ-ONLY ", st("fleet-header--badge"))
        return t

    def _with_clock(self, t: Text, clock: str) -> Text:
        """``t`` and the clock at the right edge, when there is room for it."""
        t.append(" ")
        pad = self.size.width - t.cell_len - len(clock)
        if pad > 0 and clock:
            t.append(" " * pad)
            t.append(clock, self.get_component_rich_style("fleet-header--muted"))
        return t

    def _fields(self, tot: Totals, short: bool = False) -> list[tuple[int, Text]]:
        """The figures, each its own field between separators (they never run together), with
        the rank that decides which stay on a narrow terminal (the higher, the longer)."""
        st = self.get_component_rich_style
        muted = st("fleet-header--muted")
        nodes = Text(" nodes ")
        nodes.append(f"{tot.nodes_up}/{tot.nodes_total}",
                     st("fleet-header--ok") if tot.nodes_up == tot.nodes_total else st("fleet-header--bad"))
        gpus = Text(f"GPU {tot.gpus_busy}/{tot.gpus_total}" if short else f"GPUs {tot.gpus_busy}/{tot.gpus_total} busy")
        if tot.gpus_simulated:
            gpus.append(" SIM" if short else " (simulated)", st("fleet-header--badge"))
        out = [(6, nodes), (3, gpus), (1, Text(f"jobs {tot.jobs_running}/{tot.jobs_total}")),
               (5, Text(f"{cells.rate(tot.tokens_per_s)} tok/s"))]
        if tot.slowest_eta_s is not None:
            eta = Text(f"ETA {human_duration(tot.slowest_eta_s)}")
            if not short:
                eta.append(f" ({tot.slowest_job})", muted)
            out.append((4, eta))
        if tot.priced:  # dollars only where the fleet file gives prices
            out.append((KEPT_RANK, Text(f"{dollars(tot.spent)} +{dollars(tot.to_finish)}" if short else
                                        f"{dollars(tot.spent)} spent, {dollars(tot.to_finish)} to finish")))
            if tot.burned:  # killed, failed and lost attempts
                out.append((7, Text(f"{dollars(tot.burned)} burned", st("fleet-header--bad"))))
        if tot.idle_per_hour is not None:  # priced GPUs idle past [alerts] idle_paid_s
            out.append((KEPT_RANK, Text(f"{dollars(tot.idle_per_hour)}/h idle", st("fleet-header--bad"))))
        if tot.alerts:
            out.append((KEPT_RANK, Text(f"▲{tot.alerts}" if short else
                                        f"▲ {tot.alerts} alert{'s' if tot.alerts != 1 else ''}",
                                        st("fleet-header--bad"))))
        return out


CLOCK_RANK = 2  # the clock goes after the jobs count, before every other figure
KEPT_RANK = 9  # the alert count and the dollars (idle ones too): never dropped


def _join(t: Text, fields: list[Text], sep: str, sep_style: Style) -> None:
    for n, f in enumerate(fields):
        if n:
            t.append(sep, sep_style)
        t.append_text(f)
