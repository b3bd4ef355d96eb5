"""PlansScreen: `p`, the fleet file's [[plans]] side by side, as `gpudeck plan compare -f FLEET`
prints them (the same table, from ``commands.plan.compare_plans``): the time with its interval,
dollars in all, per million output tokens and per useful completion, projected bytes; the
cheaper and the faster fleet. With fewer than two plans, or plans that cannot be compared,
it says why and what to declare.

The app reads the plans in a worker and hands the comparison down (``show``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from textual.app import ComposeResult
from textual.containers import ScrollableContainer, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from ..bindings import bindings

if TYPE_CHECKING:
    from ..commands.plan import Comparison

VERDICTS = ("cheaper:", "faster:")  # the table's last lines, the answers: in bold


class PlansScreen(ModalScreen[None]):
    BINDINGS = bindings("dialog")

    def __init__(self, fleet_name: str) -> None:
        super().__init__()
        self.fleet_name = fleet_name
        self.comparison: Optional["Comparison"] = None

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            with ScrollableContainer():
                yield Static(Content(f"reading the plans of {self.fleet_name}…"), id="plans-table")
            yield Static("the plans: the fleet file's [[plans]], read again at each p", id="hint", markup=False)

    composed = False
    """True once the widgets are mounted: a comparison that comes earlier is drawn then."""

    def on_mount(self) -> None:
        self.composed = True
        dialog = self.query_one("#dialog")
        dialog.border_title, dialog.border_subtitle = "plans compared", "escape: close  ·  ← →: scroll"
        if self.comparison is not None:
            self.show(self.comparison)

    def show(self, comparison: "Comparison") -> None:
        self.comparison = comparison
        if not self.composed:
            return
        table = self.query_one("#plans-table", Static)
        if comparison.doc is None:
            table.set_class(False, "-table")
            table.update(Content.assemble(("no comparison", "$text-warning bold"), "\n\n", comparison.error or ""))
            return
        table.set_class(True, "-table")
        table.update(Content("\n").join(
            Content.styled(ln, "bold") if ln.startswith(VERDICTS) else Content(ln)
            for ln in comparison.text.splitlines()))

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
