"""Conditions that come up and clear (a hot GPU, a full disk, a stalled job, a deadline that
will be missed), and one-off happenings (an XID error).

A condition is notified once when it comes up, and at most once per ``repeat_s`` for the same
key (event and job or GPU), however often it flaps; when it clears, one ``resolved`` follows
if its coming up was notified. What is active, and when each key was last notified, is kept
in ``<home>/watch-state.json`` (written only when it changes), so a new watcher neither
repeats nor forgets them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from .. import writes
from ..contract.vocab import AlertKind, EventKind
from ..contract.atomic import atomic_write_json

log = logging.getLogger("agents")

STATE_FILE = "watch-state.json"


@dataclass(frozen=True)
class Condition:
    key: str  # "temperature:3", "stalled:gen", "gpu_health:ecc:0"
    event: EventKind
    message: str
    alert: Optional[AlertKind] = None  # shown in the snapshot's alerts as this kind; None: not shown
    job: Optional[str] = None
    gpu: Optional[int] = None
    per_hour: Optional[float] = None  # idle_paid: the dollars an hour it costs (the snapshot's alert carries it)
    details: Optional[dict[str, Any]] = field(default=None, compare=False)  # more fields for its event


class Conditions:
    def __init__(self, home: Path, emit: Callable[..., Any]) -> None:
        self.path = Path(home) / STATE_FILE
        self.emit = emit  # (EventKind, message, job=, gpu=, key=, notify=)
        self.active: dict[str, dict[str, Any]] = {}  # key -> {"since", "notified", "event", "message", "job", "gpu"}
        self.last_sent: dict[str, float] = {}
        try:
            doc = json.loads(self.path.read_text())
            self.active = dict(doc.get("active") or {})
            self.last_sent = {k: float(v) for k, v in (doc.get("last_sent") or {}).items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("watch: unreadable %s (%s); starting with no active conditions", self.path, exc)

    def update(self, now: float, current: list[Condition], repeat_s: float) -> None:
        """The conditions true now: those new come up, those gone clear."""
        changed = False
        seen = set()
        for c in current:
            seen.add(c.key)
            if c.key in self.active:
                continue
            notify = self._due(c.key, now, repeat_s)
            if notify:
                self.last_sent[c.key] = now
            self.active[c.key] = {"since": now, "notified": notify, "event": c.event.value, "message": c.message,
                                  "job": c.job, "gpu": c.gpu}
            self.emit(c.event, c.message, job=c.job, gpu=c.gpu, key=c.key, notify=notify, **(c.details or {}))
            changed = True
        for key in [k for k in self.active if k not in seen]:
            was = self.active.pop(key)
            lasted = now - float(was.get("since") or now)
            self.emit(EventKind.RESOLVED, f"resolved after {lasted:.0f} s: {was.get('message')}", job=was.get("job"),
                      gpu=was.get("gpu"), key=key, notify=bool(was.get("notified")), of=was.get("event"))
            changed = True
        if changed:
            self._prune(now, repeat_s)
            self._save()

    def began(self, key: str) -> Optional[float]:
        """When the condition ``key`` came up (unix time), while it is up; None otherwise."""
        was = self.active.get(key)
        since = was.get("since") if isinstance(was, dict) else None
        return float(since) if isinstance(since, (int, float)) else None

    def once(self, now: float, c: Condition, repeat_s: float) -> None:
        """Something that happened (an XID error): notified unless the same key was within ``repeat_s``."""
        notify = self._due(c.key, now, repeat_s)
        if notify:
            self.last_sent[c.key] = now
            self._save()
        self.emit(c.event, c.message, job=c.job, gpu=c.gpu, key=c.key, notify=notify)

    def _due(self, key: str, now: float, repeat_s: float) -> bool:
        last = self.last_sent.get(key)
        return last is None or now - last >= repeat_s

    def _prune(self, now: float, repeat_s: float) -> None:
        for key in [k for k, t in self.last_sent.items() if now - t > max(repeat_s, 86400.0)]:
            del self.last_sent[key]

    def _save(self) -> None:
        try:
            atomic_write_json(self.path, {"active": self.active, "last_sent": self.last_sent}, fsync=False)
        except OSError as exc:  # a full disk: an alert (agents/writes.py), the state stays in memory
            writes.failed(self.path, exc)
        else:
            writes.ok(self.path)
