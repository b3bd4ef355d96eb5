"""The agent's look at a job's staging: its ``staging.json``, read again only when it changed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from ..contract.documents import read_document
from ..contract.staging import STAGING_FILE, Staging, StagingDoc

MAX_BYTES = 1 << 20


class StagingReader:
    def __init__(self, job_file: Callable[[str, str], Path]) -> None:
        self.job_file = job_file
        self._seen: dict[str, tuple[tuple[int, int], Optional[Staging]]] = {}

    def read(self, name: str) -> Optional[Staging]:
        path = self.job_file(name, STAGING_FILE)
        try:
            st = os.stat(path)
        except OSError:
            self._seen.pop(name, None)
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        cached = self._seen.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            doc = read_document(StagingDoc, path, MAX_BYTES, st.st_size)
        except (OSError, ValueError):
            staging = cached[1] if cached else None  # replaced as it was read: the last good one
        else:
            staging = Staging(state=doc.state, total_bytes=doc.total_bytes, done_bytes=doc.done_bytes,
                              copied_bytes=doc.copied_bytes, bytes_per_s=doc.bytes_per_s, item=doc.item,
                              started_at=doc.started_at, ended_at=doc.ended_at, error=doc.error,
                              waiting_for=doc.waiting_for)
        self._seen[name] = (stamp, staging)
        return staging
