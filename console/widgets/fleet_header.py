"""FleetHeader: the fleet in one line: nodes, GPUs, tokens/s, the slowest ETA, dollars, alerts."""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from gpudeck.console.cost import dollars
from gpudeck.console.formatting import human_duration
from gpudeck.console.rows import Totals
from gpudeck.console.widgets import cells


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
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" gpudeck ", st("fleet-header--title"))
        t.append(f" {self.fleet_name} ", st("fleet-header--muted"))
        if self.read_only:
            t.append(" READ-ONLY ", st("fleet-header--badge"))
        tot = self.totals
        clock_len = 10 if self.now else 1
        if tot is None:
            t.append("  waiting for the first snapshot…", st("fleet-header--muted"))
        else:
            full = t.copy()
            self._fields(full, tot)
            if full.cell_len + clock_len <= self.size.width:
                t = full
            else:  # a narrow terminal: short labels, no fleet name, so the figures and the clock fit
                t = Text(no_wrap=True, overflow="ellipsis")
                t.append(" gpudeck ", st("fleet-header--title"))
                if self.read_only:
                    t.append(" RO ", st("fleet-header--badge"))
                self._fields(t, tot, short=True)
        t.append(" ")
        clock = cells.clock_time(self.now) + " " if self.now else ""
        pad = self.size.width - t.cell_len - len(clock)
        if pad > 0:
            t.append(" " * pad)
            t.append(clock, st("fleet-header--muted"))
        return t

    def _fields(self, t: Text, tot: Totals, short: bool = False) -> None:
        """The figures, each its own field between separators: they never run together."""
        st = self.get_component_rich_style
        sep, muted = ("│" if short else " │ "), st("fleet-header--muted")
        t.append(" nodes ")
        t.append(f"{tot.nodes_up}/{tot.nodes_total}",
                 st("fleet-header--ok") if tot.nodes_up == tot.nodes_total else st("fleet-header--bad"))
        t.append(sep, muted)
        t.append(f"GPU {tot.gpus_busy}/{tot.gpus_total}" if short else f"GPUs {tot.gpus_busy}/{tot.gpus_total} busy")
        if tot.gpus_simulated:
            t.append(" SIM" if short else " (simulated)", st("fleet-header--badge"))
        t.append(sep, muted)
        t.append(f"jobs {tot.jobs_running}/{tot.jobs_total}")
        t.append(sep, muted)
        t.append(f"{cells.rate(tot.tokens_per_s)} tok/s")
        if tot.slowest_eta_s is not None:
            t.append(sep, muted)
            t.append(f"ETA {human_duration(tot.slowest_eta_s)}")
            if not short:
                t.append(f" ({tot.slowest_job})", muted)
        if tot.priced:  # dollars only where the fleet file gives prices
            t.append(sep, muted)
            t.append(f"{dollars(tot.spent)} +{dollars(tot.to_finish)}" if short else
                     f"{dollars(tot.spent)} spent, {dollars(tot.to_finish)} to finish")
        if tot.alerts:
            t.append(sep, muted)
            t.append(f"▲{tot.alerts}" if short else f"▲ {tot.alerts} alert{'s' if tot.alerts != 1 else ''}",
                     st("fleet-header--bad"))
