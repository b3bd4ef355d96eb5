"""ErrorScreen: an error the operator must read, with what to do about it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..bindings import bindings


class ErrorScreen(ModalScreen[None]):
    BINDINGS = bindings("dialog")

    def __init__(self, title: str, message: str) -> None:
        super().__init__()
        self.title_text, self.message = title, message

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            with VerticalScroll():
                yield Static(self.message, id="error-message", markup=False)
            yield Static("escape: close", id="hint")

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = self.title_text

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
