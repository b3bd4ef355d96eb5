"""The charts with axes: the layout of ``console/chart.py`` for each range (time labels, value
labels, the plan line), the coarse series the greeting feeds, and the console picking 24h and
drawing a page of the node's history. No process is started: the node's answer comes from a
FleetClient whose ``request`` answers ``history`` in process.

The tui tier's tests of this file (the pilots, no process); the others are in
tests/unit/test_tui_charts.py."""

from __future__ import annotations

import asyncio

import pytest

from gpudeck.agents.contract import ops
from gpudeck.agents.contract.ops import HistoryPage, HistoryPoint
from gpudeck.console import chart
from gpudeck.console.app import make_app
from gpudeck.remote.client import AgentError, FleetClient
from support.tui import describe, feed_pinned, pinned_fleet, screen_text, wait_until
from support.tui_charts import NOW


class HistoryClient(FleetClient):
    """A FleetClient that connects to nothing and answers ``history`` in process, recording
    what was asked."""

    def __init__(self, fleet) -> None:
        super().__init__(fleet)
        self.asked: list[ops.ReadHistory] = []

    async def watch(self, on_event, backoff_s: float = 1.0, **kw) -> None:
        await asyncio.Event().wait()

    async def request(self, op, node=None, timeout=None, connect=True):
        if not isinstance(op, ops.ReadHistory):  # the details screen follows the job's log too
            raise AgentError(node or "gpu-a", "not connected")
        self.asked.append(op)
        start = int(op.since // 60) * 60
        if op.gpus_only:  # a node's chart: its two GPUs, at 40% and 60% all along
            step = int(chart.STEP_S[op.resolution])
            points = [HistoryPoint(t=float(t), gpu=str(i), n=step, mean={"util_pct": 40.0 + 20 * i})
                      for t in range(start, int(NOW), step) for i in (0, 1)]
            return HistoryPage(points=points, resolution=op.resolution, node=node or "")
        points = [HistoryPoint(t=float(t), job="gen", state="running", n=60,
                               mean={"tokens_per_s": 1000.0 + (t - start) / 60, "done": float(t - start)})
                  for t in range(start, int(NOW), 60)]
        return HistoryPage(points=points, resolution=op.resolution, node=node or "")

    async def close(self) -> None:
        pass


async def test_picking_24h_draws_the_nodes_history_with_axes(tmp_path):
    fleet = pinned_fleet()
    client = HistoryClient(fleet)
    app = make_app(fleet, client=client, clock=lambda: NOW, tick_s=0, initial_view="jobs",
                   looked_file=str(tmp_path / "looked.json"), summary_wait_s=3600)
    app.animation_level = "none"
    async with app.run_test(size=(120, 40)) as pilot:
        feed_pinned(app)
        await wait_until(pilot, lambda: app.state.nodes["gpu-b"].error is not None, what="the pinned state")
        app.refresh_views()
        app.screen.table("jobs").move_cursor_to_key("gpu-a/gen")
        await describe(pilot, tab="log")
        await wait_until(pilot, lambda: "[6h]" in screen_text(app), what="the chart at 6h (gen has run 2 h)")
        await pilot.press("t")
        await wait_until(pilot, lambda: "node history at 1m" in screen_text(app) and "[24h]" in screen_text(app),
                         what="the 24h chart from the node's page")
        asked = [op for op in client.asked if op.resolution == "1m" and op.since == NOW - 86400]
        assert asked and asked[0].job == "gen"
        screen = screen_text(app)
        # the time axis: every two hours over the day at 120 columns, and the value axis in the gutter
        axis = next(i for i, line in enumerate(screen.splitlines()) if "└┬" in line)
        assert screen.splitlines()[axis + 1].split() == ["12:00", "14:00", "16:00", "18:00", "20:00", "22:00",
                                                          "00:00", "02:00", "04:00", "06:00", "08:00", "10:00"]
        assert "  2.4k┤" in screen and "  914k┤" in screen  # the peak of the page; done tops at the total
        chart_lines = [line for line in screen.splitlines() if "┤" in line or "│" in line[:9]]
        assert any("█" in line for line in chart_lines)  # drawn from the page, the whole day
        shown = app.screen.query_one("#job-chart").chart
        assert shown.range == "24h" and sum(v is not None for v in shown.panels[0].values) > 100
        # the page is kept: going round the ranges and back asks nothing again
        n = len(client.asked)
        await pilot.press("t", "t", "t", "t")
        await wait_until(pilot, lambda: "[24h]" in screen_text(app), what="back at 24h")
        assert len([op for op in client.asked[n:] if op.since == NOW - 86400]) == 0


async def test_a_nodes_chart_at_24h_and_7d_draws_the_nodes_history(tmp_path):
    """On a node's row of the overview the chart is the node's GPUs; at 24h and 7d it reads the
    node's history (every GPU, no job) as a job's chart does, not only this console's 12 hours."""
    fleet = pinned_fleet()
    client = HistoryClient(fleet)
    app = make_app(fleet, client=client, clock=lambda: NOW, tick_s=0, initial_view="overview",
                   looked_file=str(tmp_path / "looked.json"), summary_wait_s=3600)
    app.animation_level = "none"
    async with app.run_test(size=(120, 40)) as pilot:
        feed_pinned(app)
        await wait_until(pilot, lambda: app.state.nodes["gpu-b"].error is not None, what="the pinned state")
        app.refresh_views()
        nodes = app.screen.query_one("#overview-fleet")
        nodes.focus()
        nodes.move_cursor_to_key("node:gpu-a")
        app.refresh_views()
        await wait_until(pilot, lambda: "GPU utilization" in screen_text(app) and "node history at 1m" in screen_text(app),
                         what="the node's chart at 24h, from its history")
        asked = [op for op in client.asked if op.gpus_only]
        assert asked and asked[0] == ops.ReadHistory(since=NOW - 86400, resolution="1m", gpus_only=True)
        shown = app.screen.query_one("#overview-chart").chart
        values = shown.panels[0].values
        assert shown.range == "24h" and values[0] == pytest.approx(50.0)  # the mean of its GPUs, a day ago
        assert all(v == pytest.approx(50.0) for v in values[: len(values) // 2])  # before the greeting's 12 h
        await pilot.press("t")
        await wait_until(pilot, lambda: "[7d]" in screen_text(app) and "node history at 1h" in screen_text(app),
                         what="the node's chart at 7d, from its history")
        assert any(op.gpus_only and op.resolution == "1h" and op.since == NOW - 7 * 86400 for op in client.asked)
        shown = app.screen.query_one("#overview-chart").chart
        assert shown.range == "7d" and shown.panels[0].values[0] == pytest.approx(50.0)
        n = len(client.asked)  # the pages are kept: round the ranges back to 24h asks nothing again
        await pilot.press("t", "t", "t")
        await wait_until(pilot, lambda: "[24h]" in screen_text(app), what="back at 24h")
        assert not [op for op in client.asked[n:] if op.gpus_only and op.since == NOW - 86400]
