"""A silent node is heard: the watcher pings a push monitor, and the missing ping is the alert.

The fleet file's ``[heartbeat]`` (``url`` or ``url_env``, ``every``, ``method``) reaches the
node with ``configure``. While the node is watched, its watcher sends a GET (or POST) to the
URL every ``every`` seconds, from a thread of its own, the way healthchecks.io, Uptime Kuma
and Cronitor expect of a push check; ``{node}`` in the URL is the node's name. While a job has
given up restarting or a GPU has a critical health event (XID, uncorrected ECC, retired
pages), or, with ``on_quality = true``, while a generate job has a quality alert (its answers
cut, empty, unanswered or looping past an ``[alerts]`` ``*_pct``), ``/fail`` is appended, and the plain URL comes back once that clears. A node that
dies, loses power or loses its network stops pinging, and the service alerts with no laptop
involved.

The URL is a secret, like a ``[[notify]]`` URL: it is kept in watch.json (0600) and shown
only redacted. Each ping has a total deadline (not a per-read timeout) and reads at most
:data:`ANSWER_BYTES` of the answer.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

from ..contract.clock import SYSTEM, Clock
from ..contract.ops import HeartbeatStatus, Ping
from ..contract.vocab import AlertKind
from ..contract.watching import HeartbeatConfig

log = logging.getLogger("agents")

DEADLINE_S = 10.0  # one ping, connect to last byte read
FAILING = (AlertKind.GAVE_UP, AlertKind.GPU_XID, AlertKind.GPU_ECC, AlertKind.GPU_PAGES)
# with [heartbeat] on_quality = true: a generate job's junk fails the node too
QUALITY = (AlertKind.QUALITY_CUT, AlertKind.QUALITY_EMPTY, AlertKind.QUALITY_NO_ANSWER, AlertKind.QUALITY_REPETITION)


def failing_reason(alerts: list[Any], on_quality: bool = False) -> Optional[str]:
    """Why the node pings /fail: the first alert that makes it fail (a quality alert too, with
    ``on_quality``), or None."""
    for a in alerts:
        if a.kind in FAILING or (on_quality and a.kind in QUALITY):
            return f"{a.kind}: {a.message}"
    return None


class Heartbeat:
    """The pinger: one daemon thread, armed by :meth:`serve`, told of failures by the tick."""

    def __init__(self, node: str, clock: Clock = SYSTEM,
                 send: Optional[Callable[[str, str, str], str]] = None) -> None:
        self.node = node
        self.clock = clock
        self.send = send or _send  # (method, url, body) -> the answer as text: one ping within DEADLINE_S
        self.config: Optional[HeartbeatConfig] = None
        self.on = False  # the node is watched
        self.failing: Optional[str] = None
        self.last: Optional[Ping] = None  # the last ping: when, the answer, to /fail or not
        self.in_flight_since: Optional[float] = None
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._stopped = False

    def serve(self, config: Optional[HeartbeatConfig], on: bool) -> None:
        changed = (config, on) != (self.config, self.on)
        self.config, self.on = config, on
        if config is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
            self._thread.start()
        if changed:
            self._wake.set()

    def set_failing(self, reason: Optional[str]) -> None:
        if (reason is None) != (self.failing is None):
            self._wake.set()  # /fail at once, and back to plain at once
        self.failing = reason

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    def status(self) -> Optional[HeartbeatStatus]:
        if self.config is None:
            return None
        return HeartbeatStatus(target=self.config.label, every=self.config.every, on=self.on, failing=self.failing,
                               last=self.last, in_flight_s=round(self.clock.time() - self.in_flight_since, 1)
                               if self.in_flight_since else None)

    def _run(self) -> None:
        while not self._stopped:
            cfg = self.config
            if cfg is not None and self.on:
                self.ping(cfg)
            self._wake.clear()
            self._wake.wait(cfg.every if cfg is not None else 3600.0)

    def ping(self, cfg: HeartbeatConfig) -> None:
        """One ping, now: to ``/fail`` while :attr:`failing`, noted in :attr:`last`."""
        url = cfg.resolve(self.node)
        fail = self.failing is not None
        if url is None:
            self.last = Ping(at=self.clock.time(), fail=fail, answer=f"${cfg.url_env} is not set on this node")
            return
        if fail:
            url = url.rstrip("/") + "/fail"
        self.in_flight_since = self.clock.time()
        try:
            answer = self.send(cfg.method, url, self.failing or "ok")
        finally:
            self.in_flight_since = None
        self.last = Ping(at=self.clock.time(), fail=fail, answer=str(answer))


def _send(method: str, url: str, body: str) -> str:
    """One ping within a total deadline, reading at most a few KiB (watch/http.py); the answer
    as text, never the URL."""
    from ..contract.http import quiet_http_logs, request

    quiet_http_logs()
    answer = request(method, url, DEADLINE_S, content=body.encode() if method == "POST" else None)
    return f"HTTP {answer.status}" if answer.status is not None else f"failed: {answer.error}"
