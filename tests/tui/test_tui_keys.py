"""The keys k9s, htop and vim hands press (console/keymap.py), on the pinned fleet of the
snapshot tests: nothing connected, the clock pinned. The command line and its completion,
j k g G, ctrl-k, shift+letter sorts and the F6 picker, F-keys, describe on any row, ack, and
the user's [keys]. The same keys typed in a real terminal: tests/e2e/test_tui_keys.py."""

from __future__ import annotations

import time

import pytest

from gpudeck.console.app import make_app
from gpudeck.console.screens.command_line import CommandLine, completion
from gpudeck.console.screens.confirm import ConfirmScreen
from gpudeck.console.screens.describe import DescribeScreen
from gpudeck.console.screens.help import HelpScreen
from gpudeck.console.screens.sort_picker import SortPicker
from support.tui import (PINNED_NOW, command, confirm_dialog, describe, feed_pinned, pinned_fleet, screen_text,
                         wait_until)


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


async def settle(pilot):
    await wait_until(pilot, lambda: pilot.app.state.totals().nodes_total == 2 and
                     pilot.app.state.nodes["gpu-b"].error is not None, what="the pinned state")
    pilot.app.refresh_views()
    await pilot.pause()


def cursor_name(app) -> str:
    return getattr(app.screen.table(app.screen.active).cursor_row, "name", None)


async def test_letters_typed_on_the_command_line_are_text_not_keys():
    """`:` then "sort rk ed Kl" would sort, move, describe and kill on the views; on the line they are
    text, and an unknown command says so. Then `:fleet` shows the fleet."""
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        feed_pinned(app)
        await settle(pilot)
        main = app.screen
        before = (dict(main.sorts), dict(main.reversed), main.table("jobs").cursor_key)
        await command(pilot, "sort rk ed KlL")
        assert (main.sorts, main.reversed, main.table("jobs").cursor_key) == before
        assert app.screen is main and main.active == "jobs"
        await wait_until(pilot, lambda: ":sort rk ed KlL is no command" in screen_text(app), what="the line's error")
        await command(pilot, "fleet")
        await wait_until(pilot, lambda: main.active == "fleet", what="the fleet view")


async def test_tab_completes_commands_jobs_and_nodes():
    assert completion("lo", ["logs", "logs gen", "jobs"]) == "logs"
    assert completion("logs s", ["logs sglang-0", "logs gen"]) == "logs sglang-0"
    assert completion("logs e", ["logs extract", "logs extract-2"]) == "logs extract"
    assert completion("x", ["jobs"]) == "x"
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        feed_pinned(app)
        await settle(pilot)
        line = await command(pilot, "logs ge", enter=False)
        assert "logs gen" in screen_text(app)  # the commands that match, listed over the line
        await pilot.press("tab")
        await wait_until(pilot, lambda: line.query_one("#command").value == "logs gen", what="completed to a job")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen.active == "logs" and app.screen.log_job == "gen",
                         what="the logs view on gen")
        await command(pilot, "doctor gpu-")  # not a node: said, nothing opened
        await wait_until(pilot, lambda: "no node 'gpu-' in this fleet" in screen_text(app), what="the refusal")


@pytest.mark.parametrize("how", ["colon q", "f10"])
async def test_colon_q_and_f10_quit(how):
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(80, 24)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        await describe(pilot)  # from a describe too
        if how == "f10":
            await pilot.press("f10")
        else:
            await command(pilot, "q", enter=False)
            await pilot.press("enter")
        await wait_until(pilot, lambda: not app.is_running, what=f"{how} quitting")


async def test_j_and_k_move_g_and_G_jump_and_ctrl_k_asks_to_kill():
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(120, 40)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        assert cursor_name(app) == "audit"
        await pilot.press("j", "j")
        await wait_until(pilot, lambda: cursor_name(app) == "gen", what="j j: two rows down")
        await pilot.press("k")
        await wait_until(pilot, lambda: cursor_name(app) == "extract", what="k: a row up, no question")
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("G")
        await wait_until(pilot, lambda: cursor_name(app) == "sglang-0", what="G: the last row")
        await pilot.press("g")
        await wait_until(pilot, lambda: cursor_name(app) == "audit", what="g: the first row")
        await pilot.press("j", "j", "ctrl+k")
        await confirm_dialog(pilot, "the kill question")
        assert "Kill job gen on gpu-a?" in screen_text(app)
        await pilot.press("n")
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="no")
        await pilot.press("f9")  # htop's kill asks too
        await confirm_dialog(pilot, "the kill question (F9)")
        await pilot.press("escape")


