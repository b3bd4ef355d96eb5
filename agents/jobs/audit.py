"""The audit log, ``<home>/audit.log``: one JSON line per action on a job (a launch, a kill and
its verdict, a restart, an adoption), written by either backend, with a copy to the
watcher's timeline (``on_audit``)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Optional

from ..sense import writes
from ..contract.vocab import AuditAction
from .backend import AuditHook

log = logging.getLogger(__name__)


class AuditLog:
    def __init__(self, path: Path, node: str) -> None:
        self.path = path
        self.node = node
        self._hook: Optional[AuditHook] = None

    def on_audit(self, hook: Optional[AuditHook]) -> None:
        self._hook = hook

    def write(self, action: AuditAction, job: Optional[str], details: Optional[dict[str, Any]] = None,
              **kw: Any) -> None:
        action = AuditAction(action)  # a word outside the enum is a mistake here, not a new line on disk
        details = {**(details or {}), **kw}
        entry: dict[str, Any] = {"t": round(time.time(), 3), "node": self.node, "action": action.value, "job": job}
        entry.update((k, v) for k, v in details.items() if k not in entry)
        try:
            with open(self.path, "a") as f:
                f.write(json.dumps(entry, default=str) + "\n")
        except OSError as exc:  # a full disk: the action goes on, the failure is an alert
            writes.failed(self.path, exc)
        else:
            writes.ok(self.path)
        if self._hook is not None:
            try:
                self._hook(action, job, entry)
            except Exception:  # noqa: BLE001 -- the timeline must never stop an action
                log.exception("audit hook failed on %s", action)
