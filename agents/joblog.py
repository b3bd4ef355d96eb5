"""A job's log file: the last lines, reading on from an offset, and the size cap.

The job writes ``job.log`` through a file descriptor opened in append mode, so the file can
be cut without the job's help (logrotate's "copytruncate"): past the cap, the newest half of
the log is copied to ``job.log.1`` and ``job.log`` starts again from empty, and the job's
next write lands at its new end. A job's logs take at most 1.5 times the cap on disk. The few
bytes written between the copy and the cut are lost: the price of not owning the writer.

Reading is linear in what is returned. The tail reads blocks backwards until it has the
lines asked for. A follower that fell behind a chatty job skips to the live end and is told
how many bytes it skipped, rather than showing ever older output.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Iterable

from .contract.wire import LogChunk

BLOCK = 1 << 16
log = logging.getLogger("agents")

FOLLOW_CHUNK = 1 << 20  # the most one follow request returns
FOLLOW_MAX_BEHIND = 4 << 20  # a follower further behind than this skips ahead ...
FOLLOW_RESUME = 256 << 10  # ... to this much before the end (at a line start)


def tail(job: str, path: Path, lines: int) -> LogChunk:
    """The last ``lines`` lines, and the offset where a follower goes on."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return LogChunk(job=job, text="", offset=0, path=str(path))
    with f:
        size = os.fstat(f.fileno()).st_size
        blocks: list[bytes] = []
        newlines, pos = 0, size
        while pos > 0 and newlines <= lines:
            step = min(BLOCK, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step)
            blocks.append(block)
            newlines += block.count(b"\n")
    data = b"".join(reversed(blocks))
    text = b"\n".join(data.split(b"\n")[-(lines + 1):]) if lines > 0 else b""
    return LogChunk(job=job, text=text.decode(errors="replace"), offset=size, path=str(path))


def read_on(job: str, path: Path, offset: int) -> LogChunk:
    """What came after byte ``offset``. After a cut (the file is now shorter than the offset)
    reading starts again at 0; a follower far behind skips to near the end."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return LogChunk(job=job, text="", offset=0, path=str(path))
    with f:
        size = os.fstat(f.fileno()).st_size
        offset = max(0, offset)
        if offset > size:  # the log was cut since: what is there now is all new
            offset = 0
        skipped = 0
        if size - offset > FOLLOW_MAX_BEHIND:
            f.seek(size - FOLLOW_RESUME)
            head = f.read(BLOCK)
            cut = head.find(b"\n")
            resume = size - FOLLOW_RESUME + (cut + 1 if cut >= 0 else 0)
            skipped, offset = resume - offset, resume
        f.seek(offset)
        data = f.read(FOLLOW_CHUNK)
    return LogChunk(job=job, text=data.decode(errors="replace"), offset=offset + len(data), path=str(path),
                    skipped=skipped)


def cap(path: Path, max_bytes: int) -> bool:
    """Cut ``path`` when it is over ``max_bytes``; True when it was cut."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size <= max_bytes:
        return False
    keep = max_bytes // 2
    old = path.with_name(path.name + ".1")
    tmp = path.with_name(path.name + ".1.tmp")
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        src.seek(max(0, size - keep))
        left = min(keep, size)  # what the job writes meanwhile is not copied: job.log.1 stays at half the cap
        while left > 0:
            block = src.read(min(BLOCK, left))
            if not block:
                break
            dst.write(block)
            left -= len(block)
    os.replace(tmp, old)
    os.truncate(path, 0)
    return True


class Capper:
    """Cuts the logs of live jobs past their cap (:func:`cap`), each in a thread of its own,
    so a big log never holds up the agent's tick; one cut at a time per job."""

    def __init__(self) -> None:
        self._cutting: set[str] = set()

    def check(self, jobs: Iterable[tuple[str, Path, int]]) -> None:
        """``jobs``: (name, log path, cap in bytes) of each live job."""
        for name, path, limit in jobs:
            if name in self._cutting:
                continue
            try:
                if path.stat().st_size <= limit:
                    continue
            except OSError:
                continue
            self._cutting.add(name)
            threading.Thread(target=self._cut, args=(name, path, limit), name=f"log-{name}", daemon=True).start()

    def _cut(self, name: str, path: Path, limit: int) -> None:
        try:
            if cap(path, limit):
                log.info("job %s: job.log passed %d MiB: the newest half is in job.log.1", name, limit >> 20)
        except OSError as exc:
            log.warning("job %s: cannot cut job.log: %s", name, exc)
        finally:
            self._cutting.discard(name)
