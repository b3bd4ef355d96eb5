"""`gpudeck note`: the operator's note in the events timeline of one node or of every node,
shown by `events` and `events --json` and in the console's events view, sent to the
[[notify]] targets only when asked. Real CLI, real agents (two local nodes), a real watcher
and webhook receiver, and the console driven with Pilot."""

from __future__ import annotations

import asyncio
import json

import pytest

from support.tui import shell_job, wait_for_text, wait_until, write_fleet
from support.watch import gpudeck_watch, stop_watch

pytestmark = pytest.mark.system  # agents, a watcher, a webhook receiver, the console

WHY = "switched to B200 because the PRO 6000s made 400 tok/s, not the 900 the plan said"


def _fleet(tmp_path, receiver) -> tuple:
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'''
[defaults]
nvml = false
interval = 0.2

[[nodes]]
name = "a"
local = true
home = "{home_a}"

[[nodes]]
name = "b"
local = true
home = "{home_b}"

[[notify]]
url = "{receiver.url}"

[[jobs]]
name = "gen"
node = "a"
command = ["sleep", "600"]
''')
    return fleet, home_a, home_b


def _notes(fleet) -> list[dict]:
    r = gpudeck_watch("events", "--json", "--since", "1h", "-f", str(fleet))
    assert r.returncode == 0, r.stdout + r.stderr
    return [e for e in map(json.loads, r.stdout.splitlines()) if e["kind"] == "note"]


@pytest.mark.timeout(240)
def test_a_note_goes_into_every_node_s_timeline_or_its_job_s_and_is_notified_only_when_asked(tmp_path, receiver):
    fleet, home_a, home_b = _fleet(tmp_path, receiver)
    try:
        r = gpudeck_watch("note", "-f", str(fleet), WHY)
        assert r.returncode == 0, r.stdout + r.stderr
        assert sorted(r.stdout.splitlines()) == ["noted on a (event 1)", "noted on b (event 1)"], r.stdout
        notes = _notes(fleet)
        assert sorted(n["node"] for n in notes) == ["a", "b"] and {n["message"] for n in notes} == {WHY}
        assert all(n["job"] is None and "@" in n["details"]["by"] for n in notes)
        text = gpudeck_watch("events", "--since", "1h", "-f", str(fleet)).stdout
        assert sum(f"note           {WHY} (" in line for line in text.splitlines()) == 2, text

        # a watcher stays to deliver; a quiet note, then one about the job, to its node, notified
        for args in (("watch", "start", "--supervise", "none"), ("note", "--node", "b", "quiet: nobody is told"),
                     ("note", "--job", "gen", "--notify", "gen restarted by hand after the driver update")):
            r = gpudeck_watch(*args, "-f", str(fleet))
            assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.strip().startswith("noted on a (event ") and r.stdout.strip().endswith(", notified")
        got = receiver.wait(lambda ms: [m for m in ms if m.get("kind") == "note"], 60, what="the notified note")
        # the outbox sends oldest first: the quiet note, had it been queued, would have come before it
        assert [m["message"] for m in got] == ["gen restarted by hand after the driver update"]
        assert got[0]["node"] == "a" and got[0]["job"] == "gen"
        by_node = {}
        for n in _notes(fleet):
            by_node.setdefault(n["node"], []).append(n["message"])
        assert by_node == {"a": [WHY, "gen restarted by hand after the driver update"],
                           "b": [WHY, "quiet: nobody is told"]}
    finally:
        stop_watch(home_a)
        stop_watch(home_b)


@pytest.mark.parametrize("argv, message", [
    (["   "], "the note: 'text' is empty"),
    (["two\nlines"], "a note is one line"),
    (["--job", "nosuch", "x"], "nosuch"),
])
def test_a_note_that_cannot_be_written_says_why_and_exits_2(tmp_path, receiver, argv, message):
    fleet, home_a, home_b = _fleet(tmp_path, receiver)
    r = gpudeck_watch("note", "-f", str(fleet), *argv)
    assert r.returncode == 2 and message in r.stderr, r.stdout + r.stderr
    assert not (home_a / "events.jsonl").exists() and not (home_b / "events.jsonl").exists()


async def test_a_note_shows_in_the_console_s_events_view(tmp_path, fleet_home, state_home):
    from gpudeck.console.app import make_app

    fleet = write_fleet(tmp_path, fleet_home, [shell_job("gen", "sleep 600")])
    app = make_app(fleet, grace_s=2.0, events_poll_s=0.2, summary_wait_s=20.0)
    app.animation_level = "none"
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.state.timeline.summary is not None, what="the opening summary")
        await pilot.press("e")
        await wait_until(pilot, lambda: app.screen.active == "events", what="the events view")
        table = app.screen.query_one("#events-table")
        r = await asyncio.to_thread(gpudeck_watch, "note", "-f", str(tmp_path / "fleet.toml"), WHY)
        assert r.returncode == 0, r.stdout + r.stderr
        await wait_until(pilot, lambda: any(row.kind == "note" for row in table.rows()), what="the note's row")
        line = next(ln for ln in (await wait_for_text(pilot, WHY[:60])).splitlines() if WHY[:60] in ln)
        assert "note" in line and "local" in line
