"""One outbound HTTP request of the watcher (a notification, a heartbeat ping), bounded:

- a **total deadline**, connect to last byte: a receiver that drips one byte every few
  seconds is cut off at the deadline (a per-read timeout alone would wait forever), by
  closing the connection from a timer;
- at most :data:`ANSWER_BYTES` of the answer are read, whatever its size (a 500 MB answer
  costs 4 KiB of memory, not 500 MB).

The answer is the status code, or why there is none; never the URL (a secret).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Optional

from .clock import SYSTEM, Clock

ANSWER_BYTES = 4096


def quiet_http_logs() -> None:
    """httpx logs every request with its URL at INFO: never in the agent's log."""
    import logging

    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


@dataclass(frozen=True)
class Answer:
    status: Optional[int]  # the HTTP status, None when the request failed
    error: Optional[str] = None  # why it failed: a type of error, never the URL
    seconds: float = 0.0


def request(method: str, url: str, deadline_s: float, content: Optional[bytes] = None,
            headers: Optional[dict[str, str]] = None, connect_s: float = 3.0, clock: Clock = SYSTEM,
            transport: Any = None) -> Answer:
    """``transport``: httpx's, for a test that answers without a socket (httpx.MockTransport)."""
    import httpx

    t0 = clock.monotonic()
    client = httpx.Client(timeout=httpx.Timeout(deadline_s, connect=min(connect_s, deadline_s)),
                          follow_redirects=False, transport=transport)
    cut = threading.Timer(deadline_s, client.close)  # the total deadline: the connection goes
    cut.daemon = True
    cut.start()
    try:
        with client.stream(method, url, content=content, headers=headers) as r:
            got = 0
            for chunk in r.iter_raw():
                got += len(chunk)
                if got >= ANSWER_BYTES or clock.monotonic() - t0 > deadline_s:
                    break
            return Answer(r.status_code, None, clock.monotonic() - t0)
    except Exception as exc:  # noqa: BLE001 -- httpx's errors, and a client closed under a read
        took = clock.monotonic() - t0
        if took >= deadline_s - 0.05 or isinstance(exc, httpx.TimeoutException):
            return Answer(None, f"no whole answer within {deadline_s:g} s", took)
        return Answer(None, type(exc).__name__, took)
    finally:
        cut.cancel()
        client.close()
