"""Charts with axes: what a chart holds and how it is laid out in cells. Pure data, no textual.

A ``Chart`` is one time window (a range: 1h, 6h, 24h or 7d, ending now) and its panels, each
one figure as a value per column; FleetState builds it (``job_chart``, ``node_chart``) from
what it holds, and ``draw`` lays it out as lines of (text, style) cells that
``widgets/job_chart.py`` paints. Every panel of a chart covers the same window column for
column, so one time axis under the last serves them all.

Where the figures come from, by range: 1h from the console's 15 s series (memory); 6h, 24h
and 7d from the node's history (``ReadHistory`` at ``RESOLUTION``), read when the range is
picked and kept per range, with the coarse series of the state (a minute a bucket, the
greeting's 12 hours and every snapshot since) for what came after the read, and for the whole
window until the read is answered. A node's chart (its GPUs' mean utilization) reads its
page the same way, with ``gpus_only``.

The hand-made chart beat textual-plotext here by an order of magnitude at the same size
(docs/console.md#charts gives the figures): a column of eighth blocks per time slot, a
gutter of ``GUTTER`` cells for the value axis, and two rows for the time axis.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

RANGES: dict[str, float] = {"1h": 3600.0, "6h": 6 * 3600.0, "24h": 24 * 3600.0, "7d": 7 * 86400.0}
RANGE_NAMES = tuple(RANGES)
RESOLUTION = {"6h": "1m", "24h": "1m", "7d": "1h"}  # the ranges read from the node, at this resolution
STEP_S = {"1s": 1.0, "1m": 60.0, "1h": 3600.0}
GUTTER = 7  # the value axis: a label of up to 6 cells, then the axis
AXIS_ROWS = 2  # the time axis: ticks, then their labels
BLOCKS = " ▁▂▃▄▅▆▇█"
PLAN_MARK = "─"

# time-axis steps, the least first; a step is taken when its labels fit the width
_STEPS = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 2 * 86400)

Bucket = tuple[float, float, Optional[float]]  # (start, end, value): a figure over a span of time
Cell = tuple[str, str]  # (text, style): style is one of title, muted, line, plan, axis, warn


@dataclass(frozen=True)
class Panel:
    """One figure over the chart's window: a value per column (None: nothing known there)."""

    title: str
    values: tuple[Optional[float], ...]
    top: Optional[float] = None  # the value axis' top; None: the largest value
    plan: tuple[Optional[float], ...] = ()  # the planned line, a value per column (plan.json)
    unit: str = ""  # how the axis spells a value: "" a rate, "count", "pct" (0..1 shown as %)


@dataclass(frozen=True)
class Chart:
    """A time window, ``start`` to ``end``, and its panels in the order they matter."""

    range: str
    start: float
    end: float
    panels: tuple[Panel, ...]
    note: str = ""  # where the figures come from, or why some are missing
    wants: bool = False  # the range is read from the node and its page is missing or old: ask for it


def fit_range(span_s: Optional[float]) -> str:
    """The least range that holds ``span_s`` (a job's run so far); 1h when unknown, 7d at most."""
    if span_s is None:
        return RANGE_NAMES[0]
    return next((name for name, s in RANGES.items() if span_s <= s), RANGE_NAMES[-1])


def next_range(current: str, step: int = 1) -> str:
    i = RANGE_NAMES.index(current) if current in RANGES else 0
    return RANGE_NAMES[(i + step) % len(RANGE_NAMES)]


