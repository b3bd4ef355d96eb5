"""DoctorScreen: `d` on a node, the checks of `gpudeck doctor` (one line each: ok, warn or fail,
what was found, and the fix beside each that is not ok), under a summary.

The app sends ``ops.Doctor`` in a worker and hands the answer down (``show_report``), or why
there is none (``show_error``); until then the screen says it is checking. Escape closes it;
an answer that comes after is a notification."""

from __future__ import annotations

from typing import Optional

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from ..bindings import bindings

from ...agents.contract.ops import Check, DoctorReport
from ...agents.contract.vocab import Verdict
from ..commands.doctor import check_name, counts

STYLES = {Verdict.OK: "$text-success", Verdict.WARN: "$text-warning bold", Verdict.FAIL: "$text-error bold"}


def summary(node: str, report: DoctorReport) -> Content:
    """``local: 1 fail, 2 warn, 8 ok``, in the colour of the worst check."""
    worst = report.worst
    verdict = {Verdict.OK: "ready", Verdict.WARN: "ready, with warnings", Verdict.FAIL: "not ready"}[worst]
    return Content.assemble((f"{node}: {verdict}", STYLES[worst]), f"  ({counts(report)})")


class CheckLine(Horizontal):
    """One check in three columns: its verdict, what was checked, and what was found with the
    fix under it (a warn or a fail); a long line wraps inside its own column."""

    def __init__(self, check: Check) -> None:
        super().__init__(classes="check")
        self.check = check

    def compose(self) -> ComposeResult:
        c = self.check
        yield Static(Content.styled(c.verdict.value, STYLES[c.verdict]), classes="verdict")
        yield Static(Content.styled(check_name(c), "bold"), classes="name")
        found: list[str | tuple[str, str]] = [c.detail]
        if c.fix and c.verdict is not Verdict.OK:
            found += ["\n", ("fix: ", STYLES[c.verdict]), c.fix]
        yield Static(Content.assemble(*found), classes="found")


class DoctorScreen(ModalScreen[None]):
    BINDINGS = bindings("dialog")

    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node
        self.report: Optional[DoctorReport] = None
        self.error: Optional[str] = None

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(id="doctor-summary")
            with VerticalScroll(id="doctor-checks"):
                yield Static(id="doctor-note")

    composed = False
    """True once the widgets are mounted: an answer that comes earlier is drawn then."""

    def on_mount(self) -> None:
        self.composed = True
        dialog = self.query_one("#dialog")
        dialog.border_title, dialog.border_subtitle = f"doctor: {self.node}", "escape: close"
        self._draw()

    @property
    def done(self) -> bool:
        """The node answered, or it is known why it will not."""
        return self.report is not None or self.error is not None

    def show_report(self, report: DoctorReport) -> None:
        self.report, self.error = report, None
        self._draw()

    def show_error(self, error: str) -> None:
        self.report, self.error = None, error
        self._draw()

    def _draw(self) -> None:
        if not self.composed:
            return
        head, note = self.query_one("#doctor-summary", Static), self.query_one("#doctor-note", Static)
        if self.error is not None:
            head.update(Content.styled(f"{self.node}: no checks", STYLES[Verdict.FAIL]))
            note.update(Content.assemble(self.error, "\n\n", ("the console goes on; `gpudeck doctor --node "
                                                             f"{self.node}` runs the same checks", "$text-muted")))
        elif self.report is None:
            head.update(Content(f"{self.node}: checking…"))
            note.update(Content.styled("python, torch and CUDA (timed imports: they may take a minute), the "
                                       "driver, the models, disk, S3, the clock, containment, limits",
                                       "$text-muted"))
        else:
            head.update(summary(self.node, self.report))
            note.display = False
            self.query_one("#doctor-checks", VerticalScroll).mount_all(CheckLine(c) for c in self.report.checks)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
