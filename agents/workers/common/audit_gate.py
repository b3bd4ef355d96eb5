"""The pre-launch audit gate: before a worker spends hours of GPU time, its input goes
through agents/workers/audit.py, and degenerate data stops the run unless ``--force``.

The verdict is cached in ``OUT/audit.json`` under a key that the program derives from its
input files (names, sizes, mtimes), so a relaunch over unchanged input does not read them
again; a changed key audits afresh. The cache is a hint: written without fsync, and a cache
that cannot be read or written only costs a new audit.
"""

from __future__ import annotations

from ...contract.kinds import DEFAULT_AUDIT_SAMPLE

import json
import logging
import os
from typing import Any, Callable, Optional

from ..audit import AuditReport
from ...contract.atomic import atomic_write_json

log = logging.getLogger("gpudeck.audit")

AUDIT_FILE = "audit.json"
AUDIT_SAMPLE = DEFAULT_AUDIT_SAMPLE  # lines read by the audit before a start, spread over the whole input


def audit_verdict(out_dir: str, key: Any, audit: Callable[[], AuditReport], what: str,
                  logger: Optional[logging.Logger] = None) -> Optional[str]:
    """None when the data looks usable, else the audit's reasons in plain sentences.
    ``audit()`` runs only when ``OUT/audit.json`` holds no verdict for ``key``; its report
    is logged (``audit of WHAT:``) and cached."""
    logger = logger or log
    cache = os.path.join(out_dir, AUDIT_FILE)
    try:
        with open(cache) as f:
            doc = json.load(f)
        if doc.get("key") == key:
            return " ".join(doc["reasons"]) if doc["degenerate"] else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    report = audit()
    logger.info("audit of %s:\n%s", what, report.render())
    try:
        atomic_write_json(cache, {"key": key, "degenerate": report.degenerate, "reasons": report.reasons,
                                  "samples": report.samples, "summary": report.render()}, fsync=False)
    except OSError as exc:
        logger.warning("cannot cache the audit in %s: %s", cache, exc.strerror or exc)
    return " ".join(report.reasons) if report.degenerate else None
