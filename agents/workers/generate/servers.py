"""The servers a generation run sends to, and what one attempt at one prompt does.

- :class:`ServerPool` hands out the server with the fewest outstanding requests that has
  room (``--concurrency`` is per server). A server that fails ``min(concurrency, 8)`` times
  in a row (at least 3) rests (5 s, doubling up to 60 s), then gets one probe request; a
  success brings it back. Connection refusals never count against a prompt.
- :meth:`ServerPool.request` is one attempt: a timeout, a 5xx, a 408/429, an answer that is
  not a chat completion or a dropped connection is worth a retry; any other 4xx (a prompt
  the server refuses) is not.

aiohttp is imported inside the methods that use it: importing this module stays cheap.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from typing import Any, Optional

log = logging.getLogger("gpudeck.generate")


class UsageError(ValueError):
    pass


class Server:
    """One endpoint and what we know of its health."""

    __slots__ = ("url", "endpoint", "concurrency", "fail_limit", "outstanding", "failures", "rest_until", "rest_s",
                 "probing", "ok", "failed", "last_error", "last_warned", "down_since")

    def __init__(self, url: str, concurrency: int, fail_threshold: int = 3) -> None:
        self.url = url
        self.endpoint = url + "/v1/chat/completions"
        self.concurrency = concurrency
        # failures in a row before a rest: a dead server fails every request in flight at once,
        # a flaky one (a few % of bad answers) almost never fails 8 in a row
        self.fail_limit = max(fail_threshold, min(concurrency, 8))
        self.outstanding = 0
        self.failures = 0  # in a row
        self.rest_until = 0.0
        self.rest_s = 0.0
        self.probing = False
        self.ok = 0
        self.failed = 0
        self.last_error: Optional[str] = None
        self.last_warned = 0.0
        self.down_since: Optional[float] = None  # the first failure of this run of failures (unix time)

    def room(self, now: float) -> bool:
        if now < self.rest_until:
            return False
        return self.outstanding < (1 if self.probing else self.concurrency)

    def state(self, now: float) -> str:
        if now < self.rest_until:
            return "resting"
        return "probing" if self.probing else ("failing" if self.failures else "ok")

    def to_json(self, now: float) -> dict:
        return {"url": self.url, "state": self.state(now), "outstanding": self.outstanding, "ok": self.ok,
                "failed": self.failed, "last_error": self.last_error,
                "down_since": self.down_since if self.failures else None}


def normalize_server(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--server {url!r}: expected a URL like http://host:port")
    for suffix in ("/v1/chat/completions", "/v1"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url


class AttemptFailed(Exception):
    """One attempt at one prompt failed. ``retry``: worth another attempt; ``server_fault``:
    counts against the server's health; ``charge``: counts against the prompt's attempts."""

    def __init__(self, why: str, retry: bool = True, server_fault: bool = True, charge: bool = True) -> None:
        super().__init__(why)
        self.retry, self.server_fault, self.charge = retry, server_fault, charge


# ---------------------------------------------------------------- answers

def split_think(content: str) -> tuple[str, str]:
    """(reasoning, answer) from content that carries the reasoning inline (<think>...</think>),
    as servers without a reasoning parser send it."""
    start = content.find("<think>")
    end = content.find("</think>")
    if end < 0 or (start > 0 and content[:start].strip()):
        return "", content
    reasoning = content[start + len("<think>") if start >= 0 else 0:end]
    return reasoning.strip(), content[end + len("</think>"):].lstrip()


def parse_completion(raw: bytes) -> dict:
    """The parts of a chat completion we keep. Raises ValueError on anything else."""
    try:
        doc = json.loads(raw)
    except ValueError:
        raise ValueError(f"the answer is not JSON: {raw[:120]!r}") from None
    try:
        choice = doc["choices"][0]
        msg = choice["message"]
        content = msg.get("content") or ""
        if not isinstance(content, str):
            raise TypeError("content is not a string")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ValueError(f"the answer is not a chat completion ({type(exc).__name__}: {exc}): {raw[:120]!r}") \
            from None
    reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
    if not reasoning and "</think>" in content:
        reasoning, content = split_think(content)
    usage = doc.get("usage") or {}
    details = usage.get("completion_tokens_details") or {}
    return {
        "reasoning": reasoning, "answer": content, "finish_reason": choice.get("finish_reason"),
        "prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens"),
        "reasoning_tokens": usage.get("reasoning_tokens", details.get("reasoning_tokens")),
    }


# ---------------------------------------------------------------- the pool

class ServerPool:
    """The run's servers: which one takes the next request, their health, one attempt."""

    def __init__(self, urls: list[str], concurrency: int, fail_threshold: int, rest_s: float, max_rest_s: float,
                 request_timeout_s: float) -> None:
        self.servers = [Server(u, concurrency, fail_threshold) for u in urls]
        self.rest_s, self.max_rest_s, self.request_timeout_s = rest_s, max_rest_s, request_timeout_s
        self.session: Any = None  # the aiohttp.ClientSession, set by the run
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._rr = 0
        self.last_ok = time.monotonic()  # the last answer from any server (the run's start before one)

    def dead_for(self, now: float) -> float:
        """Seconds since the last answer while every server is failing or resting; 0 while one is fine."""
        if any(s.failures == 0 for s in self.servers):
            return 0.0
        return now - self.last_ok

    @property
    def capacity(self) -> int:
        return sum(s.concurrency for s in self.servers)

    def resting(self, now: float) -> list[str]:
        return [s.url for s in self.servers if s.state(now) == "resting"]

    async def discover_model(self) -> Optional[str]:
        """The first model id a server lists at /v1/models (vLLM refuses a name it does not
        serve; SGLang and llama.cpp take any); None when none lists one."""
        import aiohttp
        name = None
        for s in self.servers:
            try:
                async with self.session.get(s.url + "/v1/models", timeout=aiohttp.ClientTimeout(total=10)) as r:
                    if r.status == 200:
                        data = (await r.json(content_type=None)).get("data") or []
                        name = data[0].get("id") if data and isinstance(data[0], dict) else None
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, AttributeError):
                continue
            if name:
                break
        return name

    async def acquire(self) -> Server:
        while True:
            now = time.monotonic()
            best = None
            n = len(self.servers)
            self._rr = (self._rr + 1) % n
            for i in range(n):
                s = self.servers[(self._rr + i) % n]
                if s.room(now) and (best is None or s.outstanding < best.outstanding):
                    best = s
            if best is not None:
                if now >= best.rest_until and best.rest_s and not best.probing and best.failures:
                    best.probing = True  # the rest is over: one probe request first
                best.outstanding += 1
                return best
            wake = min((s.rest_until for s in self.servers if s.rest_until > now), default=now + 1.0)
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, timeout=max(0.01, wake - now))
            except asyncio.TimeoutError:
                pass
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)

    def release(self, s: Server, exc: Optional[AttemptFailed], ok: bool = False) -> None:
        s.outstanding -= 1
        if ok:
            s.ok += 1
            self.last_ok = time.monotonic()
            if s.failures or s.probing:
                if s.rest_s:
                    log.info("server %s answers again", s.url)
                s.failures, s.probing, s.rest_s, s.down_since = 0, False, 0.0, None
        elif exc is not None and exc.server_fault:
            self._failed(s, exc)
        if self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)

    def _failed(self, s: Server, exc: AttemptFailed) -> None:
        s.failed += 1
        s.failures += 1
        if s.failures == 1:
            s.down_since = time.time()
        s.last_error = str(exc)
        now = time.monotonic()
        if now - s.last_warned >= 30.0:  # what a server answers wrong, once in a while, not per request
            s.last_warned = now
            log.warning("server %s: %s (%d failed attempts so far; retried)", s.url, exc, s.failed)
        # the requests already in flight when a server went down fail one after the other:
        # they belong to the outage that started the rest, not to a new one
        if (s.probing or s.failures >= s.fail_limit) and now >= s.rest_until:
            s.rest_s = min(self.max_rest_s, s.rest_s * 2 if s.rest_s else self.rest_s)
            s.rest_until = time.monotonic() + s.rest_s
            s.probing = False
            log.warning("server %s failed %d time(s) in a row (%s); resting it %.0f s", s.url, s.failures, exc,
                        s.rest_s)

    async def request(self, s: Server, body: bytes) -> dict:
        """One attempt; the parsed completion, or AttemptFailed."""
        import aiohttp
        try:
            async with self.session.post(s.endpoint, data=body) as resp:
                raw = await resp.read()
                status = resp.status
        except asyncio.TimeoutError:
            raise AttemptFailed(f"no answer within {self.request_timeout_s:.0f} s") from None
        except aiohttp.ClientConnectorError as exc:
            raise AttemptFailed(f"cannot connect: {exc.os_error.strerror or exc.os_error}", charge=False) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise AttemptFailed(f"{type(exc).__name__}: {exc}") from None
        if status != 200:
            text = raw[:200].decode(errors="replace").strip()
            if status in (408, 429) or status >= 500:
                raise AttemptFailed(f"HTTP {status}: {text}")
            raise AttemptFailed(f"HTTP {status}: {text}", retry=False, server_fault=False)
        try:
            return parse_completion(raw)
        except ValueError as exc:
            raise AttemptFailed(str(exc)) from None
