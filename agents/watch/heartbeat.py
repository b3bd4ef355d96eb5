"""A silent node is heard: the watcher pings a push monitor, and the missing ping is the alert.

The fleet file's ``[heartbeat]`` (``url`` or ``url_env``, ``every``, ``method``) reaches the
node with ``configure``. While the node is watched, its watcher sends a GET (or POST) to the
URL every ``every`` seconds, from a thread of its own, the way healthchecks.io, Uptime Kuma
and Cronitor expect of a push check; ``{node}`` in the URL is the node's name. While a job has
given up restarting or a GPU has a critical health event (XID, uncorrected ECC, retired
pages), ``/fail`` is appended, and the plain URL comes back once that clears. A node that
dies, loses power or loses its network stops pinging, and the service alerts with no laptop
involved.

The URL is a secret, like a ``[[notify]]`` URL: it is kept in watch.json (0600) and shown
only redacted. Each ping has a total deadline (not a per-read timeout) and reads at most
:data:`ANSWER_BYTES` of the answer.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import quote

from gpudeck.agents.jobs import AlertKind

log = logging.getLogger("agents")

DEADLINE_S = 10.0  # one ping, connect to last byte read
FAILING = (AlertKind.GAVE_UP, AlertKind.GPU_XID, AlertKind.GPU_ECC, AlertKind.GPU_PAGES)


class HeartbeatError(ValueError):
    """A [heartbeat] table that cannot be used; the text names the key, never the URL."""


@dataclass(frozen=True)
class HeartbeatConfig:
    url: Optional[str] = dataclasses.field(default=None, repr=False)  # a secret: only in watch.json, never shown
    url_env: Optional[str] = None  # or an environment variable of the agent on the node
    every: float = 60.0  # seconds between pings
    method: str = "GET"

    def __post_init__(self) -> None:
        from gpudeck.agents.watch.config import _ENV_NAME

        if (self.url is None) == (self.url_env is None):
            raise HeartbeatError("[heartbeat] needs exactly one of 'url' and 'url_env'")
        if self.url is not None and (not isinstance(self.url, str) or not self.url.startswith(("http://", "https://"))):
            raise HeartbeatError("[heartbeat] 'url': expected an http:// or https:// URL")
        if self.url_env is not None and (not isinstance(self.url_env, str) or not _ENV_NAME.fullmatch(self.url_env)):
            raise HeartbeatError("[heartbeat] 'url_env': expected the name of an environment variable (letters, "
                                 "digits and _); its value is not shown: it may be a URL, a secret")
        every = self.every
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not 1 <= every <= 86400:
            raise HeartbeatError(f"[heartbeat] 'every': expected seconds from 1 to 86400, got {every!r}")
        if self.method not in ("GET", "POST"):
            raise HeartbeatError(f"[heartbeat] 'method': expected GET or POST, got {self.method!r}")

    @property
    def label(self) -> str:
        from gpudeck.agents.watch.config import redact

        return redact(self.url) if self.url else f"${self.url_env}"

    def resolve(self, node: str) -> Optional[str]:
        import os

        url = self.url or os.environ.get(self.url_env or "") or None
        return url.replace("{node}", quote(node, safe="")) if url else None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> "HeartbeatConfig":
        if not isinstance(d, dict):
            raise HeartbeatError(f"[heartbeat] must be a table, got {type(d).__name__}")
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise HeartbeatError(f"[heartbeat] has no key {sorted(unknown)[0]!r}; expected url, url_env, every, "
                                 f"method")
        return cls(**d)


def failing_reason(alerts: list[Any]) -> Optional[str]:
    """Why the node pings /fail: the first alert that makes it fail, or None."""
    for a in alerts:
        if a.kind in FAILING:
            return f"{a.kind}: {a.message}"
    return None


class Heartbeat:
    """The pinger: one daemon thread, armed by :meth:`serve`, told of failures by the tick."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.config: Optional[HeartbeatConfig] = None
        self.on = False  # the node is watched
        self.failing: Optional[str] = None
        self.last: Optional[dict[str, Any]] = None  # the last ping: when, the answer, to /fail or not
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

    def status(self) -> Optional[dict[str, Any]]:
        if self.config is None:
            return None
        return {"target": self.config.label, "every": self.config.every, "on": self.on,
                "failing": self.failing, "last": self.last,
                "in_flight_s": round(time.time() - self.in_flight_since, 1) if self.in_flight_since else None}

    def _run(self) -> None:
        while not self._stopped:
            cfg = self.config
            if cfg is not None and self.on:
                self._ping(cfg)
            self._wake.clear()
            self._wake.wait(cfg.every if cfg is not None else 3600.0)

    def _ping(self, cfg: HeartbeatConfig) -> None:
        url = cfg.resolve(self.node)
        fail = self.failing is not None
        if url is None:
            self.last = {"at": time.time(), "fail": fail, "answer": f"${cfg.url_env} is not set on this node"}
            return
        if fail:
            url = url.rstrip("/") + "/fail"
        self.in_flight_since = time.time()
        try:
            answer = _send(cfg.method, url, self.failing or "ok")
        finally:
            self.in_flight_since = None
        self.last = {"at": time.time(), "fail": fail, "answer": answer}


def _send(method: str, url: str, body: str) -> str:
    """One ping within a total deadline, reading at most a few KiB (watch/http.py); the answer
    as text, never the URL."""
    from gpudeck.agents.watch.http import request
    from gpudeck.agents.watch.notify import quiet_http_logs

    quiet_http_logs()
    answer = request(method, url, DEADLINE_S, content=body.encode() if method == "POST" else None)
    return f"HTTP {answer.status}" if answer.status is not None else f"failed: {answer.error}"
