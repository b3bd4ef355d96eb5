"""A job's log file: the last lines, reading on from an offset, and the size cap.

The job's output reaches ``job.log`` through one writer, its keeper (agents/logcap.py,
:class:`CappedLog`), which cuts the log before a write would pass the cap: the newest half of
the log is copied to ``job.log.1`` and ``job.log`` starts again from empty. So ``job.log``
never holds more than the cap and ``job.log.1`` more than half of it, however fast the job
writes (it waits on its pipe), and nothing is lost at a cut. Whoever writes or cuts a log
holds its lock (:func:`take_lock`). A job that writes ``job.log`` itself (launched before
the keeper took its output) is cut from outside instead (:func:`cap`, logrotate's
"copytruncate"), and the bytes it writes between the copy and the cut are lost.

Reading is linear in what is returned. The tail reads blocks backwards until it has the
lines asked for. A follower that fell behind a chatty job skips to the live end and is told
how many bytes it skipped, rather than showing ever older output.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Optional, overload

from ..contract.wire import LogChunk

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


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@overload
def take_lock(path: Path, wait: Literal[True]) -> int: ...
@overload
def take_lock(path: Path, wait: bool) -> Optional[int]: ...
def take_lock(path: Path, wait: bool) -> Optional[int]:
    """The log's lock (``job.log.lock``, an fcntl lock that dies with its holder): whoever
    writes or cuts ``path`` holds it, so a keeper and the agent never cut the same log at once
    and a left-over ``.tmp`` is only ever removed by the one cutter. None when another holds it
    and ``wait`` is False. The caller closes the fd to let go."""
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _tmp_of(path: Path) -> Path:
    return path.with_name(path.name + ".1.tmp")


def _clean(path: Path) -> None:
    """A cutter killed mid-copy left its half-written copy: the lock is ours, so no cut runs."""
    _tmp_of(path).unlink(missing_ok=True)


def _cut(path: Path, keep: int) -> None:
    """The newest ``keep`` bytes of ``path`` to ``path.1``, then ``path`` from empty; the
    caller holds the lock. ``path`` is never removed and ``path.1`` only ever replaced
    whole, so a kill at any point loses neither (at worst a ``.1.tmp`` the next holder of
    the lock removes, or a ``.1`` made again by the next cut)."""
    old, tmp = path.with_name(path.name + ".1"), _tmp_of(path)
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        size = os.fstat(src.fileno()).st_size
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


def cap(path: Path, max_bytes: int) -> bool:
    """Cut ``path`` when it is over ``max_bytes`` (for a job that writes it itself, launched
    before the keeper took its output: :class:`CappedLog`); True when it was cut. Nothing is
    done while another holds the log's lock: a keeper writes it, or a cut runs."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size <= max_bytes:
        return False
    lock = take_lock(path, wait=False)
    if lock is None:
        return False
    try:
        _clean(path)
        if path.stat().st_size <= max_bytes:
            return False
        _cut(path, max_bytes // 2)
        return True
    finally:
        os.close(lock)


class CappedLog:
    """``job.log`` written by its one writer (the job's keeper, agents/logcap.py, or the
    agent when the keeper is gone), which cuts it *before* a write would take it past the cap:
    the job's output reaches the file only through here, so ``job.log`` never holds more
    than the cap however fast the job writes (a writer faster than the copy waits on its
    pipe). Holds the log's lock from start to close."""

    def __init__(self, path: Path, max_bytes: int, lock: Optional[int] = None) -> None:
        self.path, self.max_bytes = path, max(1, max_bytes)
        self._lock = take_lock(path, wait=True) if lock is None else lock
        try:
            _clean(path)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if os.fstat(self._fd).st_size > self.max_bytes:  # the attempt's header on a full log, or a lower cap
                _cut(path, self.max_bytes // 2)
        except BaseException:
            os.close(self._lock)
            raise
        self.cuts = 0
        self.dropped = 0  # bytes that found the disk full

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            size = os.fstat(self._fd).st_size  # asked each time: the agent appends each attempt's header itself
            if size > 0 and size + len(view) > self.max_bytes:
                _cut(self.path, self.max_bytes // 2)
                self.cuts += 1
                size = 0
            n = min(len(view), max(1, self.max_bytes - size))
            try:
                n = os.write(self._fd, view[:n])
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                # a full disk: the job must not stop on it (it would have had the error on
                # its own write before; the agent's disk_full alert says so); this part is gone
                self.dropped += len(view)
                return
            view = view[n:]

    def close(self) -> None:
        os.close(self._fd)
        os.close(self._lock)

    def __enter__(self) -> "CappedLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


PIPE = "job.pipe"  # the job's output, a FIFO in its directory (supervisor.WRAPPER makes it)
PIPE_CHUNK = 1 << 20  # one read from the job's pipe (the pipe is made this big too)


def make_pipe(pipe: Path, wanted: bool) -> None:
    """A fresh FIFO for the attempt's output (an old one may still be held by a job of
    before); none when the log has no cap or FIFOs cannot be made here: then the job writes
    ``job.log`` itself and the agent's check cuts it (:func:`cap`)."""
    pipe.unlink(missing_ok=True)
    if wanted:
        try:
            os.mkfifo(pipe, 0o600)
        except OSError as exc:
            log.warning("cannot make %s (the job will write its log itself, cut from outside): %s", pipe, exc)


def open_pipe(pipe: Path) -> int:
    """The job's output pipe (``job.pipe``, a FIFO the wrapper holds open), for reading.
    Opened without waiting (a FIFO with no writer left would block the open forever: then
    the first read says end of file), then read blocking."""
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    os.set_blocking(fd, True)
    size_pipe(fd)
    return fd


def size_pipe(fd: int) -> None:
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_CHUNK)  # fewer wake-ups for a chatty job
    except OSError:
        pass  # over the node's pipe-max-size: the default 64 KiB pipe works, only with more reads


def drain(fd: int, out: CappedLog) -> None:
    """Copy the job's pipe into its capped log until every writer has closed it."""
    while True:
        data = os.read(fd, PIPE_CHUNK)
        if not data:
            return
        out.write(data)


class Capper:
    """The agent's own check on its live jobs' logs, for when a job's keeper is gone: a job
    whose output goes through its pipe (``job.pipe``) and whose log lock is free has no
    keeper, so the agent drains the pipe into the capped log itself, until the job ends; a
    job that writes ``job.log`` itself is cut past its cap (:func:`cap`). Each in a thread of
    its own, so a big log never holds up the agent's tick; one at a time per job."""

    def __init__(self) -> None:
        self._busy: set[str] = set()

    def check(self, jobs: Iterable[tuple[str, Path, int]]) -> None:
        """``jobs``: (name, log path, cap in bytes) of each live job."""
        for name, path, limit in jobs:
            if name in self._busy:
                continue
            target: Callable[..., None]
            args: tuple[Any, ...]
            try:
                if path.with_name(PIPE).exists():
                    lock = take_lock(path, wait=False)
                    if lock is None:
                        continue  # the keeper holds it: all is well
                    target, args = self._drain, (name, path, limit, lock)
                elif path.stat().st_size > limit:
                    target, args = self._cut, (name, path, limit)
                else:
                    continue
            except OSError as exc:
                log.warning("job %s: cannot look at its log: %s", name, exc)
                continue
            self._busy.add(name)
            threading.Thread(target=target, args=args, name=f"log-{name}", daemon=True).start()

    def _drain(self, name: str, path: Path, limit: int, lock: int) -> None:
        try:
            fd = open_pipe(path.with_name(PIPE))
        except OSError as exc:
            os.close(lock)
            self._busy.discard(name)
            log.warning("job %s: cannot open its output pipe: %s", name, exc)
            return
        try:
            with CappedLog(path, limit, lock=lock) as out:
                log.info("job %s: its log keeper is gone: the agent writes job.log now", name)
                drain(fd, out)
        except OSError as exc:
            log.warning("job %s: cannot write job.log: %s", name, exc)
        finally:
            os.close(fd)
            self._busy.discard(name)

    def _cut(self, name: str, path: Path, limit: int) -> None:
        try:
            if cap(path, limit):
                log.info("job %s: job.log passed %d MiB: the newest half is in job.log.1", name, limit >> 20)
        except OSError as exc:
            log.warning("job %s: cannot cut job.log: %s", name, exc)
        finally:
            self._busy.discard(name)
