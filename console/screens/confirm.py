"""ConfirmScreen: a yes/no question before anything destructive."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from ..bindings import bindings


class ConfirmScreen(ModalScreen[bool]):
    """Dismissed with True when the operator confirms; the safe button has the focus."""

    BINDINGS = bindings("confirm")

    def __init__(self, title: str, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.title_text, self.question, self.yes = title, question, yes

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.question, id="question")
            with Horizontal(id="buttons"):
                yield Button(f"{self.yes} (y)", variant="error", id="yes")
                yield Button("Cancel (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = self.title_text
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
