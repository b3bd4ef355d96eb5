"""The worker's start-up, said as it happens: which phase it is in (``starting``: the data
audit and the id scan; ``loading``: the model; ``compiling``: the runner's set-up, its
self-check, the kernels' compile and autotuning, and the first batch through the compiled
layers; ``preparing`` instead of ``compiling`` when nothing compiles; then ``running``),
since when, and, once the first shard is durable, how long that took from the process's own
start (``startup_s``). They go into progress.json (``phase``, ``phase_since``,
``startup_s``; agents/contract/documents.py), so the watcher does not take a long compile
for a stall (agents/contract/stall.py) and ``gpudeck plan extract`` can count the start-up.

Before the pipeline runs there is no progress writer yet: :meth:`StartupClock.enter` writes
the phase into the last progress.json, keeping its counts (a relaunch's counts do not go
back to zero while it loads).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Optional

from ...contract.documents import ProgressDoc, read_progress
from ..common.progress import write_progress

log = logging.getLogger("gpudeck.extract")

_IMPORTED_AT = time.time()


def process_started_at() -> float:
    """When this process started (unix time): from /proc (Linux), so the interpreter's and
    torch's imports count too; else when this module was imported."""
    try:
        with open("/proc/self/stat") as f:
            after = f.read().rsplit(")", 1)[1].split()
        ticks = int(after[19])  # field 22, starttime, in clock ticks after boot
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        started = btime + ticks / os.sysconf("SC_CLK_TCK")
        # btime has a whole-second resolution: never later than now, never earlier than a
        # minute before this module's import (a container's odd /proc)
        return min(max(started, _IMPORTED_AT - 60.0), time.time())
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED_AT


class StartupClock:
    """The phases of one run's start-up and the first durable shard (thread-safe: the
    finalizer marks the shard)."""

    def __init__(self, progress_path: Optional[str] = None, started_at: Optional[float] = None) -> None:
        self.progress_path = progress_path
        self.started_at = process_started_at() if started_at is None else started_at
        self.phase: Optional[str] = None
        self.phase_since: Optional[float] = None
        self.marks: dict[str, float] = {}  # phase -> when it began (unix time)
        self.first_shard_at: Optional[float] = None
        self._lock = threading.Lock()

    def enter(self, phase: str, write: bool = True) -> None:
        """Begin ``phase``; ``write``: say so in progress.json now (before the pipeline's writer exists)."""
        now = time.time()
        with self._lock:
            if phase == self.phase:
                return
            self.phase, self.phase_since = phase, now
            self.marks.setdefault(phase, now)
        log.info("phase: %s (%.1f s after the process started)", phase, now - self.started_at)
        if write and self.progress_path:
            self._write_phase()

    def shard_durable(self) -> bool:
        """The first call marks the first durable shard (and logs the start-up): True then."""
        with self._lock:
            if self.first_shard_at is not None:
                return False
            self.first_shard_at = time.time()
        log.info("first durable shard %.1f s after the process started (%s)", self.startup_s,
                 ", ".join(f"{k} {v:.1f} s" for k, v in self.breakdown().items()))
        return True

    @property
    def startup_s(self) -> Optional[float]:
        """From the process's start to the first durable shard; None before it."""
        if self.first_shard_at is None:
            return None
        return round(self.first_shard_at - self.started_at, 2)

    def breakdown(self) -> dict[str, float]:
        """Seconds per start-up stretch: ``process`` (interpreter, imports, arguments) until
        the first phase, then each phase until the next, ``first_shard`` from ``running`` to
        the first durable shard."""
        points = sorted(self.marks.items(), key=lambda kv: kv[1])
        out: dict[str, float] = {}
        if points:
            out["process"] = round(points[0][1] - self.started_at, 2)
        end = self.first_shard_at
        for (name, t), nxt in zip(points, points[1:] + [("", end)]):
            if nxt[1] is not None:
                out["first_shard" if name == "running" else name] = round(nxt[1] - t, 2)
        return out

    def fields(self) -> dict[str, Any]:
        """The progress document's fields of the start-up (ProgressDoc's ``phase``,
        ``phase_since``, ``startup_s``)."""
        return {"phase": self.phase, "phase_since": self.phase_since, "startup_s": self.startup_s}

    def extra(self) -> dict[str, Any]:
        """The worker's own fields: the breakdown, once there is one."""
        return {"startup": self.breakdown()} if self.first_shard_at is not None else {}

    def _write_phase(self) -> None:
        """The last progress.json's counts, with this phase (the pipeline's writer takes over later)."""
        path = self.progress_path
        assert path is not None
        prev: dict[str, Any] = {}
        if os.path.exists(path):
            try:
                old = read_progress(path)
                prev = {"done": old.done, "total": old.total, "tokens": old.tokens, "quality": old.quality}
            except (OSError, ValueError):
                pass
        doc = ProgressDoc(done=prev.get("done", 0), total=prev.get("total"), tokens=prev.get("tokens"),
                          updated_at=time.time(), quality=prev.get("quality") or {}, **self.fields())
        write_progress(path, doc, log, state="starting", elapsed_s=round(time.time() - self.started_at, 1))
