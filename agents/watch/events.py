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
import os
import threading
import time
from pathlib import Path
from typing import Any, Optional

from gpudeck.agents import writes
from gpudeck.agents.jobs import EventKind
from gpudeck.agents.plain import to_plain
from gpudeck.agents.protocol import Event

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
                try:
                    return int(json.loads(line)["seq"])
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line after a kill -9
        return 0

    def add(self, kind: EventKind, message: str, job: Optional[str] = None, gpu: Optional[int] = None,
            key: Optional[str] = None, **details: Any) -> Event:
        with self._lock:
            self.seq += 1
            event = Event(t=round(time.time(), 6), seq=self.seq, node=self.node, kind=kind, message=message,
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
        return event

    def read(self, since: float = 0.0, after_seq: int = 0, limit: int = 5000) -> list[dict[str, Any]]:
        """The newest ``limit`` events with ``t > since`` and ``seq > after_seq``, oldest first."""
        if after_seq and after_seq >= self.seq:
            return []  # nothing new: a follower asking every second costs no read of the files
        out: list[dict[str, Any]] = []
        for path in (self.old, self.path):
            try:
                with open(path, "rb") as f:
                    for line in f:
                        try:
                            ev = json.loads(line)
                        except ValueError:
                            continue
                        if isinstance(ev, dict) and ev.get("t", 0) > since and ev.get("seq", 0) > after_seq:
                            out.append(ev)
            except OSError:
                continue
        return out[-limit:] if limit > 0 else out
