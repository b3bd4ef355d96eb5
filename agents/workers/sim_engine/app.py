"""The simulated SGLang server itself (aiohttp + prometheus_client); the command line is in
sim_engine/cli.py, which imports this module only when it starts serving."""

from __future__ import annotations

import asyncio
import collections
import json
import random
import time
from typing import Any, Optional

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .answer import plan_answer, spoil
from .decode import SharedDecoder
from .failures import FAIL_KINDS
from .stream import stream_chat

_SCHED_LABELS = ("engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank")
_CAPACITY_TOKENS = 692480


class SimEngine:
    def __init__(self, *, tok_s: float = 0.0, latency_ms: float = 0.0, jitter_ms: float = 0.0,
                 fail_rate: float = 0.0, fail_kinds: tuple[str, ...] = FAIL_KINDS, model: str = "sim-model",
                 startup_s: float = 0.0, out_tokens: tuple[int, int] = (16, 96), seed: Optional[int] = None,
                 batch_tok_s: float = 0.0, out_median: Optional[float] = None, out_sigma: float = 1.0,
                 junk: Optional[str] = None, junk_rate: float = 1.0, junk_after: int = 0) -> None:
        self.tok_s, self.latency_s, self.jitter_s = tok_s, latency_ms / 1000, jitter_ms / 1000
        self.decoder = SharedDecoder(tok_s, batch_tok_s)
        self.out_median, self.out_sigma = out_median, out_sigma
        self.fail_rate, self.fail_kinds = fail_rate, fail_kinds
        self.model, self.startup_s, self.out_tokens = model, startup_s, out_tokens
        self.rng = random.Random(seed)
        # answers turned to junk (answer.spoil): of this kind, this share of the prompts (by their
        # hash), once this many completions were served (a run that degrades mid-way)
        self.junk, self.junk_rate, self.junk_after = junk, junk_rate, junk_after
        self.started = time.monotonic()
        self.running = 0
        self.tokens_in_use = 0
        self.completed = 0
        self._recent: collections.deque[tuple[float, int]] = collections.deque()  # (time, tokens) for gen_throughput
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        lv = dict(engine_type="unified", model_name=model, moe_ep_rank="0", pp_rank="0", tp_rank="0")

        def gauge(name: str, doc: str) -> Any:
            return Gauge(f"sglang:{name}", doc, _SCHED_LABELS, registry=r).labels(**lv)

        self.g_running = gauge("num_running_reqs", "The number of running requests.")
        self.g_queue = gauge("num_queue_reqs", "The number of requests in the waiting queue.")
        self.g_used = gauge("num_used_tokens", "The number of used tokens.")
        self.g_usage = gauge("token_usage", "The token usage.")
        self.g_throughput = gauge("gen_throughput", "The generation throughput (token/s).")
        self.g_hit = gauge("cache_hit_rate", "The prefix cache hit rate.")
        self.g_max = gauge("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.")
        self.g_accept = gauge("spec_accept_length", "The average acceptance length of speculative decoding.")
        self.g_util = gauge("utilization", "The utilization.")
        self.g_max.set(_CAPACITY_TOKENS)
        mv = dict(model_name=model)

        def counter(name: str, doc: str) -> Any:
            return Counter(f"sglang:{name}", doc, ("model_name",), registry=r).labels(**mv)

        self.c_prompt = counter("prompt_tokens", "Number of prefill tokens processed.")
        self.c_gen = counter("generation_tokens", "Number of generation tokens processed.")
        self.c_cached = counter("cached_tokens", "Number of cached prompt tokens.")
        self.c_requests = counter("num_requests", "Number of requests processed.")
        self.c_aborted = counter("num_aborted_requests", "Number of requests aborted.")
        buckets = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)
        self.h_e2e = Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                               ("model_name",), buckets=buckets, registry=r).labels(**mv)
        self.h_ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                                ("model_name",), buckets=buckets, registry=r).labels(**mv)
        self.h_queue = Histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.",
                                 _SCHED_LABELS, buckets=buckets, registry=r).labels(**lv)

    # ---------------------------------------------------------------- HTTP

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health)
        for path in ("/get_server_info", "/server_info"):
            app.router.add_get(path, self.server_info)
        for path in ("/get_model_info", "/model_info"):
            app.router.add_get(path, self.model_info)
        app.router.add_get("/v1/models", self.models)
        return app

    def ready(self) -> bool:
        return time.monotonic() - self.started >= self.startup_s

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready() else 503)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "created": int(self.started), "owned_by": "sglang",
             "root": self.model, "max_model_len": 32768}]})

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": self.model, "tokenizer_path": self.model, "is_generation": True})

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response({
            "model_path": self.model, "served_model_name": self.model, "tp_size": 1, "dp_size": 1,
            "enable_metrics": True, "max_total_num_tokens": _CAPACITY_TOKENS, "version": "0.5.9-sim",
            "internal_states": [{"last_gen_throughput": self._throughput(), "dp_size": 1, "tp_size": 1,
                                 "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": _CAPACITY_TOKENS}}],
        })

    async def metrics(self, request: web.Request) -> web.Response:
        self.g_throughput.set(self._throughput())
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _throughput(self) -> float:
        now = time.monotonic()
        while self._recent and now - self._recent[0][0] > 5.0:
            self._recent.popleft()
        return round(sum(t for _, t in self._recent) / 5.0, 2)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        t0 = time.monotonic()
        if not self.ready():
            return web.json_response({"object": "error", "message": "the server is starting", "code": 503},
                                     status=503)
        try:
            body = json.loads(await request.read())
            messages = body["messages"]
            if not isinstance(messages, list) or not messages:
                raise ValueError("'messages' must be a non-empty list")
            if not isinstance(body.get("stream", False), bool):
                raise ValueError("'stream' must be true or false")
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"object": "error", "message": f"bad request: {exc}", "code": 400}, status=400)
        ans = plan_answer(body, self.out_tokens, self.model, self.out_median, self.out_sigma)
        if self.junk and self.completed >= self.junk_after and (ans.seed % 10007) < self.junk_rate * 10007:
            ans = spoil(ans, self.junk, body.get("max_tokens") or body.get("max_completion_tokens"))
        wait = self.latency_s + (self.rng.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0)
        failure = self.rng.choice(self.fail_kinds) if self.fail_rate and self.rng.random() < self.fail_rate else None
        self.hold(1, ans.held)
        try:
            if body.get("stream"):
                return await stream_chat(self, request, body, ans, max(0.0, wait), failure, t0)
            delay = wait
            if delay > 0:
                await asyncio.sleep(max(0.0, delay / 2 if failure else delay))
            await self.decoder.decode(ans.n_out // 2 if failure else ans.n_out)  # the decode speed shared
            if failure:
                self.c_aborted.inc()
                return self.fail_response(request, failure)
        finally:
            self.hold(-1, -ans.held)
        self.prefilled(ans.prompt_tokens)
        self.generated(ans.n_out)
        self.finished(t0, min(time.monotonic() - t0, self.latency_s))
        return web.json_response({
            "id": ans.id(self.completed), "object": "chat.completion", "created": int(time.time()),
            "model": ans.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ans.answer,
                                                 "reasoning_content": ans.reasoning, "tool_calls": None},
                         "logprobs": None, "finish_reason": ans.finish, "matched_stop": None}],
            "usage": ans.usage(),
        })

    # ---------------------------------------------------------------- accounting (also stream.py's)

    def prefilled(self, prompt_tokens: int) -> None:
        self.c_prompt.inc(prompt_tokens)

    def generated(self, tokens: int) -> None:
        """``tokens`` more tokens decoded: the counter and the throughput gauge see them now."""
        self._recent.append((time.monotonic(), tokens))
        self.c_gen.inc(tokens)

    def finished(self, t0: float, ttft: float) -> None:
        self.completed += 1
        self.c_requests.inc()
        self.h_e2e.observe(time.monotonic() - t0)
        self.h_ttft.observe(ttft)
        self.h_queue.observe(0.0)

    def hold(self, requests: int, tokens: int) -> None:
        self.running += requests
        self.tokens_in_use += tokens
        self.g_running.set(self.running)
        self.g_used.set(self.tokens_in_use)
        self.g_usage.set(min(1.0, self.tokens_in_use / _CAPACITY_TOKENS))

    def fail_response(self, request: web.Request, kind: str) -> web.StreamResponse:
        if kind == "500":
            return web.json_response({"object": "error", "message": "simulated engine failure", "code": 500},
                                     status=500)
        if kind == "garbage":
            return web.Response(text="<html><body>upstream garbage", content_type="text/html")
        # disconnect: close the connection without an answer
        if request.transport is not None:
            request.transport.close()
        raise asyncio.CancelledError()
