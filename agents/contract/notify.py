"""One notification to one target: the body in its format, one POST, an answer that never
holds the URL.

Webhook URLs are secrets. Nothing here logs one; an error text that might quote it (an
exception from the HTTP client) is scrubbed, and httpx's own request log is kept quiet.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Optional
from urllib.parse import urlsplit

from .vocab import EventKind, NotifyFormat
from .watching import NotifyTarget, redact



def _deadline_s(raw: str) -> float:
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0.5 <= seconds <= 600:
        raise ValueError(f"$GPUDECK_NOTIFY_DEADLINE_S: expected seconds from 0.5 to 600, got {raw[:20]!r}")
    return seconds


# one attempt, connect to last byte read (http.py); then it is retried later. The environment
# may set it (a receiver known to be slow; a test that does not wait 15 s for a cut)
DEADLINE_S = _deadline_s(os.environ.get("GPUDECK_NOTIFY_DEADLINE_S", "15"))
_URGENT = {EventKind.DIED.value, EventKind.GAVE_UP.value, EventKind.GPU_HEALTH.value,
           EventKind.NODE_UNREACHABLE.value, EventKind.DISK.value}


def scrub(text: str, url: Optional[str]) -> str:
    """``text`` without ``url`` or any piece of its path and query."""
    if not url:
        return text
    shown = redact(url)
    text = text.replace(url, shown)
    parts = urlsplit(url)
    for piece in (parts.path + ("?" + parts.query if parts.query else ""), parts.path, parts.query, parts.netloc):
        if piece and len(piece) > 3 and piece != "/":
            text = text.replace(piece, "…")
    return text


def title(event: dict[str, Any]) -> str:
    kind = event.get("kind")
    what = f"{kind}" + (f" {event['job']}" if event.get("job") else "") + \
        (f" GPU {event['gpu']}" if event.get("gpu") is not None else "")
    return f"gpudeck {event.get('node')}: {what}"


def body(fmt: str, event: dict[str, Any], message_id: str) -> tuple[bytes, dict[str, str]]:
    """The request body and headers of ``event`` for a target of format ``fmt``."""
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(event.get("t") or time.time()))
    if fmt == NotifyFormat.SLACK.value:
        mark = ":white_check_mark:" if event.get("kind") == EventKind.RESOLVED.value else (
            ":rotating_light:" if event.get("kind") in _URGENT else ":information_source:")
        text = f"{mark} *{title(event)}* — {event.get('message')} ({when})"
        return json.dumps({"text": text}).encode(), {"Content-Type": "application/json"}
    if fmt == NotifyFormat.NTFY.value:
        resolved = event.get("kind") == EventKind.RESOLVED.value
        headers = {"Title": title(event), "Priority": "high" if event.get("kind") in _URGENT else "default",
                   "Tags": "white_check_mark" if resolved else "warning", "Content-Type": "text/plain; charset=utf-8"}
        return f"{event.get('message')} ({when})".encode(), headers
    doc = {"id": message_id, "source": "gpudeck", **{k: event.get(k) for k in
                                                        ("node", "kind", "job", "gpu", "message", "key", "t", "seq")},
           "time": when, "details": event.get("details") or {}}
    return json.dumps(doc, default=str).encode(), {"Content-Type": "application/json"}


def deliver(target: NotifyTarget, event: dict[str, Any], message_id: str,
            deadline_s: float = DEADLINE_S) -> Optional[str]:
    """POST one message within a total deadline, reading at most a few KiB of the answer
    (http.py); None when the receiver took it (2xx), else why not, never the URL."""
    from .http import quiet_http_logs, request

    url = target.resolve()
    if url is None:
        return f"${target.url_env} is not set in the watcher's environment on this node"
    data, headers = body(target.format, event, message_id)
    headers["X-Gpudeck-Message-Id"] = message_id
    quiet_http_logs()
    answer = request("POST", url, deadline_s, content=data, headers=headers)
    if answer.status is None:
        return scrub(str(answer.error), url)
    if 200 <= answer.status < 300:
        return None
    return f"the receiver answered HTTP {answer.status}"
