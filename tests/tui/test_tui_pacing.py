"""How often the console redraws (console/pacing.py): no more often than a redraw's cost
allows, snapshots that arrive meanwhile drawn together, a key drawn at once. Redraws are
counted through the pacer (``app.pacer.redraws``), never timed: the pacer's own rule is
tested on a clock the test moves.

The tui tier's tests of this file (the pilots, no process); the others are in
tests/unit/test_tui_pacing.py."""

from __future__ import annotations

import dataclasses
import time

from gpudeck.console.app import make_app
from gpudeck.console.messages import SnapshotReceived
from support.tui import PINNED_NOW, feed_pinned, pinned_events, pinned_fleet, wait_until


# ---------------------------------------------------------------- the app, through the pacer's count


def pinned_app(**kw):
    app = make_app(pinned_fleet(), connect=False, clock=lambda: PINNED_NOW, tick_s=0, initial_view="jobs", **kw)
    app.animation_level = "none"
    return app


def gen_snapshots(n: int) -> list:
    """``n`` newer snapshots of node gpu-a, job gen one item further in each."""
    first = next(e for e in pinned_events() if getattr(e, "node", None) == "gpu-a" and hasattr(e, "jobs"))
    out = []
    for k in range(1, n + 1):
        jobs = [dataclasses.replace(j, progress=dataclasses.replace(j.progress, done=j.progress.done + k))
                if j.name == "gen" else j for j in first.jobs]
        out.append(dataclasses.replace(first, seq=first.seq + k, jobs=jobs))
    return out


def drawn_done(app) -> int:
    row = next((r for r in app.screen.table("jobs").rows() if r.name == "gen"), None)
    return row.done if row is not None and row.done is not None else -1


async def test_snapshots_arriving_one_by_one_are_drawn_together_once_an_interval():
    # redraws may take 0.1% of the time: whatever one costs here, they come once a second
    app = pinned_app(redraw_share=0.001, refresh_most_s=1.0)
    async with app.run_test(size=(120, 40)) as pilot:
        feed_pinned(app)
        await wait_until(pilot, lambda: drawn_done(app) > 0, what="the pinned fleet drawn")
        await wait_until(pilot, lambda: app.pacer.interval_s == 1.0, what="the first redraw's cost measured")
        before, began = app.pacer.redraws, time.monotonic()
        snaps = gen_snapshots(50)
        for s in snaps:  # one at a time, each handled before the next comes, as out-of-phase agents send them
            app.post_message(SnapshotReceived(s))
            await pilot.pause()
        assert app.state.nodes["gpu-a"].snapshot.seq == snaps[-1].seq  # every one applied as it came
        last = snaps[-1].jobs[1].progress.done
        await wait_until(pilot, lambda: drawn_done(app) == last, what="the last snapshot drawn")
        # however long the arrivals took on this machine, one redraw per interval they spanned
        # (and the one that draws the last), never one per snapshot
        intervals = (time.monotonic() - began) / app.pacer.interval_s
        redraws = app.pacer.redraws - before
        assert redraws <= 2 + intervals and redraws < len(snaps) / 4, (redraws, intervals)


async def test_a_key_draws_at_once_without_waiting_for_the_paced_redraw():
    app = pinned_app(refresh_s=3600.0)  # the paced redraw would come in an hour
    async with app.run_test(size=(120, 40)) as pilot:
        feed_pinned(app)
        await pilot.pause()
        app.refresh_views()  # the pinned fleet drawn, as at start-up
        await wait_until(pilot, lambda: drawn_done(app) > 0, what="the pinned fleet drawn")
        (snap,) = gen_snapshots(1)
        app.post_message(SnapshotReceived(snap))
        await wait_until(pilot, lambda: app.state.nodes["gpu-a"].snapshot.seq == snap.seq, what="the snapshot applied")
        redraws = app.pacer.redraws
        assert drawn_done(app) != snap.jobs[1].progress.done  # applied, not yet drawn: paced
        await pilot.press("s")  # sort: the screen draws the state as it is now
        assert drawn_done(app) == snap.jobs[1].progress.done and app.pacer.redraws == redraws
