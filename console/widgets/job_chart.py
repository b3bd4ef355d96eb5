"""JobChart: one job's history as block charts that fill the space they are given.

tokens/s over the history; for a job that counts items, done over time, and when it will
finish at the current rate said in words; for an engine, running and queued requests and
KV-cache use. Every chart of a pane covers the same time window, the one the first title
names, column for column: a column is the same moment in each. Drawn from the JobDetail the
state builds: no I/O here.
"""

from __future__ import annotations

from typing import Optional, Sequence

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..formatting import human_duration
from ..rows import JobDetail
from . import cells

Values = Sequence[Optional[float]]


class JobChart(Widget):
    COMPONENT_CLASSES = {"job-chart--title", "job-chart--muted", "job-chart--line", "job-chart--warn"}

    detail: reactive[Optional[JobDetail]] = reactive(None)
    """The job to draw; None: no job selected (or not in any snapshot yet)."""

    def render(self) -> Text:
        st = self.get_component_rich_style
        d = self.detail
        width, height = self.size.width, self.size.height
        if d is None:
            return Text("select a job to see its chart", st("job-chart--muted"))
        panels = self._panels(d, width)
        while panels and len(panels) * 2 > height:
            panels.pop()  # too short for them all: the first ones matter most
        out = Text(no_wrap=True, overflow="crop", end="")
        if not panels:
            return out
        rows_each = max(1, (height - len(panels)) // len(panels))
        for n, (title, parts, top) in enumerate(panels):
            if n:
                out.append("\n")
            out.append(title + "\n", st("job-chart--title"))
            grids = [(cells.column_chart(values, rows_each, top), style) for values, style in parts]
            for r in range(rows_each):
                for grid, style in grids:
                    out.append(grid[r], style)
                if r < rows_each - 1:
                    out.append("\n")
        return out

    def _panels(self, d: JobDetail, width: int) -> list[tuple[str, list[tuple[Values, Style]], Optional[float]]]:
        """(title, [(column values, style)], top) per chart, in the order they matter."""
        st = self.get_component_rich_style
        line, span = st("job-chart--line"), human_duration(len(d.spark) * d.bucket_s)
        j = d.row
        seen = [v for v in d.spark if v is not None]
        now = cells.rate(j.tokens_per_s if j.tokens_per_s is not None else (seen[-1] if seen else None))
        peak = cells.rate(max(seen)) if seen else "-"
        out = [(f"{j.name}  tokens/s  now {now}  peak {peak}  (last {span})",
                [(cells.resample(d.spark, width), line)], None)]
        if j.done is not None:
            out.append(self._done_panel(d, width))
        if j.engine_state is not None:
            for title, values, top in (("running requests", d.running_series, None),
                                       ("queued requests", d.queued_series, None), ("KV cache use", d.kv_series, 1.0)):
                last = next((v for v in reversed(values) if v is not None), None)
                shown = "-" if last is None else (f"{100 * last:.0f}%" if top == 1.0 else f"{last:.0f}")
                out.append((f"{title}  now {shown}", [(cells.resample(values, width), line)], top))
        return out

    def _done_panel(self, d: JobDetail, width: int) -> tuple[str, list[tuple[Values, Style]], Optional[float]]:
        """Items done over the window of the other charts. The finish is said in words: drawn on
        a time axis of its own (days, where the history is minutes), it squeezed the history
        into a column and made three windows of one pane."""
        j = d.row
        total = j.total
        title = f"done  {cells.count(j.done)}" + (f" / {cells.count(total)}" if total else "")
        if total and j.eta_s is not None and j.eta_s > 0:
            title += f"  finish in {human_duration(j.eta_s)} at the current rate"
        return title, [(cells.resample(_filled(d.done_series), width), self.get_component_rich_style(
            "job-chart--line"))], float(total) if total else None


def _filled(values: Values) -> list[Optional[float]]:
    """A count series with its gaps filled by the last value (a count does not drop to nothing)."""
    out: list[Optional[float]] = []
    last: Optional[float] = None
    for v in values:
        last = v if v is not None else last
        out.append(last)
    return out
