"""The overnight timeline: ``<home>/events.jsonl``, one JSON line per event, bounded.

Every alert that comes up or clears, every state change, restart, kill, notification and
GPU health event is a line. The file is cut at ``max_bytes``: it becomes ``events.jsonl.1``
(the one before is dropped), so the two hold at most twice that. Each line has a ``seq`` that
goes on across agents (read from the last line at start), so a follower asks for what came
after the last one it saw.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Any, Optional

from ..sense import writes
from ..contract.vocab import EventKind
from ..contract.plain import ProtocolError, from_dict, to_plain
from ..contract.wire import Event

log = logging.getLogger("agents")

EVENTS_FILE = "events.jsonl"
MAX_BYTES = int(os.environ.get("GPUDECK_EVENTS_MAX_BYTES", str(8 * 2**20)))


class EventLog:
    def __init__(self, home: Path, node: str, max_bytes: int = MAX_BYTES) -> None:
        self.path = Path(home) / EVENTS_FILE
        self.old = self.path.with_name(EVENTS_FILE + ".1")
        self.node = node
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._warned: set[tuple[str, int]] = set()
        self.seq = self._last_seq()

    def _last_seq(self) -> int:
        for path in (self.path, self.old):
            try:
                with open(path, "rb") as f:
                    f.seek(0, os.SEEK_END)
                    f.seek(max(0, f.tell() - 8192))
                    lines = f.read().splitlines()
            except OSError:
                continue
            for line in reversed(lines):
                ev, _ = _parse(line)
                if ev is not None:
                    return ev.seq
                # a torn last line after a kill -9, or a broken one: the one before it
        return 0

    def add(self, kind: EventKind, message: str, job: Optional[str] = None, gpu: Optional[int] = None,
            key: Optional[str] = None, **details: Any) -> Event:
        with self._lock:
            event = Event(t=round(time.time(), 6), seq=self.seq + 1, node=self.node, kind=kind, message=message,
                          job=job, gpu=gpu, key=key, details=details)
            line = json.dumps(to_plain(event), separators=(",", ":"), default=str) + "\n"
            try:
                if self.path.exists() and self.path.stat().st_size + len(line) > self.max_bytes:
                    os.replace(self.path, self.old)
                with open(self.path, "a") as f:
                    f.write(line)
            except OSError as exc:  # a full disk must not stop the watcher: an alert instead
                writes.failed(self.path, exc)
            else:
                writes.ok(self.path)
            # published once its line is in the file: a reader (another thread: the agent answers
            # ReadEvents off its loop) that takes ``seq`` and then reads finds every event up to it,
            # so a follower that asks next from ``seq`` misses none
            self.seq = event.seq
        return event

    def read(self, since: float = 0.0, after_seq: int = 0, limit: int = 5000) -> list[Event]:
        """The newest ``limit`` events with ``t > since`` and ``seq > after_seq``, oldest first."""
        if after_seq and after_seq >= self.seq:
            return []  # nothing new: a follower asking every second costs no read of the files
        # the newer file first: a cut (``add``, in another thread) between the two reads moves
        # what was read into the older one, read twice then, never lost; one of each seq is kept
        found: dict[int, Event] = {}
        for path in (self.path, self.old):
            try:
                with open(path, "rb") as f:
                    for number, line in enumerate(f, 1):
                        if not line.endswith(b"\n"):
                            break  # the last line, still being written (or torn by a kill -9): not yet an event
                        ev, problem = _parse(line)
                        if ev is None:
                            self._warn(path, number, problem)
                        elif ev.t > since and ev.seq > after_seq:
                            found.setdefault(ev.seq, ev)
            except OSError:
                continue
        out = [found[k] for k in sorted(found)]
        return out[-limit:] if limit > 0 else out

    def _warn(self, path: Path, number: int, problem: str) -> None:
        """A bad line is skipped, said once per file and line (a torn last line is no news)."""
        key = (str(path), number)
        if key not in self._warned and problem != "empty":
            self._warned.add(key)
            log.warning("events: %s line %d skipped: %s", path, number, problem)


def _parse(line: bytes) -> tuple[Optional[Event], str]:
    """One line of the timeline, or None and what is wrong with it: it must be an
    :class:`~gpudeck.agents.contract.wire.Event` with a finite number ``t`` and an integer
    ``seq`` >= 0 (a line such as ``"seq": 1e999`` or ``"t": "abc"`` is skipped, never a crash of
    the agent or of `gpudeck events`)."""
    if not line.strip():
        return None, "empty"
    try:
        ev = json.loads(line)
    except (ValueError, RecursionError):
        return None, "not JSON (a line torn by a kill -9?)"
    if not isinstance(ev, dict):
        return None, "not a JSON object"
    t, seq = ev.get("t"), ev.get("seq")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        return None, f"'t' must be a finite number, got {str(t)[:40]!r}"
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        return None, f"'seq' must be an integer >= 0, got {str(seq)[:40]!r}"
    try:
        return from_dict(Event, ev), ""
    except ProtocolError as exc:
        return None, str(exc)[:200]
