"""JobChart: a chart with axes (``chart.Chart``: a job's tokens/s, items done against its
plan, an engine's requests and KV cache; or a node's GPU utilization) over the range picked,
filling the space it is given.

Every panel covers the same time window column for column; the value axis is in the gutter on
the left, the time axis under the last panel, the range picker in the first title. The layout
is ``chart.draw``'s (pure, tested without a screen); this widget only paints it.
"""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual import events
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from ..chart import Chart, draw, picker_text


class JobChart(Widget):
    COMPONENT_CLASSES = {"job-chart--title", "job-chart--muted", "job-chart--line", "job-chart--warn",
                         "job-chart--plan", "job-chart--axis"}

    chart: reactive[Optional[Chart]] = reactive(None)
    """The chart to draw; None: nothing selected (or not in any snapshot yet)."""

    placeholder = "select a job to see its chart"

    class Resized(Message):
        """The chart's size changed: its columns are built for a width, so the screen builds
        them again."""

    def on_resize(self, event: events.Resize) -> None:
        self.post_message(self.Resized())

    def render(self) -> Text:
        st = self.get_component_rich_style
        c = self.chart
        if c is None:
            return Text(self.placeholder, st("job-chart--muted"))
        styles = {name: st(f"job-chart--{name}") for name in ("title", "muted", "line", "plan", "axis", "warn")}
        out = Text(no_wrap=True, overflow="crop", end="")
        for n, line in enumerate(draw(c, self.size.width, self.size.height, picker_text(c.range))):
            if n:
                out.append("\n")
            for text, style in line:
                out.append(text, styles.get(style))
        return out
