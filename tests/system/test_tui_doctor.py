"""The console's doctor (`d` on a node, or the palette's "doctor NODE"): the checks of `gpudeck
doctor` through the node's real agent, in a screen with a summary over them; a node that
cannot be reached is said so, and the console goes on. One non-system test: a console that is
not connected says so.

The system tier's tests of this file (real processes and servers); the others are in
tests/tui/test_tui_doctor.py."""

from __future__ import annotations

import pytest

from gpudeck.console.app import make_app
from gpudeck.console.screens.doctor import DoctorScreen
from support.tui import closed_port, command, screen_text, shell_job, wait_for_text, wait_until, write_fleet
from support.tui_doctor import SIZE


def flat_text(app) -> str:
    """The screen's words in order, one space between: a line wrapped in its column reads on."""
    return " ".join(screen_text(app).replace("█", " ").split())


def extract_job(tmp_path) -> dict:
    """An extract job whose model is not where the fleet file says: the doctor's `model` check
    fails, with its fix."""
    return {"name": "ex", "kind": "extract", "model": str(tmp_path / "no-model"), "data": str(tmp_path / "d.jsonl"),
            "out": str(tmp_path / "out"), "layers": [1], "device": "cpu"}


@pytest.mark.system
async def test_colon_doctor_shows_a_nodes_checks_with_a_failed_model_and_its_fix(tmp_path, fleet_home):
    fleet = write_fleet(tmp_path, fleet_home, [extract_job(tmp_path)])
    app = make_app(fleet, log_poll_s=0.2)
    app.animation_level = "none"
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_until(pilot, lambda: "local" in app.client.links, what="the agent connected")
        await pilot.press("1")  # the fleet view: the cursor on the node
        await wait_for_text(pilot, "● local")
        await command(pilot, "doctor local")  # the command line (`:`), completed as typed
        screen = await wait_until(pilot, lambda: isinstance(app.screen, DoctorScreen) and app.screen,
                                  what="the doctor's screen")
        assert screen.node == "local"
        # the imports are timed in subprocesses of the node's python: allow a loaded machine its minutes
        await wait_until(pilot, lambda: screen.report is not None or screen.error is not None, timeout=300,
                         what="the node's answer")
        assert screen.error is None, screen.error
        fails = [c for c in screen.report.checks if c.verdict.value == "fail"]
        assert any(c.name == "model" and c.job == "ex" for c in fails), screen.report.checks
        # each line on screen (verdict, check, what was found), the fix beside a fail
        flat = await wait_until(pilot, lambda: "fix: copy the model to" in (t := flat_text(app)) and t,
                                what="the model's line and its fix")
        assert "fail model ex the model path" in flat and "does not exist" in flat
        assert "ok open files" in flat or "warn open files" in flat
        # the summary at the top counts them
        head = next(ln for ln in screen_text(app).splitlines() if "local: not ready" in ln)
        assert f"{len(fails)} fail" in head and "ok)" in head
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, DoctorScreen), what="the screen closed")
        # the palette's way to the same checks
        await pilot.press("ctrl+p")
        await pilot.press(*"doctor local")
        await wait_for_text(pilot, "check the node before a run")
        await pilot.press("enter")
        again = await wait_until(pilot, lambda: isinstance(app.screen, DoctorScreen) and app.screen is not screen
                                 and app.screen, what="the doctor's screen again")
        # its answer before the console closes: no check left running on the node
        await wait_until(pilot, lambda: again.done, timeout=300, what="the node's second answer")
        assert again.node == "local" and again.report is not None


@pytest.mark.system
async def test_D_on_a_node_that_cannot_be_reached_says_why_and_the_console_goes_on(tmp_path, fleet_home):
    extra = f'[[nodes]]\nname = "far"\nhost = "127.0.0.1"\nport = {closed_port()}\nconnect_timeout = 3\n'
    fleet = write_fleet(tmp_path, fleet_home, [shell_job("idle", "sleep 600")], extra)
    app = make_app(fleet, initial_view="fleet")
    app.animation_level = "none"
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_for_text(pilot, "✗ far  unreachable since")
        table = app.screen.table("fleet")
        table.focus()
        assert table.move_cursor_to_key("node:far")
        await pilot.press("D")  # the selected row's node
        screen = await wait_until(pilot, lambda: isinstance(app.screen, DoctorScreen) and app.screen,
                                  what="the doctor's screen")
        text = await wait_for_text(pilot, "far: no checks")
        assert screen.node == "far" and screen.error is not None and "refused" in screen.error
        assert "refused" in text and "the console goes on" in text
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, DoctorScreen), what="the screen closed")
        # still running: the local node's job is shown, the views still switch
        await pilot.press("2")
        await wait_for_text(pilot, "idle")
