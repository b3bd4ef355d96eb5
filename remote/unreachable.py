"""``node_unreachable``: the one event no node can send about itself. A console that keeps
running (`gpudeck watch status --follow`) sends it to the fleet file's ``[[notify]]`` targets
when a node has been unreachable for ``after_s``, and one ``resolved`` when it answers again.

The messages go from a thread of their own with the node side's formats and timeouts
(agents/watch/notify.py); a receiver that is down is retried a few times, never holding up
the console. ``url_env`` is read from the console's environment here.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Optional

from ..agents.contract.vocab import EventKind
from ..agents.contract.watching import NotifyTarget

log = logging.getLogger(__name__)


class UnreachableNotifier:
    def __init__(self, targets: list[NotifyTarget], after_s: float = 120.0, retries: int = 5) -> None:
        self.targets = [t for t in targets if t.wants(EventKind.NODE_UNREACHABLE) or t.wants(EventKind.RESOLVED)]
        self.after_s, self.retries = after_s, retries
        self.down_since: dict[str, float] = {}
        self.reason: dict[str, str] = {}
        self.notified: set[str] = set()
        self.sent: list[dict[str, Any]] = []  # what was sent (or tried), for the console to show

    def down(self, node: str, reason: str, since: float) -> None:
        self.down_since.setdefault(node, since)
        self.reason[node] = reason

    def up(self, node: str) -> None:
        since = self.down_since.pop(node, None)
        if node in self.notified and since is not None:
            self.notified.discard(node)
            self._send(EventKind.RESOLVED, node, f"resolved after {time.time() - since:.0f} s: node {node} "
                                                 f"answers again")

    def check(self, now: Optional[float] = None) -> None:
        """Call now and then: a node down long enough is notified once."""
        now = time.time() if now is None else now
        for node, since in self.down_since.items():
            if node not in self.notified and now - since >= self.after_s:
                self.notified.add(node)
                self._send(EventKind.NODE_UNREACHABLE, node, f"node {node} unreachable for {now - since:.0f} s: "
                                                             f"{self.reason.get(node, '')}")

    def _send(self, kind: EventKind, node: str, message: str) -> None:
        event = {"t": time.time(), "seq": 0, "node": node, "kind": kind.value, "message": message, "job": None,
                 "gpu": None, "key": f"node_unreachable:{node}", "details": {"from": "console"}}
        self.sent.append(event)
        targets = [t for t in self.targets if t.wants(kind)]
        if targets:
            threading.Thread(target=self._deliver, args=(targets, event), name="notify-unreachable",
                             daemon=True).start()

    def _deliver(self, targets: list[NotifyTarget], event: dict[str, Any]) -> None:
        from ..agents.contract.notify import deliver

        mid = uuid.uuid4().hex
        for target in targets:
            for attempt in range(self.retries):
                why = deliver(target, event, mid)
                if why is None:
                    break
                log.warning("node_unreachable to %s: %s", target.label, why)
                time.sleep(min(2 ** attempt, 30))
