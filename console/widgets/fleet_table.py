"""FleetTable: every node, then its GPUs, one line each."""

from __future__ import annotations

from functools import partial
from typing import Optional, Sequence, Union

from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from ..formatting import human_duration
from ...agents.contract.ownership import owner_text
from ..rows import FleetRow, GpuRow, NodeRow, NodeState, ProcRow
from . import cells
from .live_table import Cell, Column, Frag, LiveTable

MEM_BAR = 12
UTIL_SPARK = 10


class FleetTable(LiveTable[FleetRow]):
    """Nodes and GPUs: memory bar, utilization, temperature, power, and who holds the GPU."""

    COLUMNS = (
        Column("NODE / GPU", 24),  # "  GPU0 RTX PRO 6000·sim": a model's name whole (cells.gpu_name_fit)
        Column("MEMORY", MEM_BAR + 15),
        Column("UTIL", 4, "right"),
        Column("UTIL TREND", UTIL_SPARK, drop=3),
        Column("TEMP", 5, "right", drop=1),
        Column("POWER", 5, "right", drop=2),
        Column("HELD BY", 0, least=10),
    )

    def render_row(self, row: FleetRow, width: int) -> Union[Text, list[Segment]]:
        if isinstance(row, NodeRow):
            return self._node_line(row)
        if isinstance(row, ProcRow):
            return self._proc_line(row)
        return self.join_cells(self.render_cells(row), width)

    def _proc_line(self, p: ProcRow) -> Text:
        """A process under its GPU, across the line: its GPU memory, CPU%, job and command."""
        muted = self.style("muted")
        t = Text(no_wrap=True, end="", overflow="ellipsis")
        t.append(f"    └ pid {p.pid:<8}", muted)
        t.append(f"{p.used_gib:6.1f} GiB  cpu {'  -' if p.cpu_pct is None else f'{p.cpu_pct:3d}%'}  ")
        t.append(p.job or "no job", self.style("accent") if p.job else self.style("warn"))
        t.append(f"  {p.command or '?'}", muted)
        return t

    def render_cells(self, g: GpuRow) -> Sequence[Cell]:  # type: ignore[override]
        st = self.style
        frac = g.mem_used_gib / g.mem_total_gib if g.mem_total_gib else None
        mem = cells.bar(frac, MEM_BAR, st("bar"), st("bar-empty"))
        mem.append((f" {g.mem_used_gib:5.1f}/{g.mem_total_gib:.1f}G", None))
        util = "-" if g.util_pct is None else f"{g.util_pct}%"
        temp = "-" if g.temp_c is None else f"{g.temp_c}°C"
        power = "-" if g.power_w is None else f"{g.power_w}W"
        held: list[Frag] = [(job, st("bad") if g.shared else st("accent")) for job in g.jobs]
        held += [(f"pid {pid} (no job)", st("warn")) for pid in g.unowned_pids]
        if g.shared:
            held.append(("two jobs on one GPU", st("bad")))
        # whole jobs and pids, then +N: never a name cut in two (the describe lists them all)
        held_cell = partial(cells.phrases_fit, held, sep=", ") if held else ((("-", st("muted")),))
        spark = ((cells.sparkline(g.util_spark[-UTIL_SPARK:], top=100.0), st("spark")),)
        prefix = f"  GPU{g.index} "
        name = partial(_gpu_cell, prefix, g.name)  # the name shortened by rules, never cut in a word
        return (name, mem,
                ((util, st("ok")),) if g.util_pct is not None and g.util_pct >= 90 else util, spark,
                ((temp, st("bad")),) if g.temp_c is not None and g.temp_c >= 85 else temp,
                power, held_cell)

    def _node_line(self, n: NodeRow) -> Text:
        t = Text(no_wrap=True, end="")
        if n.state in (NodeState.UP, NodeState.OWNED_ELSEWHERE):  # both answer
            t.append("● ", self.style("ok"))
            t.append(n.node, self.style("node"))
            parts = [f"host {n.hostname}", f"cpu {n.cpu_pct}% of {n.cpu_count}",
                     f"mem {n.mem_used_gib:.1f}/{n.mem_total_gib:.1f} GiB", f"load {n.load1:.1f}"]
            parts.append(f"{n.gpu_count} GPU{'s' if n.gpu_count != 1 else ''}" if n.gpu_count
                         else f"no GPUs: {n.gpu_error or 'none found'}")
            t.append("  " + " · ".join(parts), self.style("muted"))
            if n.owned_elsewhere:  # this file's jobs that another fleet owns there: read, not ours
                owners = sorted({owner_text(o) for _, o in n.owned_elsewhere})
                t.append(f"  owned elsewhere: {', '.join(j for j, _ in n.owned_elsewhere)} belong to "
                         f"{', '.join(owners)}", self.style("bad"))
            if n.copy_differs:  # another copy of this fleet declared other jobs there: until they agree
                t.append(f"  copy differs: {n.copy_differs}", self.style("warn"))
        elif n.state == NodeState.CONNECTING:
            t.append("◌ ", self.style("muted"))
            t.append(n.node, self.style("node"))
            t.append("  connecting…", self.style("muted"))
        else:
            t.append("✗ ", self.style("bad"))
            t.append(n.node, self.style("node"))
            # a node that answered and whose agent would not serve is not "unreachable"
            what = "agent failed" if n.state == NodeState.AGENT_FAILED else "unreachable"
            t.append(f"  {what} since {cells.clock_time(n.since)}", self.style("bad"))
            if n.down_for_s is not None:
                t.append(f" ({human_duration(n.down_for_s)})", self.style("bad"))
            if n.retry_in_s is not None:
                t.append(f" · retry in {n.retry_in_s} s", self.style("muted"))
            t.append(f" · {_reason(n)}", self.style("muted"))
        return t

    def row_style(self, row: FleetRow) -> Optional[Style]:
        if isinstance(row, (GpuRow, ProcRow)) and row.stale:
            return self.style("dim")
        return None


def _gpu_cell(prefix: str, name: str, width: int) -> str:
    return prefix + cells.gpu_name_fit(name, width - len(prefix))


def _reason(n: NodeRow) -> str:
    return n.error or ""
