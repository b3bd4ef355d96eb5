"""The fleet's timeline as the console holds it: every node's events (agents/watch/events.py),
merged in time order, the newest ``limit`` kept. Pure data, no I/O, no textual.

The app asks each node for its events (``events`` with ``since`` first, then ``after_seq``)
and hands the answers to :meth:`Timeline.add`, which keeps each event once (by node and
seq) and says which ones are new. :func:`live_notice` says what a new event tells the
operator while the console is open. Messages reach the screen with their URLs redacted
(:func:`event_row`): the agent already shows webhook URLs as ``https://hooks…/…``, and a URL
in any other message (a job's own words) could hold a token just the same.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from typing import Any, Iterable, Optional, Sequence

from ..agents.contract.vocab import NOTIFY_EVENTS, EventKind
from ..agents.contract.watching import redact
from ..agents.contract.wire import Event
from .actions import Notice
from .rows import EventRow
from .since import counted, since_label

KEPT = 2000  # events the console keeps (the view lists them all)

_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")

NOTIFIED = frozenset(k.value for k in NOTIFY_EVENTS if k is not EventKind.RESOLVED)
"""The kinds a live event is told for (a bell and a notification), with the ``resolved``
that clears one of them."""

_ERRORS = frozenset(k.value for k in (EventKind.DIED, EventKind.GAVE_UP, EventKind.GPU_HEALTH, EventKind.DISK,
                                      EventKind.NODE_UNREACHABLE))
_GOOD = frozenset(k.value for k in (EventKind.FINISHED, EventKind.RESOLVED, EventKind.NOTE))


def redact_urls(text: str) -> str:
    """``text`` with every URL shown as its scheme and the start of its host (``redact``)."""
    return _URL.sub(lambda m: redact(m.group(0)), text)


def _opt_str(v: Any) -> Optional[str]:
    return v if isinstance(v, str) and v else None


def event_row(node: str, ev: Event) -> EventRow:
    """One event of ``node``'s answer (an ``ops.EventPage``'s, its fields checked on the way in)
    as a row, named by the fleet's name of the node (the agent's own may differ)."""
    return EventRow(key=f"{node}:{ev.seq}", t=ev.t, seq=ev.seq, node=node, kind=ev.kind.value,
                    message=redact_urls(ev.message), job=_opt_str(ev.job), gpu=ev.gpu,
                    cond=_opt_str(ev.key), of=_opt_str(ev.details.get("of")))


def _order(r: EventRow) -> tuple[float, str, int]:
    return (r.t, r.node, r.seq)


class Timeline:
    """The newest ``limit`` events of the fleet, oldest first; each (node, seq) once."""

    def __init__(self, limit: int = KEPT) -> None:
        self.limit = limit
        self._rows: list[EventRow] = []
        self._seen: set[str] = set()
        self.after: dict[str, int] = {}  # per node: the seq to ask after next time
        self.summary: Optional[str] = None  # "since 22:10: ...", once the opening summary is made ...
        self.summary_at: Optional[float] = None  # ... and when: the banner says it is as of then
        self.version = 0

    def add(self, rows: Iterable[EventRow]) -> list[EventRow]:
        """Keep ``rows``; the ones not seen before, in time order (an event older than all
        those kept, when the list is full, is not kept and not new)."""
        fresh = []
        for r in rows:
            if r.key in self._seen:
                continue
            self._seen.add(r.key)
            bisect.insort(self._rows, r, key=_order)
            fresh.append(r)
        extra = len(self._rows) - self.limit
        if extra > 0:
            for r in self._rows[:extra]:
                self._seen.discard(r.key)
            del self._rows[:extra]
        if fresh:
            self.version += 1
        return sorted((r for r in fresh if r.key in self._seen), key=_order)

    def followed(self, node: str, seq: int) -> None:
        """``node`` has been read up to ``seq``: the next request asks for what came after."""
        self.after[node] = max(seq, self.after.get(node, 0))

    def rows(self) -> list[EventRow]:
        return list(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


def severity(row: EventRow) -> str:
    """error, warning or information (finished, resolved); "" for the rest of the timeline."""
    kind = row.of if row.kind == EventKind.RESOLVED.value else row.kind
    if kind not in NOTIFIED:
        return ""
    return "information" if row.kind in _GOOD else "error" if row.kind in _ERRORS else "warning"


def live_notice(row: EventRow) -> Optional[Notice]:
    """What a new event tells the operator while the console is open: died, restarted, gave
    up, stalled, finished, GPU health, disk, temperature, deadline, unreachable, and the
    ``resolved`` that clears one of those; None for the rest of the timeline."""
    level = severity(row)
    if not level:
        return None
    where = " ".join(x for x in (row.job, f"GPU {row.gpu}" if row.gpu is not None else None) if x)
    title = f"{row.node}: {row.kind.replace('_', ' ')}" + (f" ({where})" if where else "")
    return Notice(row.message, title, level, timeout=10.0 if level == "error" else 6.0)


def listed(rows: Sequence[EventRow], now: float, most: int = 4) -> str:
    """What the events view lists, said over it with the summary, so the two never disagree:
    ``listed: 151 events, 11:00 to 12:00: 150 state changes and 1 operator action``; "" for none."""
    if not rows:
        return ""
    kinds = Counter(r.kind for r in rows).most_common()
    said = [counted(kind, n) for kind, n in kinds[:most]]
    if len(kinds) > most:
        said.append(f"{sum(n for _, n in kinds[most:])} more")
    first, last = since_label(rows[0].t, now), since_label(rows[-1].t, now)
    span = first if first == last else f"{first} to {last}"
    return f"listed: {len(rows)} event{'s' if len(rows) != 1 else ''}, {span}: " + \
        (said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1])