async def test_shift_letter_sorts_by_its_column_and_again_flips_it_and_f6_picks_one():
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(120, 40)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        table = app.screen.table("jobs")
        await pilot.press("K")  # TOK/S, the fastest first
        await wait_until(pilot, lambda: [r.name for r in table.rows()][:2] == ["sglang-0", "gen"], what="by tok/s")
        assert "TOK/S▼" in screen_text(app)
        await pilot.press("K")
        await wait_until(pilot, lambda: [r.name for r in table.rows()][-2:] == ["gen", "sglang-0"],
                         what="by tok/s, the slowest first")
        assert "TOK/S▲" in screen_text(app)
        await pilot.press("E")  # STATE: what needs the operator first
        await wait_until(pilot, lambda: table.rows()[0].name == "extract", what="by state: the failed job first")
        await pilot.press("f6")
        picker = await wait_until(pilot, lambda: isinstance(app.screen, SortPicker) and app.screen, what="F6")
        text = screen_text(app)
        assert "K  TOK/S" in text and "H  ETA" in text and "STATE        ▲ state   sorted now ▲" in text, text
        await pilot.press("enter")  # it opens on the column sorted now (STATE): picked again, it flips
        await wait_until(pilot, lambda: picker not in app.screen_stack, what="the picker closed")
        assert app.screen.sorts["jobs"] == "state" and app.screen.reversed["jobs"]
        await pilot.press("f6")
        picker = await wait_until(pilot, lambda: isinstance(app.screen, SortPicker) and app.screen, what="F6")
        await pilot.press("down", "enter")  # the next one: K TOK/S, the fastest first
        await wait_until(pilot, lambda: picker not in app.screen_stack, what="the picker closed")
        assert app.screen.sorts["jobs"] == "tokens/s" and not app.screen.reversed["jobs"]
        await pilot.press("4", "O")  # the alerts by node
        await wait_until(pilot, lambda: app.screen.sorts["alerts"] == "node", what="the alerts by node")
        await wait_until(pilot, lambda: "NODE▲" in screen_text(app), what="NODE marked")


async def test_enter_or_d_on_an_alert_shows_its_whole_reason_and_its_start_time():
    """At 80 columns an unreachable node's reason is cut in the table; described, it is whole, with
    the date and time its alert began."""
    app = pinned_app(initial_view="alerts")
    async with app.run_test(size=(80, 24)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        reason = "node gpu-b unreachable: link lost: no word from the agent for 45 s"
        table = app.screen.table("alerts")
        assert reason not in screen_text(app)  # cut
        for key in ("enter", "d"):
            table.move_cursor_to_key(next(r.key for r in table.rows() if r.kind.value == "unreachable"))
            screen = await describe(pilot, key=key)
            text = " ".join(screen_text(app).split())
            assert reason in text, text
            assert "began 2025-11-30 11:56:00 (4m 00s ago)" in text, text
            await pilot.press("escape")
            await wait_until(pilot, lambda: screen not in app.screen_stack, what="back to the alerts")


async def test_describe_says_a_gpu_and_its_processes_whole():
    app = pinned_app(initial_view="fleet")
    async with app.run_test(size=(80, 24)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        table = app.screen.table("fleet")
        table.move_cursor_to_key("gpu:gpu-a:0")
        await describe(pilot, key="d")
        text = screen_text(app)
        assert "GPU 0 of gpu-a" in text and "NVIDIA H200" in text
        assert "python -m sglang.launch_server --model /models/Qwen3-8B --tp 2" in " ".join(text.split())


async def test_ack_asks_first():
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(120, 40)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        app.screen.table("jobs").move_cursor_to_key("gpu-a/extract")
        await pilot.press("A")
        await confirm_dialog(pilot, "the ack question")
        assert "Acknowledge that job extract on gpu-a gave up?" in " ".join(screen_text(app).split())
        await pilot.press("n")


async def test_the_users_keys_move_a_key_back():
    """[keys] with kill on k again (and up on the arrow alone): k asks to kill, the help says so."""
    app = pinned_app(initial_view="jobs", keymap={"job.kill": "k", "cursor.up": "up", "scroll.up": "up"})
    async with app.run_test(size=(120, 40)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        await pilot.press("j", "k")
        await confirm_dialog(pilot, "the kill question on k")
        await pilot.press("n")
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="no")
        footer = screen_text(app).splitlines()[-1]
        assert "k Kill" in footer and "^k" not in footer, footer
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        assert any(line.split()[:2] == ["k", "kill"] for line in screen_text(app).replace("█", " ").splitlines()
                   if line.split()), screen_text(app)


async def test_the_command_line_is_not_opened_over_a_question():
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(120, 40)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        await pilot.press("ctrl+k")
        await confirm_dialog(pilot, "the kill question")
        await pilot.press("colon")
        await pilot.pause()
        assert not isinstance(app.screen, CommandLine)
        await pilot.press("escape")
        await describe(pilot)
        assert isinstance(app.screen, DescribeScreen)
