"""LogPanel: one job's log, its tail and then what is appended, as the follower sends it."""

from __future__ import annotations

from typing import Optional

from rich.highlighter import Highlighter
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Log, Static

from ..bindings import bindings

MAX_LINES = 5000


class SearchHighlighter(Highlighter):
    """Marks every occurrence of the searched text (any case)."""

    def __init__(self, term: str) -> None:
        self.term = term

    def highlight(self, text: Text) -> None:
        if self.term:
            text.highlight_words([self.term], "black on yellow", case_sensitive=False)


class KeyedLog(Log):
    """A log that j k g G scroll, as the arrows and Home End do (console/keymap.py)."""

    BINDINGS = bindings("scroll")


class LogPanel(Vertical):
    def __init__(self, *, id: Optional[str] = None, classes: Optional[str] = None) -> None:
        super().__init__(id=id, classes=classes)
        self.job: Optional[str] = None
        self.path: Optional[str] = None
        self.problem: Optional[str] = None
        self.final = False  # the problem is the node's refusal: not retried
        self.fed = False  # the tail has arrived
        self.term = ""  # what `/` searches for
        self.match: Optional[int] = None  # the line of the match shown, in ``matches``

    def compose(self) -> ComposeResult:
        yield Static("no job selected: pick one in the jobs view", id="log-title")
        yield KeyedLog(max_lines=MAX_LINES, auto_scroll=True, id="log")

    @property
    def log_widget(self) -> Log:
        """The panel's Log (not ``log``: that is Textual's own logger on every widget)."""
        return self.query_one("#log", Log)

    def show_job(self, job: Optional[str]) -> None:
        """Start over with another job's log (the follower sends its tail next)."""
        if job == self.job:
            return
        self.job, self.path, self.problem, self.fed, self.final = job, None, None, False, False
        self.log_widget.clear()
        self._title()

    def taken_down(self) -> bool:
        """Whether the panel's widgets are gone: its screen is closing (or the app), and a
        follower's message that arrives now has nowhere to go."""
        return not self.query("#log") or not self.query("#log-title")

    def feed(self, text: str, reset: bool, path: Optional[str] = None) -> None:
        if self.taken_down():
            return
        if reset:
            self.log_widget.clear()
        if text:
            self.log_widget.write(text)
        self.path = path or self.path
        if self.problem is not None or reset or not self.fed:
            self.fed = True
            self.problem = None
            self._title()

    def fetch_failed(self, error: str, final: bool = False) -> None:
        self.problem = error
        self.final = final
        if not self.taken_down():
            self._title()

    # ------------------------------------------------------------ search

    def matches(self) -> list[int]:
        """The lines that hold the searched text."""
        term = self.term.lower()
        return [i for i, line in enumerate(self.log_widget.lines) if term in line.lower()] if term else []

    def search(self, term: str) -> int:
        """Mark ``term`` in every line and jump to its last occurrence; the number of matching lines."""
        self.term = term
        log = self.log_widget
        log.highlight = bool(term)
        log.highlighter = SearchHighlighter(term)
        log._render_line_cache.clear()  # the marks change every drawn line
        log.refresh()
        found = self.matches()
        self.match = found[-1] if found else None
        self._jump()
        return len(found)

    def next_match(self, step: int) -> Optional[int]:
        """Jump to the next (1) or previous (-1) matching line, wrapping around."""
        found = self.matches()
        if not found:
            self.match = None
            return None
        here = self.match if self.match is not None else -1
        later = [i for i in found if (i > here if step > 0 else i < here)]
        self.match = (later[0] if step > 0 else later[-1]) if later else (found[0] if step > 0 else found[-1])
        self._jump()
        return self.match

    def _jump(self) -> None:
        if self.match is not None:
            self.log_widget.auto_scroll = False  # stay on the match while lines arrive
            self.log_widget.scroll_to(y=max(0, self.match - self.log_widget.size.height // 2), animate=False)
        else:
            self.log_widget.auto_scroll = True
        self._title()

    @property
    def text(self) -> str:
        return "\n".join(self.log_widget.lines)

    def _title(self) -> None:
        title = self.query_one("#log-title", Static)
        if self.job is None:
            title.update("no job selected: pick one in the jobs view")
            return
        where = f"  {self.path}" if self.path else ""
        status = (f"  ✗ {self.problem} ({'not retried' if self.final else 'retrying'})" if self.problem else
                  "  following" if self.fed else "  waiting for it…")
        found = ""
        if self.term:
            n = len(self.matches())
            at = f", line {self.match + 1}" if self.match is not None else ""
            found = f"  search {self.term!r}: {n} line{'s' if n != 1 else ''}{at} (n/N: next/previous)"
        title.update(Text(f"log of {self.job}{where}{status}{found}"))  # plain: a term may hold brackets
