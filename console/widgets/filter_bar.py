"""FilterBar: the text the active view is filtered by; hidden until `/`."""

from __future__ import annotations

from textual.message import Message
from textual.widgets import Input

from ..bindings import bindings


class FilterBar(Input):
    BINDINGS = bindings("filter")

    class Closed(Message):
        """The operator is done typing; ``cleared`` when escape emptied the filter."""

        def __init__(self, cleared: bool) -> None:
            super().__init__()
            self.cleared = cleared

    def __init__(self) -> None:
        super().__init__(placeholder="filter: a job, node, kind or state (enter: keep, escape: clear)",
                         id="filter")

    @property
    def is_open(self) -> bool:
        """Shown, and the keys typed are its own until enter or escape."""
        return self.has_class("-shown")

    def open(self, value: str) -> None:
        self.value = value
        self.add_class("-shown")
        self.focus()

    def action_close(self) -> None:
        self.blur()  # now, not when Closed is handled: a key typed right after is the view's, never the bar's
        self.value = ""
        self.remove_class("-shown")
        self.post_message(self.Closed(cleared=True))

    async def action_submit(self) -> None:
        self.blur()
        self.remove_class("-shown")
        self.post_message(self.Closed(cleared=False))
