"""The console's doctor (`:doctor NODE`, `D` on a row, or the palette's "doctor NODE"): the checks of `gpudeck
doctor` through the node's real agent, in a screen with a summary over them; a node that
cannot be reached is said so, and the console goes on. One non-system test: a console that is
not connected says so.

The tui tier's tests of this file (the pilots, no process); the others are in
tests/system/test_tui_doctor.py."""

from __future__ import annotations

from gpudeck.console.app import make_app
from gpudeck.console.screens.doctor import DoctorScreen
from gpudeck.remote.fleet import parse_fleet
from support.tui import command, wait_for_text, wait_until
from support.tui_doctor import SIZE


async def test_a_console_that_is_not_connected_says_so(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text('[defaults]\nnvml = false\n')
    app = make_app(parse_fleet(path.read_text(), str(path)), connect=False, tick_s=0)
    app.animation_level = "none"
    async with app.run_test(size=SIZE) as pilot:
        await command(pilot, "doctor")  # a fleet of one node: that node, whatever the cursor is on
        await wait_until(pilot, lambda: isinstance(app.screen, DoctorScreen), what="the doctor's screen")
        await wait_for_text(pilot, "this console is not connected to the fleet")
