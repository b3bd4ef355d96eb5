"""The log panel when a follower's message arrives as its screen is taken down (the app
closing, a screen popped): the panel's own widgets are gone first, and the message is
dropped, not raised into the app (which ended the console with NoMatches '#log')."""

from __future__ import annotations

from textual.app import App, ComposeResult

from gpudeck.console.widgets.log_panel import LogPanel


class PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LogPanel(id="log-panel")


async def test_a_message_for_a_panel_being_taken_down_is_dropped():
    app = PanelApp()
    async with app.run_test() as pilot:
        panel = app.query_one(LogPanel)
        panel.show_job("gen")
        panel.feed("one\ntwo\n", True, "/home/jobs/gen/job.log")
        await pilot.pause()
        assert panel.text.splitlines()[:2] == ["one", "two"] and not panel.taken_down()
        await panel.query_one("#log").remove()  # as the screen's teardown removes the children first
        await panel.query_one("#log-title").remove()
        assert panel.taken_down()
        panel.feed("three\n", False)  # raised NoMatches before
        panel.fetch_failed("connection lost")
        await pilot.pause()
        assert panel.problem == "connection lost"
