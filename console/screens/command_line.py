"""CommandLine: k9s's and vim's `:` line at the bottom of the screen, with completion.

While it is open every letter is text: it is a modal screen of its own, so no key of the
screens under it fires (`:jobs` never sorts by anything). `tab` completes (the command, a
job after `:logs`, a node after `:doctor`), the commands that match are listed over it,
`enter` runs it, `escape` closes it. What a command does is the app's (``run_command``)."""

from __future__ import annotations

from typing import Sequence

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Input, Static

from ..bindings import bindings

SHOWN = 6  # the matching commands listed over the line


def completion(text: str, candidates: Sequence[str]) -> str:
    """``text`` completed: to the one candidate it starts, or to what all those it starts share."""
    low = text.lower()
    matches = [c for c in candidates if c.lower().startswith(low)]
    if not matches:
        return text
    if len(matches) == 1:
        return matches[0]
    first, last = min(matches, key=str.lower), max(matches, key=str.lower)
    n = 0
    while n < min(len(first), len(last)) and first[n].lower() == last[n].lower():
        n += 1
    return first[:n] if n > len(text) else text


class CommandLine(ModalScreen[str]):
    """Dismissed with the command typed (without its `:`), or "" when closed."""

    BINDINGS = bindings("command")

    def __init__(self, candidates: Sequence[str]) -> None:
        super().__init__()
        self.candidates = list(candidates)

    def compose(self) -> ComposeResult:
        with Vertical(id="command-box"):
            yield Static(id="command-hints", markup=False)
            with Horizontal(id="command-row"):
                yield Static(":", id="command-colon")
                yield Input(placeholder="jobs fleet events alerts logs JOB doctor NODE plans q  (tab completes)",
                            suggester=SuggestFromList(self.candidates, case_sensitive=False), id="command",
                            select_on_focus=False)

    def on_mount(self) -> None:
        self.query_one(Input).focus()
        self._hint("")

    def on_input_changed(self, event: Input.Changed) -> None:
        self._hint(event.value)

    def _hint(self, text: str) -> None:
        low = text.strip().lower()
        matches = [c for c in self.candidates if c.lower().startswith(low)] if low else []
        more = f"  … {len(matches) - SHOWN} more" if len(matches) > SHOWN else ""
        hints = self.query_one("#command-hints", Static)
        hints.update("  ".join(matches[:SHOWN]) + more)
        hints.set_class(bool(matches), "-shown")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip().removeprefix(":").strip())

    def action_complete(self) -> None:
        line = self.query_one(Input)
        done = completion(line.value, self.candidates)
        if done != line.value:
            line.value = done
            line.cursor_position = len(done)

    def action_close(self) -> None:
        self.dismiss("")
