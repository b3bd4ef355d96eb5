"""The node's record of its staged copies, ``<home>/staged/<key>.json`` (one per destination;
the key is a hash of the destination's path), and the lock per destination beside it
(``<key>.lock``, flock: held by the job that copies, or by ``unstage`` while it removes)."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Optional

from ..contract.atomic import atomic_write_json

DIR = "staged"


def key_of(dest: str) -> str:
    return hashlib.sha1(os.path.normpath(dest).encode()).hexdigest()[:16]


def folder(home: Path) -> Path:
    d = Path(home) / DIR
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


def read(home: Path, key: str) -> Optional[dict[str, Any]]:
    try:
        doc = json.loads((Path(home) / DIR / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write(home: Path, key: str, doc: dict[str, Any]) -> None:
    atomic_write_json(folder(home) / f"{key}.json", doc)


def remove(home: Path, key: str) -> None:
    (Path(home) / DIR / f"{key}.json").unlink(missing_ok=True)


def all_records(home: Path) -> list[dict[str, Any]]:
    d = Path(home) / DIR
    out = []
    for path in sorted(d.glob("*.json")) if d.is_dir() else []:
        doc = read(home, path.stem)
        if doc is not None and isinstance(doc.get("to"), str):
            out.append({**doc, "key": path.stem})
    return out


class DestLock:
    """The lock of one destination. ``take(wait=False)`` is False when another holds it; its
    file says who (``holder``)."""

    def __init__(self, home: Path, key: str) -> None:
        self.path = folder(home) / f"{key}.lock"
        self.fd: Optional[int] = None

    def take(self, wait: bool, holder: str = "") -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise
        self.fd = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{holder} {os.getpid()} {time.time():.0f}\n".encode(), 0)
        return True

    def holder(self) -> str:
        try:
            return self.path.read_text().split(" ", 1)[0]
        except OSError:
            return ""

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
