"""One file copied to its place: to its partial name first (resumed from its length), flushed,
given the source's mtime, then renamed over the final name (the package docstring's rules)."""

from __future__ import annotations

import glob
import os
from typing import Any, Callable, Optional

from .plan import ItemPlan, SourceFile, partial_name

CHUNK = 64 << 20  # bytes between two progress reports


def _clear_other_partials(target: str, keep: str) -> None:
    """Partials of this file from another source (size or stamp): never resumed, removed."""
    d, name = os.path.split(target)
    for other in glob.glob(os.path.join(glob.escape(d), f".{glob.escape(name)}.*.partial")):
        if other != keep:
            try:
                os.unlink(other)
            except OSError:
                pass


def copy_file(plan: ItemPlan, f: SourceFile, progress: Callable[[int], None],
              client: Optional[Any] = None, chunk: int = CHUNK) -> None:
    """``f`` into its place under ``plan``; ``progress(n)`` after each ``n`` bytes written."""
    target = plan.target(f)
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    part = partial_name(target, f)
    _clear_other_partials(target, part)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        start = os.fstat(fd).st_size
        if start > f.size:  # longer than the source: not a part of it
            os.ftruncate(fd, 0)
            start = 0
        os.lseek(fd, start, os.SEEK_SET)
        if plan.item.from_s3:
            _from_s3(plan, f, fd, start, progress, client, chunk)
        else:
            _from_local(plan, f, fd, start, progress, chunk)
        os.fsync(fd)
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if size != f.size:
        raise OSError(f"{target}: copied {size} bytes, the source has {f.size}: it changed during the copy")
    if f.mtime_ns is not None:
        os.utime(part, ns=(f.mtime_ns, f.mtime_ns))
    os.replace(part, target)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _from_local(plan: ItemPlan, f: SourceFile, fd: int, start: int, progress: Callable[[int], None],
                chunk: int) -> None:
    src = os.path.expanduser(plan.item.src)
    path = src if plan.single else os.path.join(src, f.rel)
    inp = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        offset = start
        fast = hasattr(os, "copy_file_range")
        while offset < f.size:
            want = min(chunk, f.size - offset)
            n = 0
            if fast:
                try:
                    n = os.copy_file_range(inp, fd, want, offset)
                except OSError:  # another file system, an old kernel: plain reads and writes
                    fast = False
            if not fast:
                data = os.pread(inp, want, offset)
                _write_all(fd, data)
                n = len(data)
            if n <= 0:
                break  # the source got shorter: said by the size check
            offset += n
            progress(n)
    finally:
        os.close(inp)


def _from_s3(plan: ItemPlan, f: SourceFile, fd: int, start: int, progress: Callable[[int], None], client: Any,
             chunk: int) -> None:
    from ..workers.common.s3sync.remote import S3Location

    loc = S3Location.parse(plan.item.src.rstrip("/"))
    key = loc.prefix if plan.single else loc.key(f.rel)
    if start >= f.size:
        return
    kwargs: dict[str, Any] = {"Bucket": loc.bucket, "Key": key}
    if start:
        kwargs["Range"] = f"bytes={start}-"
    if f.stamp:
        kwargs["IfMatch"] = f.stamp  # the object listed, not one put over it since
    body = client.get_object(**kwargs)["Body"]
    try:
        for data in body.iter_chunks(min(chunk, 8 << 20)):
            _write_all(fd, data)
            progress(len(data))
    finally:
        body.close()
