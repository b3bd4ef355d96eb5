"""LogPanel: one job's log, its tail and then what is appended, as the follower sends it."""

from __future__ import annotations

from typing import Optional

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Log, Static

MAX_LINES = 5000


class LogPanel(Vertical):
    def __init__(self, *, id: Optional[str] = None, classes: Optional[str] = None) -> None:
        super().__init__(id=id, classes=classes)
        self.job: Optional[str] = None
        self.path: Optional[str] = None
        self.problem: Optional[str] = None
        self.fed = False  # the tail has arrived

    def compose(self) -> ComposeResult:
        yield Static("no job selected: pick one in the jobs view", id="log-title")
        yield Log(max_lines=MAX_LINES, auto_scroll=True, id="log")

    @property
    def log(self) -> Log:
        return self.query_one("#log", Log)

    def show_job(self, job: Optional[str]) -> None:
        """Start over with another job's log (the follower sends its tail next)."""
        if job == self.job:
            return
        self.job, self.path, self.problem, self.fed = job, None, None, False
        self.log.clear()
        self._title()

    def feed(self, text: str, reset: bool, path: Optional[str] = None) -> None:
        if reset:
            self.log.clear()
        if text:
            self.log.write(text)
        self.path = path or self.path
        if self.problem is not None or reset or not self.fed:
            self.fed = True
            self.problem = None
            self._title()

    def fetch_failed(self, error: str) -> None:
        self.problem = error
        self._title()

    @property
    def text(self) -> str:
        return "\n".join(self.log.lines)

    def _title(self) -> None:
        title = self.query_one("#log-title", Static)
        if self.job is None:
            title.update("no job selected: pick one in the jobs view")
            return
        where = f"  {self.path}" if self.path else ""
        status = f"  ✗ {self.problem} (retrying)" if self.problem else ("  following" if self.fed else "  waiting for it…")
        title.update(f"log of {self.job}{where}{status}")
