"""The charts with axes: the layout of ``console/chart.py`` for each range (time labels, value
labels, the plan line), the coarse series the greeting feeds, and the console picking 24h and
drawing a page of the node's history. No process is started: the node's answer comes from a
FleetClient whose ``request`` answers ``history`` in process.

The unit tier's tests of this file (starts nothing); the others are in tests/tui/test_tui_charts.py."""

from __future__ import annotations

import re

import pytest
from gpudeck.agents.contract.wire import History, Sample
from gpudeck.console import chart
from gpudeck.console.series import Coarse
from gpudeck.console.state import FleetState
from support.tui import pinned_events, pinned_fleet
from support.tui_charts import NOW


def text(lines) -> list[str]:
    return ["".join(t for t, _ in line) for line in lines]


def one_panel(rng: str, values=(), plan=(), width: int = 60, top=None, unit="") -> chart.Chart:
    return chart.Chart(rng, NOW - chart.RANGES[rng], NOW, (chart.Panel("tokens/s", tuple(values), top, tuple(plan),
                                                                         unit),))


@pytest.mark.parametrize("rng, labels", [
    ("1h", ["11:00", "11:10", "11:20", "11:30", "11:40", "11:50"]),  # (now, 12:00, is the right edge)
    ("6h", ["06:00", "07:00", "08:00", "09:00", "10:00", "11:00"]),
    ("24h", ["12:00", "18:00", "00:00", "06:00"]),
    ("7d", ["Mon 24", "Wed 26", "Fri 28", "Sun 30"]),  # a label a day does not fit 60 columns
])
def test_time_axis_labels_for_each_range(rng, labels):
    lines = text(chart.draw(one_panel(rng, [1.0] * 60), 67, 8))
    ticks, under = lines[-2], lines[-1]
    assert ticks.startswith(" " * (chart.GUTTER - 1) + "└") and "┬" in ticks
    assert re.split(r"\s{2,}", under.strip()) == labels
    for name in labels:  # each label under its tick
        col = under.index(name) + len(name) // 2
        assert ticks[col] == "┬" or ticks[col - 1] == "┬" or ticks[col + 1] == "┬", (name, ticks, under)


def test_time_ticks_are_round_times_of_the_zone():
    got = chart.time_ticks(NOW - 3600, NOW, 120)
    assert got[:3] == [(0, "11:00"), (10, "11:05"), (20, "11:10")]  # 5 minutes fit 120 columns
    assert got[-1] == (110, "11:55")


def test_value_axis_labels_and_gutter():
    lines = text(chart.draw(one_panel("1h", [1000.0, 2390.0] * 30), 67, 8))
    assert lines[0].startswith("tokens/s")
    rows = lines[1:-2]
    assert rows[0].startswith("  2.4k┤")  # the top, the largest value
    assert rows[-1].startswith("     0┤")  # the bottom
    assert rows[len(rows) // 2].endswith(tuple("▁▂▃▄▅▆▇█ "))
    assert all(r[chart.GUTTER - 1] in "┤│" for r in rows)
    assert chart.label(914_000, "count") == "914k" and chart.label(0.62, "pct") == "62%"
    assert chart.label(1.5e6) == "1.5M" and chart.label(0.42) == "0.42"


def test_the_plan_line_rises_against_the_real_one():
    width = 60
    start = NOW - 6 * 3600
    plan = chart.plan_line(NOW - 3 * 3600, 6 * 3600, 1000.0, start, NOW, width)
    assert plan[: width // 2 - 1] == (None,) * (width // 2 - 1)  # before the run began: no plan
    assert plan[-1] == pytest.approx(500.0, rel=0.02)  # half the planned time: half the items
    real = [None] * (width // 2) + [100.0] * (width // 2)  # far behind the plan
    lines = text(chart.draw(chart.Chart("6h", start, NOW, (chart.Panel("done", tuple(real), 1000.0, plan,
                                                                       "count"),)), width + chart.GUTTER, 12))
    rows = lines[1:-2]
    marks = [(r, line.index(chart.PLAN_MARK)) for r, line in enumerate(rows) if chart.PLAN_MARK in line]
    assert len(marks) >= 4  # the line climbs through the rows ...
    assert [c for _, c in marks] == sorted((c for _, c in marks), reverse=True)  # ... to the right, upward
    assert rows[0].startswith("  1.0k┤")  # the axis tops at the total
    styles = {s for line in chart.draw(chart.Chart("6h", start, NOW, (chart.Panel("done", tuple(real), 1000.0, plan),)),
                                       width + chart.GUTTER, 12) for _, s in line}
    assert "plan" in styles


def test_columns_fit_any_bucket_length():
    start, end = 0.0, 600.0
    fine = [(t, t + 15.0, 1.0) for t in range(0, 600, 15)]  # 40 buckets over 10 columns
    assert chart.columns(fine, start, end, 10) == (1.0,) * 10
    coarse = [(0.0, 300.0, 2.0), (300.0, 600.0, None)]  # one bucket over half the columns
    assert chart.columns(coarse, start, end, 10) == (2.0,) * 5 + (None,) * 5
    assert chart.fit_range(5 * 3600) == "6h" and chart.fit_range(None) == "1h" and chart.fit_range(30 * 86400) == "7d"
    assert chart.next_range("7d") == "1h" and chart.next_range("1h", -1) == "7d"


def test_the_greeting_fills_the_coarse_series_and_the_night_shows_at_once():
    """The node's 12 hours (minute means, then the last hour's samples) feed one coarse series
    a job: its 24h chart shows the night before any page is read."""
    state = FleetState(pinned_fleet(), clock=lambda: NOW)
    minutes = [Sample(NOW - 12 * 3600 + 60 * k + 30, [], [90.0], {"gen": 2000.0 + k}, {"gen": 100 * k})
               for k in range(11 * 60)]
    state.apply_history(History("gpu-a", minutes))
    for ev in pinned_events():
        if not isinstance(ev, (History, tuple)):
            state.apply(ev)
    c = state.job_detail("gpu-a/gen", chart_range="24h", chart_width=96).chart
    assert c.range == "24h" and c.wants  # a page is asked for ...
    tps = c.panels[0].values
    assert tps[:47] == (None,) * 47 and all(v is not None for v in tps[49:92])  # ... the night drawn meanwhile
    node = state.node_chart("gpu-a", "24h", 96)
    assert node is not None and node.panels[0].values[60] == pytest.approx(90.0)


def test_coarse_series_keeps_a_minute_a_bucket_in_flat_arrays():
    c = Coarse(2)
    for s in range(0, 180):
        c.add(1_000_020.0 + s, 10.0 if s < 60 else 20.0, float(s))
    got = c.buckets(0.0, 0)
    assert [v for _, _, v in got] == [10.0, 20.0, 20.0]  # two closed minutes of 60 s, and one filling
    assert got[0][1] - got[0][0] == 60.0
    c.add(999_000.0, 5.0, None)  # older than the minute filling: fills an empty slot only
    assert c.buckets(0.0, 0)[0][2] == 5.0
