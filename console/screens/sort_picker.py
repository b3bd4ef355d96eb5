"""SortPicker: htop's F6, "sort by": the view's columns, each with its shift+letter; `enter`
picks one (the column sorted now: its order flips), `escape` or F6 closes."""

from __future__ import annotations

from typing import Optional, Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ..bindings import bindings


class SortPicker(ModalScreen[Optional[str]]):
    """Dismissed with the field picked (``tokens``), or None."""

    BINDINGS = bindings("picker")

    def __init__(self, view: str, columns: Sequence[tuple[str, str, str]], current: Optional[str]) -> None:
        """``columns``: (field, its key, the line shown) for each sortable column of ``view``."""
        super().__init__()
        self.view, self.columns, self.current = view, list(columns), current

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield OptionList(*(Option(f"{key}  {line}", id=field) for field, key, line in self.columns),
                             id="sort-columns")

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = f"sort the {self.view} by"
        options = self.query_one(OptionList)
        fields = [f for f, _, _ in self.columns]
        if self.current in fields:
            options.highlighted = fields.index(self.current)
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_close(self) -> None:
        self.dismiss(None)