def columns(buckets: Iterable[Bucket], start: float, end: float, width: int) -> tuple[Optional[float], ...]:
    """Buckets of any length laid over ``width`` columns from ``start`` to ``end``: a column is
    the mean of the buckets that overlap it, so a 15 s series and an hour's buckets fill the
    same columns alike (several buckets to a column, or one bucket over several)."""
    if width <= 0 or end <= start:
        return ()
    span = (end - start) / width
    sums = [0.0] * width
    counts = [0] * width
    for s, e, v in buckets:
        if v is None or e <= start or s > end or v != v:  # (v != v: a NaN, no reading)
            continue
        c0 = min(width - 1, int((max(s, start) - start) / span))  # (the bucket that begins now: the last)
        c1 = max(c0, int((min(e, end) - start) / span - 1e-9))
        for c in range(c0, min(c1, width - 1) + 1):
            sums[c] += v
            counts[c] += 1
    return tuple(sums[c] / counts[c] if counts[c] else None for c in range(width))


def filled(values: Sequence[Optional[float]]) -> tuple[Optional[float], ...]:
    """A count's columns with the gaps inside its run filled by the last value (a count does
    not drop to nothing between two readings)."""
    out: list[Optional[float]] = []
    last: Optional[float] = None
    for v in values:
        last = v if v is not None else last
        out.append(last)
    return tuple(out)


def plan_line(since: Optional[float], planned_s: Optional[float], total: Optional[float], start: float,
              end: float, width: int) -> tuple[Optional[float], ...]:
    """Items done as the plan had them, a value per column: none before ``since`` (the run's
    start), then ``total`` spread evenly over ``planned_s``."""
    if since is None or not planned_s or planned_s <= 0 or not total or width <= 0:
        return ()
    span = (end - start) / width
    out: list[Optional[float]] = []
    for c in range(width):
        t = start + (c + 0.5) * span
        out.append(None if t < since else total * min(1.0, (t - since) / planned_s))
    return tuple(out)


# ---------------------------------------------------------------- the axes


def label(v: Optional[float], unit: str = "") -> str:
    """A value as the axis spells it, in 6 cells at most: 2,390 -> 2.4k, 914,000 -> 914k."""
    if v is None:
        return "-"
    if unit == "pct":
        return f"{100 * v:.0f}%"
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:.3g}G"
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.0f}k"
    if a >= 1e3:
        return f"{v / 1e3:.1f}k"
    if a >= 10 or unit == "count" or v == 0:
        return f"{v:.0f}"
    return f"{v:.2g}"


