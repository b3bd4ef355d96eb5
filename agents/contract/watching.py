"""What a fleet file tells a node's watcher: where to notify ([[notify]]), what to ping
([heartbeat]) and when to alert ([alerts]). The console parses them from the fleet file and
sends them with ``configure``; the watcher keeps them in watch.json. Webhook URLs are secrets:
nothing prints them (:func:`redact`, :func:`shown`)."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import quote, urlsplit, urlunsplit

from .vocab import NOTIFY_EVENTS, EventKind, NotifyFormat

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def redact(url: Optional[str]) -> str:
    """A webhook URL as it may be shown: ``https://hooks…/…`` (its scheme and the start of its
    host; never a path or a query, which is where the token is)."""
    if not url:
        return "-"
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "…"
    host = re.split(r"[/?#@:]", rest, maxsplit=1)[0]
    return f"{scheme}://{host[:5]}…/…"


def redact_url(url: Optional[str]) -> Optional[str]:
    """An endpoint URL (an S3-compatible store's) without its user:password part, for messages;
    the rest is no secret and stays (where the store is)."""
    if not url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def shown(value: Any) -> str:
    """A wrong value for an error message, unless it may be a URL (a webhook's, a secret): a
    value put in the wrong key (``format``, ``events``, ``url_env``) is shown by its kind only."""
    text = value if isinstance(value, str) else repr(value)
    if "://" in text or "/" in text or "@" in text or len(text) > 40:
        return NOT_SHOWN
    return repr(value)


_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_HOST_PATH = re.compile(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+(:\d+)?/")  # hc-ping.com/<uuid>: a URL without its scheme
NOT_SHOWN = "a value not shown (it may be a URL, a secret)"


def may_be_url(text: str) -> bool:
    return "://" in text or bool(_HOST_PATH.match(text))


def scrub(text: str) -> str:
    """An error message with no value that may be a URL: a quoted value that may be one is
    said not to be shown, and any other URL is redacted (``redact``). The safety net of every
    fleet file and watch settings error, whatever the key and whoever wrote the message."""
    text = _QUOTED.sub(lambda m: NOT_SHOWN if may_be_url(m.group(0)[1:-1]) else m.group(0), text)
    return _URL.sub(lambda m: redact(m.group(0)), text)


def agent_args(argv: list[str]) -> list[str]:
    """An agent's own arguments (``--node``, ``--interval``, ``--textfile-dir``...), less the
    home and the mode (``--detached``, ``--once``, ``--ensure``): what a watcher must be started
    with, and what the console sets against the fleet file's to find a stale watcher."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--home":
            skip = True
        elif a not in ("--detached", "--once", "--ensure"):
            out.append(a)
    return out


class ConfigError(ValueError):
    """A [[notify]] or [alerts] entry that cannot be used; the text names it, never its URL
    (a message is scrubbed on its way in)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(scrub(str(message)))


@dataclass(frozen=True)
class NotifyTarget:
    url: Optional[str] = None  # a secret: never shown, logged or written anywhere but watch.json
    url_env: Optional[str] = None  # or the name of an environment variable of the agent on the node
    format: str = NotifyFormat.JSON.value
    events: list[str] = field(default_factory=lambda: [e.value for e in NOTIFY_EVENTS])

    def __post_init__(self) -> None:
        if (self.url is None) == (self.url_env is None):
            raise ConfigError("[[notify]] needs exactly one of 'url' and 'url_env'")
        if self.url is not None and (not isinstance(self.url, str) or not self.url.startswith(("http://", "https://"))):
            raise ConfigError("[[notify]] 'url': expected an http:// or https:// URL")
        if self.url_env is not None and (not isinstance(self.url_env, str) or not _ENV_NAME.fullmatch(self.url_env)):
            raise ConfigError("[[notify]] 'url_env': expected the name of an environment variable (letters, "
                              "digits and _); its value is not shown: it may be a URL, a secret")
        if self.format not in {f.value for f in NotifyFormat}:
            raise ConfigError(f"[[notify]] 'format': expected one of {', '.join(f.value for f in NotifyFormat)}, "
                              f"got {shown(self.format)}")
        known = {e.value for e in NOTIFY_EVENTS}
        if not isinstance(self.events, list) or any(e not in known for e in self.events):
            bad = [e for e in self.events if e not in known] if isinstance(self.events, list) else self.events
            raise ConfigError(f"[[notify]] 'events': {shown(bad)} is not an event; expected some of "
                              f"{', '.join(sorted(known))}")

    @property
    def id(self) -> str:
        """A stable name for the outbox: a short hash, so the URL is in no file name."""
        raw = f"{self.url or ''}|{self.url_env or ''}|{self.format}"
        return hashlib.sha256(raw.encode()).hexdigest()[:12]

    @property
    def label(self) -> str:
        where = redact(self.url) if self.url else f"${self.url_env}"
        return f"{self.format} {where}"

    def resolve(self) -> Optional[str]:
        """The URL to post to, or None when ``url_env`` is not set on this node."""
        return self.url if self.url else (os.environ.get(self.url_env or "") or None)

    def wants(self, kind: EventKind) -> bool:
        return kind.value in self.events

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "NotifyTarget":
        if not isinstance(d, dict):
            raise ConfigError(f"a [[notify]] entry must be a table, got {type(d).__name__}")
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ConfigError(f"[[notify]] has no key {sorted(unknown)[0]!r}; expected url, url_env, format, events")
        return cls(**d)


class HeartbeatError(ConfigError):
    """A [heartbeat] table that cannot be used; the text names the key, never the URL."""


@dataclass(frozen=True)
class HeartbeatConfig:
    url: Optional[str] = dataclasses.field(default=None, repr=False)  # a secret: only in watch.json, never shown
    url_env: Optional[str] = None  # or an environment variable of the agent on the node
    every: float = 60.0  # seconds between pings
    method: str = "GET"
    on_quality: bool = False  # a generate job's quality alert puts the ping on /fail too

    def __post_init__(self) -> None:
        if (self.url is None) == (self.url_env is None):
            raise HeartbeatError("[heartbeat] needs exactly one of 'url' and 'url_env'")
        if self.url is not None and (not isinstance(self.url, str) or not self.url.startswith(("http://", "https://"))):
            raise HeartbeatError("[heartbeat] 'url': expected an http:// or https:// URL")
        if self.url_env is not None and (not isinstance(self.url_env, str) or not _ENV_NAME.fullmatch(self.url_env)):
            raise HeartbeatError("[heartbeat] 'url_env': expected the name of an environment variable (letters, "
                                 "digits and _); its value is not shown: it may be a URL, a secret")
        every = self.every
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not 1 <= every <= 86400:
            raise HeartbeatError(f"[heartbeat] 'every': expected seconds from 1 to 86400, got {shown(every)}")
        if self.method not in ("GET", "POST"):
            raise HeartbeatError(f"[heartbeat] 'method': expected GET or POST, got {shown(self.method)}")
        if not isinstance(self.on_quality, bool):
            raise HeartbeatError(f"[heartbeat] 'on_quality': expected true or false, got {shown(self.on_quality)}")

    @property
    def label(self) -> str:
        return redact(self.url) if self.url else f"${self.url_env}"

    def resolve(self, node: str) -> Optional[str]:
        url = self.url or os.environ.get(self.url_env or "") or None
        return url.replace("{node}", quote(node, safe="")) if url else None

    @classmethod
    def from_dict(cls, d: Any) -> "HeartbeatConfig":
        if not isinstance(d, dict):
            raise HeartbeatError(f"[heartbeat] must be a table, got {type(d).__name__}")
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise HeartbeatError(f"[heartbeat] has no key {sorted(unknown)[0]!r}; expected url, url_env, every, "
                                 f"method, on_quality")
        return cls(**d)


# the [alerts] key of each quality problem of generate (agents/watch/checks.py judges them)
QUALITY_PCT = {"cut_pct": "cut_at_max_tokens", "empty_pct": "empty_answer", "no_answer_pct": "no_answer",
               "repetition_pct": "repetition"}


@dataclass(frozen=True)
class AlertThresholds:
    """The fleet file's ``[alerts]``; the defaults are in docs/fleet-file.md ("[alerts]")."""

    gpu_temp_c: float = 85.0  # a GPU at or above this
    disk_free_pct: float = 5.0  # a disk the jobs write to with less free than this
    disk_fill_s: float = 86400.0  # a disk the jobs write to projected full within this long (disk_filling) ...
    disk_trend_s: float = 600.0  # ... at the rate it filled over this long (known from a fifth of it on)
    stall_s: float = 600.0  # a live job without progress this long (a job's stall_after_s wins)
    idle_gpu_s: float = 1800.0  # a running job's GPU at 0% use this long
    repeat_s: float = 900.0  # the same event for the same job or GPU is notified at most this often
    plan_drift_pct: float = 25.0  # a live job heading for a wall time this far (%) over its plan.json
    s3_backlog_s: float = 1800.0  # a live job's oldest upload waiting this long
    servers_resting_pct: float = 25.0  # more than this share (%) of a live job's servers ...
    servers_resting_s: float = 600.0  # ... resting or failing this long
    idle_paid_s: float = 1800.0  # a priced GPU idle (no job, or 0% use) this long
    node_lost_s: float = 300.0  # a node unreachable this long is lost: its on_node_lost = "move" jobs move to a spare
    # a live generate job's last completions (up to 1,000, judged from 100) with more than this
    # share (%) of a problem (agents/workers/generate/quality.py); 100: never
    cut_pct: float = 20.0  # cut at max_tokens
    empty_pct: float = 5.0  # nothing came back
    no_answer_pct: float = 10.0  # reasoning and no answer
    repetition_pct: float = 10.0  # the text's tail loops

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v)):
                raise ConfigError(f"[alerts] {f.name!r}: expected a finite number >= 0, got {v!r}")
            if f.name in QUALITY_PCT and v > 100:
                raise ConfigError(f"[alerts] {f.name!r}: expected a percentage from 0 to 100, got {v!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AlertThresholds":
        if not isinstance(d, dict):
            raise ConfigError(f"[alerts] must be a table, got {type(d).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = set(d) - set(names)
        if unknown:
            raise ConfigError(f"[alerts] has no key {sorted(unknown)[0]!r}; expected one of {', '.join(names)}")
        return cls(**d)


def heartbeat_from(raw: Any) -> Optional[HeartbeatConfig]:
    """[heartbeat] from watch.json or configure; ConfigError (naming the key, never the URL)."""
    if raw is None:
        return None
    try:
        return HeartbeatConfig.from_dict(raw)
    except (HeartbeatError, TypeError) as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class WatchSettings:
    """``configure``'s ``watch``: a fleet file's [[notify]], [alerts] and [heartbeat], and which
    fleet file they came from; each part checked as the fleet parser checks it, the URLs never
    in a message."""

    fleet: Optional[str] = None
    notify: list[NotifyTarget] = field(default_factory=list)
    alerts: AlertThresholds = field(default_factory=AlertThresholds)
    heartbeat: Optional[HeartbeatConfig] = None
    price_per_hour: Optional[float] = None  # this node's price (the idle_paid alert); None: not priced
    idle_action: Optional[str] = None  # this node's [[nodes]] idle_action (watch/idle.py); None: alert only

    def __post_init__(self) -> None:
        if self.idle_action is not None and (not isinstance(self.idle_action, str) or not self.idle_action.strip()):
            raise ConfigError("'watch': 'idle_action' must be a shell command (a non-empty string)")
        p = self.price_per_hour
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not (p >= 0 and math.isfinite(p))):
            raise ConfigError(f"'watch': 'price_per_hour' must be a finite number >= 0, got {p!r}")

    @classmethod
    def from_plain(cls, d: Any) -> "WatchSettings":
        """How :func:`~gpudeck.agents.contract.plain.from_dict` reads it inside an op."""
        if not isinstance(d, dict):
            raise ConfigError(f"'watch' must be an object, got {type(d).__name__}")
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ConfigError(f"'watch' has no key {sorted(unknown)[0]!r}; expected fleet, notify, alerts, heartbeat, "
                              f"price_per_hour, idle_action")
        notify = d.get("notify") or []
        if not isinstance(notify, list):
            raise ConfigError(f"'watch': 'notify' must be a list of [[notify]] entries, got {type(notify).__name__}")
        try:
            return cls(fleet=d["fleet"] if isinstance(d.get("fleet"), str) else None,
                       notify=[NotifyTarget.from_dict(n) for n in notify],
                       alerts=AlertThresholds.from_dict(d.get("alerts") or {}), heartbeat=heartbeat_from(d.get("heartbeat")),
                       price_per_hour=d.get("price_per_hour"), idle_action=d.get("idle_action"))
        except TypeError as exc:  # a value of the wrong type: the dataclass's own words, never a URL
            raise ConfigError(f"'watch': {exc}") from None
