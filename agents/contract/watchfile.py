"""``<home>/watch.json``: what the watcher needs when no console is there, and its one reader.

The console sends it with ``configure`` (the fleet file's ``[[jobs]]``, ``[[notify]]`` and
``[alerts]``) and the agent keeps the last one, with the ``watching`` flag that `gpudeck watch
start|stop` sets. The file is in the agent's 0700 home: it holds webhook URLs, which are
secrets, and nothing else ever prints them (:func:`~.watching.redact`). The watcher saves it
(agents/watch/config.py: a failed write is an alert there).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypeVar

from .watching import AlertThresholds, ConfigError, HeartbeatConfig, NotifyTarget, WatchSettings, heartbeat_from
from .documents import write_document

log = logging.getLogger("agents")
W = TypeVar("W", bound="WatchDoc")

WATCH_FILE = "watch.json"


@dataclass
class WatchDoc:
    watching: bool = False
    since: Optional[float] = None  # when `watch start` set the flag
    fleet: Optional[str] = None  # the fleet file it came from, "host:/path" (remote.fleet.Fleet.identity)
    jobs: list[dict[str, Any]] = field(default_factory=list)  # the last `configure`'s job specs
    notify: list[NotifyTarget] = field(default_factory=list)
    alerts: AlertThresholds = field(default_factory=AlertThresholds)
    supervisor: Optional[str] = None  # what `watch start` registered the watcher with (watch/supervise.py)
    heartbeat: Optional[HeartbeatConfig] = None  # the fleet file's [heartbeat] (watch/heartbeat.py pings it)
    price_per_hour: Optional[float] = None  # this node's price in the fleet file (the idle_paid alert)
    idle_action: Optional[str] = None  # this node's idle_action (watch/idle.py): a shell command; None: alert only
    agent_args: Optional[list[str]] = None  # the agent's arguments `watch start` last sent (the fleet file's)

    @classmethod
    def load(cls: "type[W]", home: Path) -> "W":
        """The settings in ``home``'s watch.json: none (the defaults) when there is no file or it
        cannot be read, and without its notify and alert settings when those are wrong (each
        said in the log; never a URL)."""
        path = Path(home) / WATCH_FILE
        try:
            doc = json.loads(path.read_bytes())
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            log.warning("watch: cannot read %s (%s); starting with no watch settings", path, exc)
            return cls()
        if not isinstance(doc, dict):
            log.warning("watch: %s holds %s, not an object; starting with no watch settings", path,
                        type(doc).__name__)
            return cls()
        try:
            return cls(watching=bool(doc.get("watching")), since=doc.get("since"), fleet=doc.get("fleet"),
                       jobs=_jobs(doc.get("jobs")), supervisor=doc.get("supervisor"),
                       heartbeat=heartbeat_from(doc.get("heartbeat")),
                       notify=[NotifyTarget.from_dict(n) for n in doc.get("notify") or []],
                       alerts=AlertThresholds.from_dict(doc.get("alerts") or {}),
                       price_per_hour=_price(doc.get("price_per_hour")), agent_args=_args(doc.get("agent_args")),
                       idle_action=doc.get("idle_action") if isinstance(doc.get("idle_action"), str) else None)
        except (ConfigError, TypeError, ValueError) as exc:
            log.warning("watch: %s in %s; its notify and alert settings are ignored", exc, path)
            return cls(watching=bool(doc.get("watching")), jobs=_jobs(doc.get("jobs")),
                       supervisor=doc.get("supervisor") if isinstance(doc.get("supervisor"), str) else None)

    def _write(self, path: Path) -> None:
        # the one writer of documents (agents/contract/documents.py); it holds webhook URLs: 0600
        # from its first byte
        write_document(path, self, mode=0o600)

    def apply(self, settings: WatchSettings, jobs: list[dict[str, Any]]) -> None:
        """A console's ``configure`` with its fleet file's watch settings, checked on their way
        in (ops.Configure, WatchSettings.from_plain)."""
        self.notify, self.alerts, self.jobs = list(settings.notify), settings.alerts, list(jobs)
        self.heartbeat, self.fleet = settings.heartbeat, settings.fleet
        self.price_per_hour = settings.price_per_hour
        self.idle_action = settings.idle_action


def _jobs(v: Any) -> list[dict[str, Any]]:
    """The saved job specs: each an object (JobSpec reads them, agents/watch/watcher.py)."""
    return [j for j in v if isinstance(j, dict)] if isinstance(v, list) else []


def _args(v: Any) -> Optional[list[str]]:
    return list(v) if isinstance(v, list) and all(isinstance(a, str) for a in v) else None


def _price(v: Any) -> Optional[float]:
    """watch.json's price: a number >= 0, or None (a file written by hand may hold anything)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
        return None
    return float(v)
