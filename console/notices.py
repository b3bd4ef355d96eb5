"""The console's notices: one at a time, on one line over the footer's key hints (app.tcss).

Stacked toasts, 40 columns wide, covered the fleet view's memory and HELD BY columns for up
to 20 s. Here the newest replaces the one shown, and none stays longer than NOTICE_S says,
except that the answer to the operator's own action (a kill's verdict: ``keep``) is replaced
only by another such answer, or an error, while it is shown: news of the fleet waits in the
events view.
"""

from __future__ import annotations

import time
from typing import Optional

from textual.notifications import Notify, SeverityLevel

# the longest a notice stays: it hides the footer's key hints meanwhile, and the events view
# and the details keep what it said
NOTICE_S = {"error": 10.0, "warning": 6.0, "information": 6.0}


def _plain(text: str) -> str:
    """``text`` shown as it is: every ``[`` escaped (Textual's ``escape`` left the backslash of
    ``[[jobs]]`` on screen: ``[\\[jobs]]``)."""
    return text.replace("[", "\\[")


class NoticeLine:
    """A mixin for the App: its ``notify`` and the handler that makes room for a new notice."""

    _kept_until = 0.0  # a notice the operator asked for (notify keep=True) stays until then

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: Optional[float] = None, markup: bool = True, keep: bool = False) -> None:
        """Show ``message`` on the notice line (the module's docstring says which notice wins)."""
        now = time.monotonic()
        if not keep and severity != "error" and now < self._kept_until:
            return
        text = " · ".join(line.strip() for line in message.splitlines() if line.strip())
        if not markup:
            text = _plain(text)
        if title:
            text = f"[b]{_plain(title)}:[/b] {text}"
        longest = NOTICE_S.get(severity, NOTICE_S["information"])
        shown_s = min(timeout or longest, longest)
        self._kept_until = now + shown_s if keep else 0.0
        super().notify(  # type: ignore[misc]
            text, severity=severity, timeout=shown_s, markup=True)

    def on_notify(self, event: Notify) -> None:
        """Runs before App's own handler adds the new notice: the one shown makes room for it."""
        self.clear_notifications()  # type: ignore[attr-defined]
