"""Files that are either the old version or the new one, never half of each.

``atomic_write_bytes`` writes a temp file in the same directory, fsyncs it, renames it over
the target and fsyncs the directory, so a kill -9 or a power cut at any moment leaves the
previous content or the new content. The workers use it for progress.json, resume hints and
restored done-sets; shards use the same temp + fsync + rename sequence through
``rename_durably`` (``rename_all_durably`` for several at once: one directory fsync).

Append-only logs (done-sets, the shard index, an open JSONL shard) grow through
``append_or_undo``: one batch, written whole, or cut back off the file when the disk refuses
part of it, so the caller may retry the same batch. The agent's own job records
(agents/jobs/supervisor.py) use ``atomic_write_json`` too.
"""

from __future__ import annotations

import json
import os
from typing import Any

TMP_SUFFIX = ".tmp"


def fsync_dir(path: str) -> None:
    """Make a rename or a new file in ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte of ``data`` is written (a write may take only part)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def append_or_undo(fd: int, data: bytes, size: int) -> None:
    """Append ``data`` to the file open at ``fd`` (O_APPEND) whose length is ``size``; on an
    OSError (a full disk) cut whatever part was written back off, then raise the error."""
    try:
        write_all(fd, data)
    except OSError:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass
        raise


def atomic_write_bytes(path: "str | os.PathLike[str]", data: bytes, fsync: bool = True, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically, a file of ``mode`` from its first byte (0o600
    for a file that holds secrets). The temp name carries the pid, so two writers never share
    one; a failed write removes its temp file and raises OSError."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = f"{os.fspath(path)}.{os.getpid()}{TMP_SUFFIX}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync:
        fsync_dir(directory)


def atomic_write_text(path: str, text: str, fsync: bool = True) -> None:
    atomic_write_bytes(path, text.encode(), fsync=fsync)


def atomic_write_json(path: "str | os.PathLike[str]", obj: Any, fsync: bool = True, mode: int = 0o644) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode(), fsync=fsync, mode=mode)


def rename_durably(src: str, dst: str) -> None:
    """Rename ``src`` (already fsynced by its writer) to ``dst`` and fsync the directory."""
    os.replace(src, dst)
    fsync_dir(os.path.dirname(os.path.abspath(dst)))


def rename_all_durably(pairs: list[tuple[str, str]]) -> None:
    """:func:`rename_durably` for several files of one directory: every rename, then one
    directory fsync."""
    for src, dst in pairs:
        os.replace(src, dst)
    if pairs:
        fsync_dir(os.path.dirname(os.path.abspath(pairs[0][1])))
