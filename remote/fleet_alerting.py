"""The fleet file's alerting tables, what the node's watcher is told to raise and where to send
it: ``[alerts]``, ``[[notify]]`` and ``[heartbeat]`` (remote/fleet.py reads the rest). A mistake
is reported with its line, as everywhere in the fleet file, and never with a URL's value:
webhook URLs are secrets."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from ..agents.contract.watching import AlertThresholds, ConfigError, HeartbeatConfig, HeartbeatError, NotifyTarget
from .fleet_check import kind_of, unknown_key
from .fleet_text import Fail, Locator

ALERT_KEYS = [f.name for f in dataclasses.fields(AlertThresholds)]
NOTIFY_KEYS = [f.name for f in dataclasses.fields(NotifyTarget)]
HEARTBEAT_KEYS = [f.name for f in dataclasses.fields(HeartbeatConfig)]


def parse_alerts(raw: Any, loc: Locator, fail: Fail) -> AlertThresholds:
    if not isinstance(raw, dict):
        raise fail(loc.top("alerts"), "'alerts' must be a table: [alerts]")
    for k, v in raw.items():
        if k not in ALERT_KEYS:
            raise fail(loc.key("alerts", None, k), unknown_key("[alerts]", k, ALERT_KEYS))
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v)):
            shown = repr(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else kind_of(v)
            raise fail(loc.key("alerts", None, k), f"[alerts] {k!r}: expected a finite number >= 0, got {shown}")
    try:
        return AlertThresholds.from_dict(raw)
    except ConfigError as exc:
        key = next((k for k in raw if repr(k) in str(exc)), None)
        raise fail(loc.key("alerts", None, key) if key else loc.top("alerts"), str(exc)) from None


def parse_notify(raw: Any, loc: Locator, fail: Fail) -> list[NotifyTarget]:
    """[[notify]] tables. An error names the table and the key, never the URL."""
    if not isinstance(raw, list):
        raise fail(loc.top("notify"), "'notify' must be an array of tables: [[notify]]")
    out: list[NotifyTarget] = []
    for i, table in enumerate(raw):
        where = f"[[notify]] #{i + 1}"
        if not isinstance(table, dict):
            raise fail(loc.table("notify", i), f"{where} must be a table")
        for k, v in table.items():
            if k not in NOTIFY_KEYS:
                raise fail(loc.key("notify", i, k), unknown_key(where, k, NOTIFY_KEYS))
            expected = {"url": str, "url_env": str, "format": str, "events": list}.get(k)
            if expected is not None and not isinstance(v, expected):
                raise fail(loc.key("notify", i, k), f"{where} {k!r}: expected "
                           f"{'a list of event names' if expected is list else 'a string'}, got {kind_of(v)}")
        try:
            target = NotifyTarget.from_dict(table)
        except ConfigError as exc:
            key = next((k for k in ("url_env", "url", "format", "events") if f"'{k}'" in str(exc)), None)
            text = str(exc).replace("[[notify]]", where, 1)
            raise fail(loc.key("notify", i, key) if key else loc.table("notify", i), text) from None
        if any(t.id == target.id for t in out):
            raise fail(loc.table("notify", i), f"{where}: the same target as an earlier [[notify]]")
        out.append(target)
    return out


def parse_heartbeat(raw: Any, loc: Locator, fail: Fail) -> Optional[HeartbeatConfig]:
    """[heartbeat]: an error names the key and its line, never the URL."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise fail(loc.top("heartbeat"), "'heartbeat' must be a table: [heartbeat]")
    for k, v in raw.items():
        if k not in HEARTBEAT_KEYS:
            raise fail(loc.key("heartbeat", None, k), unknown_key("[heartbeat]", k, HEARTBEAT_KEYS))
        expected = {"url": str, "url_env": str, "method": str, "on_quality": bool}.get(k)
        if expected is not None and not isinstance(v, expected):
            raise fail(loc.key("heartbeat", None, k), f"[heartbeat] {k!r}: expected "
                       f"{'true or false' if expected is bool else 'a string'}, got {kind_of(v)}")
    if isinstance(raw.get("every"), str):  # "5m", "60s": the one duration grammar
        from ..agents.contract.units import parse_duration
        try:
            raw = {**raw, "every": parse_duration(raw["every"])}
        except ValueError as exc:
            raise fail(loc.key("heartbeat", None, "every"), f"[heartbeat] 'every': {exc}") from None
    try:
        return HeartbeatConfig.from_dict(raw)
    except (HeartbeatError, TypeError) as exc:
        key = next((k for k in ("url_env", "url", "every", "method", "on_quality") if f"'{k}'" in str(exc)), None)
        raise fail(loc.key("heartbeat", None, key) if key else loc.top("heartbeat"), str(exc)) from None

