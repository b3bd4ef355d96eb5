"""The events view and "since you last looked", driven with Pilot against a real local agent
whose watcher writes the timeline: a real job that dies, a real webhook receiver whose URL
holds a token, the console's last look kept in a real file ($XDG_STATE_HOME, per test)."""

from __future__ import annotations

import re
import time

import pytest

from gpudeck.console.actions import JobOp
from gpudeck.console.app import make_app
from gpudeck.console.looked import LookedStore, fleet_key
from gpudeck.console.since import since_label
from support.tui import (job_row, notifications_text, shell_job, wait_for_text, wait_until,
                         write_fleet)
from support.watch import TOKEN

pytestmark = pytest.mark.system  # the console over real agents, and a webhook receiver

SIZE = (120, 40)


def console(tmp_path, home, jobs, extra: str = ""):
    """The console on a fleet of shell jobs; its notifications and bells counted."""
    fleet = write_fleet(tmp_path, home, jobs, extra)
    app = make_app(fleet, grace_s=2.0, events_poll_s=0.2, summary_wait_s=20.0)
    app.animation_level = "none"
    app.told, app.bells = [], []
    notify = app.notify

    def told(message, **kw):
        app.told.append((kw.get("title", ""), message, kw.get("severity", "information")))
        notify(message, **kw)

    app.notify = told
    app.bell = lambda: app.bells.append(time.time())
    return app


async def crash(pilot, name: str = "crash") -> None:
    app = pilot.app
    await wait_until(pilot, lambda: job_row(app, name) and job_row(app, name).state == "not_started",
                     what="the job declared")
    app.run_job_action(JobOp.LAUNCH, name, quiet=True)


def died(app):
    return [t for t in app.told if t[0].endswith(": died (crash)")]


async def test_a_job_that_dies_is_a_row_one_notification_and_one_bell(tmp_path, fleet_home, receiver):
    notify = f'[[notify]]\nurl = "{receiver.url}"\nformat = "slack"\n'
    app = console(tmp_path, fleet_home, [shell_job("crash", "echo boom; exit 1")], notify)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        # the first look at this fleet: the last 8 hours, where nothing happened
        await wait_until(pilot, lambda: app.state.timeline.summary is not None, what="the opening summary")
        assert app.state.timeline.summary.startswith("nothing happened since ")
        await crash(pilot)
        await pilot.press("e")  # at once: the view the console opened on must not take it back
        await wait_until(pilot, lambda: app.screen.active == "events", what="the Events view after e")
        table = app.screen.query_one("#events-table")
        await wait_until(pilot, lambda: any(r.kind == "died" for r in table.rows()), what="the died row")
        text = await wait_for_text(pilot, "job crash died (exit code 1)")
        line = next(ln for ln in text.splitlines() if "job crash died" in ln)
        assert "local" in line and "died" in line and "crash" in line
        # the summary over the timeline, said as of the opening: the died row under it came later
        assert re.search(r"on opening \(\d\d:\d\d:\d\d\): nothing happened since", text), text
        assert table.cursor_key == table.rows()[-1].key  # newest at the bottom, followed
        await wait_until(pilot, lambda: died(app) and app.bells, what="the notification and the bell")
        assert died(app) == [("local: died (crash)", "job crash died (exit code 1) on attempt 1", "error")]
        # the watcher posts it to the webhook and says so in the timeline: still one of each,
        # and the webhook's token is nowhere on screen
        await wait_until(pilot, lambda: any(r.kind == "notified" for r in table.rows()), what="the notified row")
        assert len(died(app)) == 1 and len(app.bells) == 1
        assert app.screen.active == "events", app.screen.active
        text = await wait_for_text(pilot, "died sent to slack http://127.0…/…")  # drawn at the next refresh
        assert TOKEN not in text and not any(TOKEN in r.message for r in table.rows())
        assert not any(TOKEN in m for _, m, _ in app.told)


async def test_opening_says_what_happened_since_the_last_look_without_a_bell(tmp_path, fleet_home, state_home):
    jobs = [shell_job("crash", "echo boom; exit 1")]
    before = time.time() - 60
    first = console(tmp_path, fleet_home, jobs)
    async with first.run_test(size=SIZE, notifications=True) as pilot:
        await crash(pilot)
        await wait_until(pilot, lambda: died(first), what="the job dying")
    key = fleet_key(str(tmp_path / "fleet.toml"))
    store = LookedStore()
    assert store.path.is_relative_to(state_home) and store.last(key) >= before + 60  # the console's look, kept
    store.record(key, before)  # as if this laptop last looked a minute before the death

    second = console(tmp_path, fleet_home, jobs)
    async with second.run_test(size=SIZE, notifications=True) as pilot:
        said = f"since {since_label(before, time.time())}: crash died"
        await wait_until(pilot, lambda: second.state.timeline.summary == said, what=repr(said))
        assert ("since you last looked", said, "information") in second.told
        await wait_until(pilot, lambda: said in notifications_text(second), what="the summary shown")
        await pilot.press("5")
        await wait_for_text(pilot, said)  # over the events view too
        await wait_for_text(pilot, "job crash died (exit code 1)")  # the row, from the backlog
        assert not died(second) and not second.bells  # the backlog rings no bell
    assert LookedStore().last(key) > before  # this look is remembered for the next one


async def test_a_broken_last_look_file_is_a_warning_and_the_view_is_in_help_and_palette(tmp_path, fleet_home,
                                                                                          state_home):
    (state_home / "gpudeck").mkdir(parents=True)
    (state_home / "gpudeck" / "last-looked.json").write_text('{"fleets": ')
    app = console(tmp_path, fleet_home, [shell_job("idle", "sleep 600")])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_until(pilot, lambda: app.state.timeline.summary is not None, what="the opening summary")
        assert app.state.timeline.summary.startswith("nothing happened since")
        assert any(t == "last look forgotten" and "looking back 8 h" in m for t, m, _ in app.told)
        # the view is in the help and the command palette too
        await pilot.press("question_mark")
        await wait_for_text(pilot, "the events: the nodes' timeline")
        await pilot.press("escape")
        await pilot.press("ctrl+p")
        await pilot.press(*"view events")
        await wait_for_text(pilot, "the nodes' timeline: deaths, restarts")
        await pilot.press("enter")
        await wait_until(pilot, lambda: getattr(app.screen, "active", None) == "events", what="the events view")
        await wait_for_text(pilot, "nothing happened since")  # the summary over it
    assert LookedStore().last(fleet_key(str(tmp_path / "fleet.toml"))) is not None  # replaced by a good one
