"""``"stream": true`` on the simulated ``/v1/chat/completions``: server-sent events shaped as
SGLang sends them.

    data: {... "choices": [{"delta": {"role": "assistant", "content": ""}, ...}]}   first
    data: {... "delta": {"reasoning_content": "the"} ...}                          one per token
    data: {... "delta": {"content": " answer"} ...}
    data: {... "delta": {}, "finish_reason": "stop" ...}                            last choice chunk
    data: {... "choices": [], "usage": {...}}          only with stream_options.include_usage
    data: [DONE]

Tokens leave at the server's ``--tok-s`` after ``--latency-ms`` (the time to the first
token), and the metrics count them as they go. Injected failures: ``500`` and ``garbage``
answer before the stream starts, ``disconnect`` closes the connection halfway through it.
A client that goes away mid-stream counts as an aborted request.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Optional

from aiohttp import web

from .answer import Answer

SimEngine = Any  # app.py's SimEngine (which imports this module): its hold/prefilled/generated/finished


def _delta(role: Optional[str] = None, content: Optional[str] = None,
           reasoning_content: Optional[str] = None) -> dict:
    return {"role": role, "content": content, "reasoning_content": reasoning_content, "tool_calls": None}


class _Events:
    """Writes the chunks of one streamed answer."""

    def __init__(self, resp: web.StreamResponse, ans: Answer, chunk_id: str) -> None:
        self.resp, self.ans, self.id, self.created = resp, ans, chunk_id, int(time.time())

    async def send(self, choices: list, usage: Optional[dict] = None) -> None:
        doc = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.ans.model,
               "choices": choices, "usage": usage}
        await self.resp.write(b"data: " + json.dumps(doc, ensure_ascii=False).encode() + b"\n\n")

    async def choice(self, delta: dict, finish: Optional[str] = None) -> None:
        await self.send([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                          "matched_stop": None}])


async def stream_chat(engine: SimEngine, request: web.Request, body: dict, ans: Answer, wait: float,
                      failure: Optional[str], t0: float) -> web.StreamResponse:
    """The streamed answer (the engine holds the request's slot around this call)."""
    tok_s = engine.tok_s
    if failure in ("500", "garbage"):
        await asyncio.sleep((wait + (ans.n_out / tok_s if tok_s > 0 else 0.0)) / 2)
        engine.c_aborted.inc()
        return engine.fail_response(request, failure)
    if wait > 0:
        await asyncio.sleep(wait)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(request)
    ev = _Events(resp, ans, ans.id(engine.completed + 1))
    cut = ans.n_out // 2 if failure == "disconnect" else None
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    try:
        await ev.choice(_delta(role="assistant", content=""))
        engine.prefilled(ans.prompt_tokens)
        ttft = time.monotonic() - t0
        if not await _tokens(engine, ev, cut):
            engine.c_aborted.inc()
            return engine.fail_response(request, "disconnect")
        await ev.choice({}, ans.finish)
        if include_usage:
            await ev.send([], ans.usage())
        await resp.write(b"data: [DONE]\n\n")
        engine.finished(t0, ttft)
        await resp.write_eof()
    except ConnectionResetError:  # the client went away mid-stream
        engine.c_aborted.inc()
    return resp


async def _tokens(engine: SimEngine, ev: _Events, cut: Optional[int]) -> bool:
    """One chunk per token at the engine's rate; False when ``cut`` tokens were sent first."""
    tok_s = engine.tok_s
    start, sent = time.monotonic(), 0
    for name, text in ev.ans.deltas():
        if sent == cut:
            return False
        await ev.choice(_delta(**{name: text}))
        sent += 1
        engine.generated(1)
        if tok_s > 0:
            ahead = start + sent / tok_s - time.monotonic()
            if ahead > 0.001:
                await asyncio.sleep(ahead)
    return True