def time_ticks(start: float, end: float, width: int) -> list[tuple[int, str]]:
    """(column, label) of the time axis: the least step of ``_STEPS`` whose labels fit, on
    round times of the operator's zone (a minute, an hour, a day), "HH:MM" within a day and
    "Sat 09" for steps of a day or more."""
    if width <= 0 or end <= start:
        return []
    span = end - start
    out: list[tuple[int, str]] = []
    for step in _STEPS:
        days = step >= 86400
        room = 6 if days else 5
        if span / step > max(1, width // (room + 3)):
            continue
        offset = time.localtime(start).tm_gmtoff  # round times in the operator's zone
        t = math.ceil((start + offset) / step) * step - offset
        while t <= end:
            c = int((t - start) / span * width)
            if 0 <= c < width:
                out.append((c, time.strftime("%a %d" if days else "%H:%M", time.localtime(t))))
            t += step
        return out
    return out


# ---------------------------------------------------------------- layout


def draw(chart: Chart, width: int, height: int, picker: str = "") -> list[list[Cell]]:
    """The chart in ``width`` x ``height`` cells, as lines of (text, style): each panel's title
    (the first with ``picker`` and the note), its rows with the value axis in the gutter, then
    the time axis under the last. Panels that do not fit are left out, the last first."""
    plot_w = width - GUTTER
    if plot_w <= 0 or height <= 0:
        return []
    panels = list(chart.panels)
    axis = AXIS_ROWS if height >= len(panels[:1]) * 2 + AXIS_ROWS else 0
    while panels and len(panels) * 2 + axis > height:
        panels.pop()
    if not panels:
        return [[(picker, "muted")]] if picker else []
    rows_each = max(1, (height - axis - len(panels)) // len(panels))
    lines: list[list[Cell]] = []
    for n, p in enumerate(panels):
        title: list[Cell] = [(p.title, "title")]
        if n == 0:
            if picker:
                title.append(("  " + picker, "muted"))
            if chart.note:
                title.append(("  " + chart.note, "muted"))
        lines.append(title)
        lines.extend(_panel_rows(p, plot_w, rows_each))
    if axis:
        lines.extend(_time_axis(chart, plot_w))
    return [_crop(line, width) for line in lines]


def _crop(line: list[Cell], width: int) -> list[Cell]:
    """A line cut to ``width`` cells (a long title)."""
    out: list[Cell] = []
    room = width
    for text, style in line:
        if room <= 0:
            break
        out.append((text[:room], style))
        room -= len(text)
    return out


def _stretch(values: Sequence[Optional[float]], width: int) -> list[Optional[float]]:
    """Columns built for another width (the widget was resized since): each column takes the
    nearest, until the next redraw builds them for this one."""
    n = len(values)
    if n == width or n == 0:
        return list(values) if n else [None] * width
    return [values[min(n - 1, c * n // width)] for c in range(width)]


def _panel_rows(p: Panel, width: int, rows: int) -> list[list[Cell]]:
    values = _stretch(p.values, width)
    plan = _stretch(p.plan, width) if p.plan else []
    seen = [v for v in values if v is not None] + [v for v in plan if v is not None]
    top = p.top if p.top is not None else max(seen, default=0.0)
    steps = [None if v is None else (0 if top <= 0 else int(max(0.0, min(1.0, v / top)) * rows * 8 + 0.5))
             for v in values]
    plan_row: list[Optional[int]] = [None] * width
    for c, v in enumerate(plan):
        if v is not None and top > 0:
            plan_row[c] = min(rows - 1, int(max(0.0, min(1.0, v / top)) * rows))  # from the bottom
    labels = {0: label(top, p.unit) if top > 0 else "", rows - 1: label(0.0, p.unit)}
    if rows >= 5:
        labels[rows // 2] = label(top * (rows - rows // 2 - 0.5) / rows, p.unit)
    out: list[list[Cell]] = []
    for r in range(rows):  # the top row first
        from_bottom = rows - 1 - r
        text = labels.get(r)
        line: list[Cell] = [((text or "").rjust(GUTTER - 1)[-(GUTTER - 1):] + ("┤" if text else "│"), "axis")]
        low = from_bottom * 8
        run: list[str] = []
        style = "line"
        for c in range(width):
            if plan_row[c] == from_bottom:
                ch, st = PLAN_MARK, "plan"
            else:
                s = steps[c]
                ch, st = (" " if s is None else BLOCKS[max(0, min(8, s - low))]), "line"
            if st != style and run:
                line.append(("".join(run), style))
                run = []
            style = st
            run.append(ch)
        if run:
            line.append(("".join(run), style))
        out.append(line)
    return out


def _time_axis(chart: Chart, width: int) -> list[list[Cell]]:
    ticks = time_ticks(chart.start, chart.end, width)
    marks = ["─"] * width
    labels = [" "] * (GUTTER + width)  # a label centred on its tick may reach into the gutter
    free = 0  # the first cell a label may use
    for c, text in ticks:
        marks[c] = "┬"
        at = max(free, GUTTER + c - len(text) // 2)
        if at + len(text) <= len(labels):
            labels[at:at + len(text)] = text
            free = at + len(text) + 1
    return [[(" " * (GUTTER - 1) + "└" + "".join(marks), "axis")], [("".join(labels), "axis")]]


def picker_text(current: str) -> str:
    """The range picker as the first title shows it: ``1h [6h] 24h 7d  t/T``."""
    return " ".join(f"[{r}]" if r == current else r for r in RANGE_NAMES) + "  (t: range)"


def buckets_of(points: Iterable[tuple[float, Optional[float]]], step_s: float) -> list[Bucket]:
    """(start, value) pairs of a fixed step as buckets."""
    return [(t, t + step_s, v) for t, v in points]
