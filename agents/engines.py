"""Inference engine scrapers: SGLang, vLLM and llama.cpp's llama-server, through /metrics.

Pages are parsed with prometheus_client's text parser. Per-rank series are summed over
data-parallel ranks (SGLang ``dp_rank``, vLLM ``engine``) and never over tensor- or
pipeline-parallel ranks, which repeat the same numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from agents.protocol import Engine
from agents.rates import CounterRate

if TYPE_CHECKING:
    import httpx

# httpx and prometheus_client are imported on first use: an agent with no engine to scrape
# stays ~15 MB smaller.


class MetricsParseError(ValueError):
    pass


# per flavor: generation tokens counter, running, queued, KV usage (fraction), accept length
NAMES = {
    "sglang": dict(tokens="generation_tokens_total", running="num_running_reqs", queued="num_queue_reqs",
                   kv="token_usage", accept="spec_accept_length"),
    "vllm": dict(tokens="generation_tokens_total", running="num_requests_running",
                 queued="num_requests_waiting", kv=("kv_cache_usage_perc", "gpu_cache_usage_perc"),
                 accepted="spec_decode_num_accepted_tokens_total", drafts="spec_decode_num_drafts_total"),
    "llamacpp": dict(tokens="tokens_predicted_total", running="requests_processing",
                     queued="requests_deferred", kv="kv_cache_usage_ratio"),
}
PREFIXES = {"sglang:": "sglang", "sglang_": "sglang", "vllm:": "vllm", "llamacpp:": "llamacpp"}
_REPLICA_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank")  # same numbers on every rank: keep rank 0


@dataclass
class EngineMetrics:
    flavor: Optional[str]
    generation_tokens: Optional[float] = None
    running: Optional[float] = None
    queued: Optional[float] = None
    kv_usage: Optional[float] = None
    accept_length: Optional[float] = None
    families: int = 0
    extra: dict = field(default_factory=dict)


def parse_metrics(text: str) -> EngineMetrics:
    """Reduce one /metrics page to the numbers we show. Raises MetricsParseError on garbage."""
    from prometheus_client.parser import text_string_to_metric_families

    series: dict[str, list[float]] = {}
    families = 0
    try:
        for fam in text_string_to_metric_families(text):
            families += 1
            for s in fam.samples:
                if any(s.labels.get(lbl, "0") != "0" for lbl in _REPLICA_LABELS):
                    continue
                series.setdefault(s.name, []).append(s.value)
    except Exception as exc:  # the parser raises ValueError, IndexError, ... on malformed lines
        raise MetricsParseError(f"not a Prometheus text page: {exc}") from None
    if families == 0 and text.strip():
        raise MetricsParseError("not a Prometheus text page: no metric families found")
    flavor = None
    for name in series:
        for prefix, fl in PREFIXES.items():
            if name.startswith(prefix):
                flavor = fl
                break
        if flavor:
            break
    m = EngineMetrics(flavor=flavor, families=families)
    if flavor is None:
        return m
    prefixes = [p for p, fl in PREFIXES.items() if fl == flavor]

    def get(names, how="sum") -> Optional[float]:
        for n in (names if isinstance(names, tuple) else (names,)):
            for p in prefixes:
                vals = series.get(p + n)
                if vals:
                    return sum(vals) if how == "sum" else sum(vals) / len(vals)
        return None

    names = NAMES[flavor]
    m.generation_tokens = get(names["tokens"])
    m.running = get(names["running"])
    m.queued = get(names["queued"])
    m.kv_usage = get(names["kv"], "mean")
    if "accept" in names:
        acc = get(names["accept"], "mean")
        m.accept_length = acc if acc else None  # 0 means speculative decoding is off
    elif "accepted" in names:
        accepted, drafts = get(names["accepted"]), get(names["drafts"])
        m.accept_length = 1 + accepted / drafts if accepted is not None and drafts else None
    return m


class EngineScraper:
    """Polls one engine; keeps the counter history that turns token counts into tokens/s."""

    def __init__(self, metrics_url: str, window_s: float = 30.0) -> None:
        self.url = metrics_url
        self.base = metrics_url.rsplit("/", 1)[0]
        self.rate = CounterRate(window_s)
        self.ready_seen = False

    async def poll(self, client: "httpx.AsyncClient", now: Optional[float] = None) -> Engine:
        import httpx

        now = time.time() if now is None else now
        try:
            r = await client.get(self.url)
        except httpx.ConnectError:
            self.ready_seen = False
            return Engine(url=self.url, state="loading", error="connection refused: not listening yet")
        except httpx.HTTPError as exc:
            return Engine(url=self.url, state="starting" if not self.ready_seen else "failed",
                          error=f"{type(exc).__name__}: {exc}")
        if r.status_code == 503:
            return Engine(url=self.url, state="starting", error="503: still starting")
        if r.status_code == 404:
            return await self._health_only(client)
        if r.status_code != 200:
            return Engine(url=self.url, state="failed", error=f"/metrics answered HTTP {r.status_code}")
        try:
            m = parse_metrics(r.text)
        except MetricsParseError as exc:
            return Engine(url=self.url, state="failed", error=f"{self.url}: {exc}")
        if not self.ready_seen:
            # SGLang serves /metrics before the model answers; /health says when it does
            health = await self._health_status(client)
            if health == 503:
                return Engine(url=self.url, state="starting", flavor=m.flavor, error="health: 503")
            self.ready_seen = True
        if m.generation_tokens is not None:
            self.rate.add(now, m.generation_tokens)
        return Engine(url=self.url, state="ready", flavor=m.flavor, tokens_per_s=self.rate.rate(),
                      generation_tokens=m.generation_tokens, running=m.running, queued=m.queued,
                      kv_usage=m.kv_usage, accept_length=m.accept_length,
                      error=None if m.flavor else "no SGLang, vLLM or llama.cpp metrics on this page")

    async def _health_status(self, client: "httpx.AsyncClient") -> Optional[int]:
        import httpx

        try:
            return (await client.get(self.base + "/health")).status_code
        except httpx.HTTPError:
            return None

    async def _health_only(self, client: "httpx.AsyncClient") -> Engine:
        status = await self._health_status(client)
        state = {200: "ready", 503: "starting"}.get(status, "failed")
        return Engine(url=self.url, state=state,
                      error="/metrics answered 404: start the engine with --enable-metrics (or --metrics)")
