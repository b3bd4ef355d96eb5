"""The done-set: an append-only log of finished ids, one per line.

It is read once when a worker starts and only appended to afterwards. The agent counts its
lines incrementally (agents/sense/progress.py ``DoneSetCounter``), so a line counts once its
newline is on disk.

Rules that keep a kill -9 harmless (the workers rely on them):

- An id goes into the done-set only *after* the output that holds its result is written
  (for ``generate``: appended to the open shard's temp file). A crash between the two
  leaves a result whose id is missing; the worker's recovery finds it in the open shard and
  appends the id then (:meth:`DoneSet.add` skips ids it has). The reverse order could leave an id
  whose result was never written: a prompt silently skipped forever.
- A batch of ids is written with a single ``write()``; a kill in the middle of it can leave
  a last line without its newline. :meth:`DoneSet.open` cuts that half line off; its id is
  either in the open shard (and recovered from there) or was never finished.
- fsync is batched (:meth:`DoneSet.sync`); a kill -9 loses nothing that ``write()``
  returned for, only a power cut can, and the same ordering holds for fsyncs: the shard is
  fsynced before the ids that point at it.

Ids are strings. An id holding a newline, a carriage return or a leading quote or blank is
written as a JSON string (``"a\\nb"``); everything else is written as is, so a log of plain
numbers or names stays readable with ``wc -l`` and ``grep``. A line may repeat after a
crash; readers build a set.
"""

from __future__ import annotations

import json
import os
import time
from typing import Iterable, Optional

from ...contract.atomic import append_or_undo

_NEEDS_QUOTING = ("\n", "\r")


class DoneSetError(OSError):
    """The done-set file cannot be read or written; the message names the file."""


def encode_id(item_id: str) -> str:
    if (not item_id or item_id[0] in '" \t' or item_id[-1] in " \t"
            or any(c in item_id for c in _NEEDS_QUOTING)):
        return json.dumps(item_id)
    return item_id


def decode_line(line: str) -> str:
    return json.loads(line) if line.startswith('"') else line


def read_ids(path: str, repair: bool = True) -> set[str]:
    """All ids in the done-set file at ``path`` (empty when there is none). A last line
    without its newline was cut by a crash: it is dropped, and cut off the file when
    ``repair`` is true."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return set()
    except OSError as exc:
        raise DoneSetError(f"cannot read the done-set {path}: {exc.strerror or exc}") from None
    end = data.rfind(b"\n") + 1
    if end != len(data) and repair:
        try:
            with open(path, "r+b") as f:
                f.truncate(end)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise DoneSetError(f"cannot repair the half-written last line of {path}: {exc.strerror or exc}") \
                from None
    lines = data[:end].decode("utf-8", errors="surrogateescape").split("\n")
    lines.pop()  # the empty string after the last newline
    ids = set(lines)
    ids.discard("")  # an empty line is no id (an empty id is written as "")
    if any(line.startswith('"') for line in ids):  # rare: only ids that needed quoting
        ids = {decode_line(line) for line in ids}
    return ids


def repair_tail(path: str) -> int:
    """Cut a half-written last line off ``path`` without reading the whole file; returns
    the file's size afterwards (0 when it does not exist)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    try:
        size = os.fstat(fd).st_size
        end = size
        while end > 0:
            start = max(0, end - 65536)
            chunk = os.pread(fd, end - start, start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                end = start + nl + 1
                break
            end = start
        if end != size:
            os.ftruncate(fd, end)
            os.fsync(fd)
        return end
    except OSError as exc:
        raise DoneSetError(f"cannot repair the half-written last line of {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


class DoneLog:
    """The append side of a done-set file alone, holding no ids in memory: for logs that are
    only written (the uploader's ``done-uploaded.txt``). ``append`` writes one batch with one
    ``write()``; ``sync`` fsyncs at most every ``fsync_interval_s`` unless forced."""

    def __init__(self, path: str, fsync_interval_s: float = 1.0) -> None:
        self.path = path
        self.fsync_interval_s = fsync_interval_s
        self.size = repair_tail(path)
        self._fd: Optional[int] = None
        self._dirty = False
        self._last_sync = time.monotonic()

    def _file(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                raise DoneSetError(f"cannot open the done-set {self.path}: {exc.strerror or exc}") from None
        return self._fd

    def append(self, ids: Iterable[str], sync: bool = False) -> None:
        """Append ``ids``. A failed write (disk full) raises DoneSetError with any partial
        line cut off again, so the caller may retry the same batch."""
        data = "".join(encode_id(i) + "\n" for i in ids).encode("utf-8", errors="surrogateescape")
        if data:
            fd = self._file()
            try:
                append_or_undo(fd, data, self.size)
            except OSError as exc:
                raise DoneSetError(f"cannot append to the done-set {self.path}: {exc.strerror or exc}") from None
            self.size += len(data)
            self._dirty = True
        self.sync(force=sync)

    def sync(self, force: bool = False) -> None:
        """fsync if something was written and (``force`` or the interval has passed)."""
        if not self._dirty or self._fd is None:
            return
        now = time.monotonic()
        if force or now - self._last_sync >= self.fsync_interval_s:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                raise DoneSetError(f"cannot fsync the done-set {self.path}: {exc.strerror or exc}") from None
            self._dirty, self._last_sync = False, now

    def close(self) -> None:
        if self._fd is not None:
            try:
                self.sync(force=True)
            finally:
                os.close(self._fd)
                self._fd = None


class DoneSet:
    """The ids finished so far, in memory, and the log that keeps them.

    ``open`` reads the log once (repairing a half-written last line); ``add`` appends the
    new ids with one ``write()`` per batch; ``sync`` fsyncs, batched. Membership tests
    (``id in done``) never touch the disk.
    """

    def __init__(self, path: str, ids: set[str], fsync_interval_s: float = 1.0) -> None:
        self.path = path
        self.ids = ids
        self.log = DoneLog(path, fsync_interval_s)

    @classmethod
    def open(cls, path: str, fsync_interval_s: float = 1.0) -> "DoneSet":
        return cls(path, read_ids(path), fsync_interval_s)

    def __contains__(self, item_id: str) -> bool:
        return item_id in self.ids

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, ids: Iterable[str], sync: bool = False) -> int:
        """Append the ids not in the set yet, in one write; returns how many were new. On
        DoneSetError the set is unchanged and the batch may be retried."""
        new = [i for i in dict.fromkeys(ids) if i not in self.ids]
        if new:
            self.log.append(new, sync=sync)
            self.ids.update(new)
        else:
            self.log.sync(force=sync)
        return len(new)

    def sync(self, force: bool = False) -> None:
        self.log.sync(force)

    def close(self) -> None:
        self.log.close()
