"""How far a job is: its progress.json (agents/contract/documents.py, ``ProgressDoc``, says what
it holds), or a done-set file counted incrementally: the agent remembers the byte offset it has
counted up to and reads only what was appended since.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Optional

from ..contract.documents import ProgressDoc, read_progress
from ..contract.wire import Progress
from .rates import CounterRate, eta_seconds


class DoneSetCounter:
    """Counts complete lines of an append-only file, reading only the new bytes each time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.count = 0
        self._inode: Optional[int] = None

    def poll(self) -> int:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return self.count
        if st.st_ino != self._inode or st.st_size < self.offset:  # replaced or truncated: start over
            self._inode, self.offset, self.count = st.st_ino, 0, 0
        if st.st_size == self.offset:
            return self.count
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            while chunk := f.read(1 << 20):
                self.offset += len(chunk)
                # a line counts once its newline is written: a half-written last line waits
                self.count += chunk.count(b"\n")
        return self.count


MIN_SPAN_S = 5.0  # rates need this much history; until then the job's own figures are shown


class ProgressTracker:
    """Reads one job's progress source and turns it into rates and an ETA.

    Until it has seen ``MIN_SPAN_S`` of history it shows what the job itself reports
    (``tokens_per_s``, ``rate_per_s``, ``eta_s`` in progress.json), and it can be seeded with
    the points a previous agent recorded (:meth:`seed`), so a one-shot ``gpudeck status``
    shows rates too.
    """

    def __init__(self, progress_path: Optional[str], done_set_path: Optional[str],
                 total: Optional[int], window_s: float = 120.0) -> None:
        self.progress_path = progress_path
        self.done_set = DoneSetCounter(done_set_path) if done_set_path else None
        self.total = total
        self.window_s = window_s
        self._mtime: Optional[tuple[float, int]] = None
        self._doc: Optional[ProgressDoc] = None  # the last good reading
        self._health: dict[str, Any] = {}  # the job's servers, uploads and blocked, from the last good reading
        self._error: Optional[str] = None
        self._done_rate = CounterRate(window_s, min_span_s=MIN_SPAN_S)
        self._tok_rate = CounterRate(window_s, min_span_s=MIN_SPAN_S)
        self._last_change: Optional[float] = None
        self._last_done: Optional[int] = None

    def poll(self, now: Optional[float] = None) -> Optional[Progress]:
        now = time.time() if now is None else now
        if self.done_set is not None:
            done = self.done_set.poll()
            doc = ProgressDoc(done=done)
            total = self.total
        elif self.progress_path:
            self._read_progress_file(self.progress_path)
            if self._doc is None:
                return Progress(done=0, total=self.total, error=self._error) if self._error else None
            doc = self._doc
            done, total = doc.done, doc.total
        else:
            return None
        tokens = doc.tokens
        self._done_rate.add(now, done)
        if tokens is not None:
            self._tok_rate.add(now, tokens)
        if done != self._last_done:
            self._last_done, self._last_change = done, now
        rate = self._done_rate.rate()
        tps = self._tok_rate.rate() if tokens is not None else None
        if tps is None:
            tps = doc.tokens_per_s
        if rate is None:
            rate = doc.rate_per_s
        eta = eta_seconds(done, total, rate)
        if eta is None and rate is None:
            eta = doc.eta_s
        updated = self._last_change if doc.updated_at is None else doc.updated_at
        quality = {k: int(v) for k, v in doc.quality.items() if _number(v) is not None} if doc.quality else {}
        return Progress(done=done, total=total, tokens=tokens, rate_per_s=rate, tokens_per_s=tps,
                        eta_s=eta, updated_at=updated, quality=quality,
                        error=self._error, useful=_count(doc.useful), useful_of=_count(doc.useful_of),
                        **(self._health if self.done_set is None else {}))

    def seed(self, points: list[tuple[float, int, Optional[int]]]) -> None:
        """(t, done, tokens) points recorded before this tracker existed, oldest first."""
        for t, done, tokens in points:
            self._done_rate.add(t, done)
            if tokens is not None:
                self._tok_rate.add(t, tokens)
            if done != self._last_done:
                self._last_done, self._last_change = done, t

    @property
    def last_change(self) -> Optional[float]:
        """When ``done`` last moved, as seen by this tracker."""
        return self._last_change

    def _read_progress_file(self, path: str) -> None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        key = (st.st_mtime, st.st_size)
        if key == self._mtime:
            return
        self._mtime = key
        try:
            parsed = read_progress(path, st.st_size)  # its fields checked (contract/documents.py)
        except (OSError, ValueError) as exc:
            # keep the last good reading; say what is wrong with the file
            self._error = f"{path}: {exc}"
            return
        self._doc, self._error = parsed, None  # its floats are finite or None (plain.from_dict)
        # the job's health, typed as the wire has it: generate's uploads, or extract's (``s3``)
        self._health = {"servers": parsed.servers, "uploads": parsed.uploads or parsed.s3, "blocked": parsed.blocked,
                        # its start-up (extract): the watcher takes no compile for a stall (contract/stall.py)
                        "phase": parsed.phase, "phase_since": parsed.phase_since, "startup_s": parsed.startup_s,
                        # generate's last completions' quality problems (the watcher's quality alerts)
                        "window": parsed.window}


def _count(v: object) -> Optional[int]:
    """A counter of the job's (an integer >= 0), or None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _number(v: object) -> Optional[float]:
    """A finite number, or None (a NaN or an infinity in a progress file means: unknown)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None
