"""Snapshot tests: each view of a pinned fleet, compared as text and SVG with the stored
screens in tests/snapshots/. The clock, the time zone, host names, pids and every number
are pinned; nothing is connected. GPUDECK_UPDATE_SNAPSHOTS=1 stores new screens."""

from __future__ import annotations

import time

import pytest

from gpudeck.console.app import make_app
from gpudeck.console.messages import EventsFetched
from gpudeck.console.since import summarize
from support.tui import event_of as event_row
from support.tui import (PINNED_NOW, compare_snapshot, describe, feed_pinned, pinned_fleet, pinned_timeline,
                         screen_text, wait_until)

SIZE = (120, 40)
SIZES = {"small": (80, 24), "large": (200, 50)}  # the least a terminal gives, and a big one


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def pinned_app(**kw):
    app = make_app(pinned_fleet(), connect=False, clock=lambda: PINNED_NOW, tick_s=0, **kw)
    app.animation_level = "none"
    return app


async def settle(pilot, cond=lambda app: True, what="the pinned state on screen"):
    await wait_until(pilot, lambda: pilot.app.state.totals().nodes_total == 2 and
                     pilot.app.state.nodes["gpu-b"].error is not None and cond(pilot.app), what=what)
    pilot.app.refresh_views()
    await pilot.pause()
    await pilot.pause()


async def snap(pilot, name: str) -> None:
    # the footer follows a pushed screen's bindings a refresh later: take the screen once it holds still
    seen: list[str] = []

    def steady() -> bool:
        seen.append(screen_text(pilot.app))
        return len(seen) >= 4 and len(set(seen[-4:])) == 1

    await wait_until(pilot, steady, what="the screen to hold still")
    compare_snapshot(name, screen_text(pilot.app), pilot.app.export_screenshot(title="gpudeck"))


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("view", ["overview", "fleet", "jobs", "logs", "alerts"])
async def test_view_snapshot(view, size):
    app = pinned_app(initial_view=view)
    async with app.run_test(size=SIZES[size]) as pilot:
        feed_pinned(app)
        await settle(pilot)
        if view == "overview":  # the chart of the job under the cursor
            app.screen.table("overview").move_cursor_to_key("gpu-a/gen")
            await wait_until(pilot, lambda: "gen  tokens/s" in screen_text(app), what="gen's chart")
        await snap(pilot, f"view_{view}_{size}")


async def test_sorted_and_filtered_snapshot():
    """The sort marked in the header and said under the table with the filter; reversed."""
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=SIZES["small"]) as pilot:
        feed_pinned(app)
        await settle(pilot)
        await pilot.press("O", "O", "slash", "g", "enter")  # by node (k9s: shift-o), pressed again: reversed
        await wait_until(pilot, lambda: "filter 'g'" in screen_text(app), what="the filter said")
        await snap(pilot, "view_jobs_sorted_filtered_small")


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("job", ["gen", "sglang-0"])
async def test_details_snapshot(job, size):
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=SIZES[size]) as pilot:
        feed_pinned(app)
        await settle(pilot)
        app.screen.table("jobs").move_cursor_to_key(f"gpu-a/{job}")
        await describe(pilot, tab="log")
        await wait_until(pilot, lambda: "tokens/s  now" in screen_text(app), what="the chart")
        await snap(pilot, f"details_{job}_{size}")


async def test_kill_dialog_snapshot():
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=SIZE) as pilot:
        feed_pinned(app)
        await settle(pilot)
        app.screen.table("jobs").move_cursor_to_key("gpu-a/gen")
        await pilot.press("ctrl+k")
        await wait_until(pilot, lambda: "Kill job" in screen_text(app), what="the kill dialog")
        await snap(pilot, "dialog_kill")


async def test_read_only_snapshot():
    app = pinned_app(read_only=True, initial_view="jobs")
    async with app.run_test(size=SIZE) as pilot:
        feed_pinned(app)
        await settle(pilot)
        await snap(pilot, "view_jobs_read_only")


@pytest.mark.parametrize("size", sorted(SIZES))
async def test_help_snapshot(size):
    app = pinned_app()
    async with app.run_test(size=SIZES[size]) as pilot:
        feed_pinned(app)
        await settle(pilot)
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: "gpudeck help" in screen_text(app), what="the help screen")
        await snap(pilot, f"help_{size}")


async def test_events_snapshot():
    """The timeline of both nodes merged, newest at the bottom, under the opening summary."""
    app = pinned_app(initial_view="events")
    async with app.run_test(size=SIZE) as pilot:
        feed_pinned(app)
        timeline = pinned_timeline()
        for node, events in timeline.items():
            app.post_message(EventsFetched(node, tuple(event_row(node, e) for e in events), events[-1]["seq"], True))
        rows = [event_row(n, e) for n, evs in timeline.items() for e in evs]
        app.state.timeline.summary = summarize(rows, PINNED_NOW - 8 * 3600, PINNED_NOW)
        await settle(pilot, lambda app: len(app.state.timeline) == len(rows))
        await snap(pilot, "view_events")
