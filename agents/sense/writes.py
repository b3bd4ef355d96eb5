"""Writes that failed on this node: a full disk (or a read-only or over-quota one) is an alert,
never a lost connection.

Every file the agent and the watcher write as they go (a job's state.json, the audit log,
watch.json, owners.json, the timeline, the history...) goes through an atomic write or an
append; when one fails with an OSError, the writer says so here and carries on with what it
has in memory. The file keeps its last good version (atomic writes), status, kill and logs go
on working, and the next snapshot carries one ``disk_full`` alert per file, "cannot write
<path>: No space left on device". A later write to the same file that succeeds clears it.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Union

from ..contract.vocab import AlertKind

if TYPE_CHECKING:
    from ..contract.wire import Alert

log = logging.getLogger("agents")

_lock = threading.Lock()
_failed: dict[str, tuple[float, str]] = {}  # path -> (since, why)


def failed(path: Union[str, Path], exc: OSError) -> None:
    """A write to ``path`` failed: remembered (and logged once) until one succeeds."""
    key, why = str(path), exc.strerror or str(exc)
    with _lock:
        first = key not in _failed
        if first:
            _failed[key] = (time.time(), why)
    if first:
        log.warning("cannot write %s: %s (an alert until a write succeeds)", key, why)


def ok(path: Union[str, Path]) -> None:
    """A write to ``path`` succeeded."""
    if _failed:
        with _lock:
            _failed.pop(str(path), None)


def alerts() -> list[Alert]:
    if not _failed:  # (every tick)
        return []
    from ..contract.wire import Alert

    with _lock:
        items = sorted(_failed.items())
    return [Alert(AlertKind.DISK_FULL, f"cannot write {path}: {why} (since {time.strftime('%H:%M:%S', time.localtime(t))})",
                  since=t) for path, (t, why) in items]
