"""``OUT/resume.json``: how far the prompt file is done, so that a restart over a million
done prompts does not parse them again. The done-set stays the authority: the hint only
says where to start reading, and it is dropped whenever it cannot be trusted.

Rules that keep it safe:

- It is written only after the done-set is fsynced, and points at the low-water mark: the
  first prompt taken whose id is not durable yet. Every prompt before it is done.
- It holds a fingerprint (a hash of the file's first MiB and of the 64 KiB before the
  offset): a hint stays valid when lines are appended, and is dropped when anything before
  it changed. It is also dropped when it names another prompt file, or more done ids than
  the done-set holds, and deleted when the done-set itself is missing.
- It remembers the line count of the file (size, lines), so a restart counts only what was
  appended since.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import os
from typing import Optional

from ...contract.atomic import atomic_write_json

log = logging.getLogger("gpudeck.generate")

RESUME_FILE = "resume.json"


def count_lines(path: str, start: int = 0) -> int:
    """Non-empty lines from byte ``start`` on, counted in 1 MiB chunks (1 GB in about a second)."""
    n = 0
    last = b"\n"
    with open(path, "rb") as f:
        f.seek(start)
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n") - chunk.count(b"\n\n")
            last = chunk[-1:]
    return n + (1 if last != b"\n" else 0)


class ResumeHint:
    """Reads the hint at the start, tracks the prompts taken and made durable, writes it."""

    def __init__(self, prompts: str, out: str) -> None:
        self.prompts = os.path.abspath(prompts)
        self.path = os.path.join(out, RESUME_FILE)
        self._pending: list[tuple[int, int]] = []  # heap: (offset, line) of prompts taken, not durable
        self._durable: set[int] = set()
        self._written: Optional[int] = None
        self.counted = (0, 0)  # (size, lines) of the prompt file's last count

    def drop(self) -> None:
        """A hint without its done-set would skip prompts nobody finished."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def fingerprint(self, offset: int) -> Optional[str]:
        """A hash of the prompt file's first MiB and of the 64 KiB before ``offset``."""
        try:
            with open(self.prompts, "rb") as f:
                if os.fstat(f.fileno()).st_size < offset:
                    return None
                h = hashlib.blake2b(f.read(min(offset, 1 << 20)), digest_size=16)
                f.seek(max(0, offset - 65536))
                h.update(f.read(offset - max(0, offset - 65536)))
                return h.hexdigest()
        except OSError:
            return None

    def read(self, done_count: int) -> tuple[int, int]:
        """(offset, line) to start reading at; sets :attr:`counted` to the file's line count
        (the last start's, plus whatever was appended since)."""
        offset, line, counted = self._read(done_count)
        size, lines = counted if counted else (0, 0)
        self.counted = (os.path.getsize(self.prompts), lines + count_lines(self.prompts, size))
        return offset, line

    def _read(self, done_count: int) -> tuple[int, int, Optional[tuple[int, int]]]:
        try:
            with open(self.path) as f:
                hint = json.load(f)
            offset, line = int(hint["offset"]), int(hint["line"])
            counted = (int(hint["counted_size"]), int(hint["counted_lines"]))
        except (OSError, ValueError, KeyError, TypeError):
            return 0, 1, None
        if hint.get("prompts") != self.prompts or done_count < hint.get("done_at_least", 0):
            return 0, 1, None
        if self.fingerprint(offset) != hint.get("fingerprint") or os.path.getsize(self.prompts) < counted[0]:
            log.info("the prompt file changed before line %d since the last run: reading it from the start", line)
            return 0, 1, None
        return offset, line, counted

    def taken(self, offset: int, line: int) -> None:
        heapq.heappush(self._pending, (offset, line))

    def durable(self, offset: int) -> None:
        self._durable.add(offset)

    def write(self, done, read_at: tuple[int, int]) -> None:
        """Only after the done-set is fsynced: every prompt before the low-water offset is done.
        ``read_at``: the reader's (offset, line), the mark when nothing is pending."""
        heap = self._pending
        while heap and heap[0][0] in self._durable:
            self._durable.discard(heapq.heappop(heap)[0])
        offset, line = heap[0] if heap else read_at
        if offset == self._written:
            return
        try:
            done.sync(force=True)  # the hint may only point past ids that are on disk
            atomic_write_json(self.path, {
                "prompts": self.prompts, "offset": offset, "line": line,
                "fingerprint": self.fingerprint(offset), "done_at_least": len(done),
                "counted_size": self.counted[0], "counted_lines": self.counted[1]}, fsync=False)
            self._written = offset
        except OSError as exc:
            log.warning("cannot write the resume hint: %s", exc.strerror or exc)
