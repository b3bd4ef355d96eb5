"""Which dataset a plan is of: its path and a fingerprint of its content (stdlib only), so that
``gpudeck plan compare`` sets side by side only plans of the same data, wherever each node
keeps its copy.

The fingerprint is the total size of the files the worker reads and the SHA-256 of their
first MiB (the files in the worker's order, read as one stream): cheap on a dataset of
hundreds of GB, and two copies of one file agree on it whatever their paths. It does not see
a change past the first MiB that keeps the size; the size catches a line added or removed.
"""

from __future__ import annotations

import glob
import hashlib
import os
from typing import Any, Optional

HEAD_BYTES = 2**20


def data_files(path: str) -> list[str]:
    """The files of ``path`` as the workers read them: the file itself, or a directory's
    ``shard-*.jsonl`` (any ``*.jsonl`` if it holds none), in name order, hidden ones left out
    (the rule of agents/workers/extract/data.py's ``input_files``, without its numpy)."""
    if not os.path.isdir(path):
        return [path]
    files = sorted(glob.glob(os.path.join(path, "shard-*.jsonl"))) or sorted(glob.glob(os.path.join(path, "*.jsonl")))
    return [f for f in files if not os.path.basename(f).startswith(".")]


def fingerprint(path: str, part: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """``{"path", "files", "bytes", "head_sha256", "part"}`` of the data at ``path``; OSError
    when it cannot be read."""
    files = data_files(path)
    h = hashlib.sha256()
    left, size = HEAD_BYTES, 0
    for name in files:
        size += os.path.getsize(name)
        if left > 0:
            with open(name, "rb") as f:
                chunk = f.read(left)
            h.update(chunk)
            left -= len(chunk)
    return {"path": os.path.abspath(path), "files": len(files), "bytes": size, "head_sha256": h.hexdigest(),
            "part": list(part) if part else None}


def fingerprint_or_why(path: str, part: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """The fingerprint, or the path with ``bytes``/``head_sha256`` null and ``why`` it could
    not be taken (a plan from ``--tokens`` need not have its data on this machine)."""
    try:
        return fingerprint(path, part)
    except OSError as exc:
        return {"path": os.path.abspath(path), "files": None, "bytes": None, "head_sha256": None,
                "part": list(part) if part else None, "why": f"cannot read it: {exc.strerror or exc}"}


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two fingerprints name the same data (the paths may differ)."""
    return (a.get("bytes"), a.get("head_sha256"), a.get("part")) == (b.get("bytes"), b.get("head_sha256"),
                                                                       b.get("part"))


def describe(d: dict[str, Any]) -> str:
    """``/data/prompts.jsonl (1,234,567 bytes, first MiB sha256 3f2a9c01)``."""
    if d.get("head_sha256") is None:
        return f"{d.get('path')} (no fingerprint: {d.get('why', 'not read')})"
    part = f", part {d['part'][0]}/{d['part'][1]}" if d.get("part") else ""
    files = f"{d['files']} files, " if (d.get("files") or 1) > 1 else ""
    return f"{d['path']} ({files}{d['bytes']:,} bytes, first MiB sha256 {d['head_sha256'][:8]}{part})"
