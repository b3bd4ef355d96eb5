"""Inference engine scrapers: SGLang, vLLM, llama.cpp's llama-server and the SGLang router
(sglang-router, ``smg_*`` names on its --prometheus-port), through /metrics.

Pages are parsed with prometheus_client's text parser. Per-rank series are summed over
data-parallel ranks (SGLang ``dp_rank``, vLLM ``engine``) and never over tensor- or
pipeline-parallel ranks, which repeat the same numbers.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

from ..contract.vocab import EngineState
from ..contract.wire import Engine
from .rates import CounterRate

if TYPE_CHECKING:
    import httpx

# httpx and prometheus_client are imported on first use: an agent with no engine to scrape
# stays ~15 MB smaller.


class MetricsParseError(ValueError):
    pass


class PageTooLarge(ValueError):
    pass


# A real SGLang page is tens of KB (a few hundred with many DP ranks). A page past this, or one
# that takes longer than the deadline to arrive whole, is not read: the engine shows as failed
# with the reason, and the agent's memory and its one-second tick stay its own.
MAX_PAGE_BYTES = 4 << 20
PAGE_DEADLINE_S = 5.0
PARSE_IN_THREAD_BYTES = 256 << 10  # a larger page is parsed off the agent's event loop


# per flavor: generation tokens counter, running, queued, KV usage (fraction), accept length
NAMES: dict[str, dict[str, Union[str, tuple[str, ...]]]] = {
    "sglang": dict(tokens="generation_tokens_total", running="num_running_reqs", queued="num_queue_reqs",
                   kv="token_usage", accept="spec_accept_length"),
    "vllm": dict(tokens="generation_tokens_total", running="num_requests_running",
                 queued="num_requests_waiting", kv=("kv_cache_usage_perc", "gpu_cache_usage_perc"),
                 accepted="spec_decode_num_accepted_tokens_total", drafts="spec_decode_num_drafts_total"),
    "llamacpp": dict(tokens="tokens_predicted_total", running="requests_processing",
                     queued="requests_deferred", kv="kv_cache_usage_ratio"),
}
# SGLang's memory pools. A hybrid model (Qwen3.6 / Qwen3-Next with linear attention: a mamba
# state pool of slots per running request; Gemma / GPT-OSS with sliding windows: an SWA pool)
# runs out of the fullest one, which a token_usage of the full-attention pool alone hides.
# So a rank's usage is its fullest pool. 0.5.23's ``token_usage`` is that maximum already, but
# rounded to 0.01: where the page has ``full_token_usage`` the pools are read one by one, and
# ``token_usage`` stands for the full-attention pool only on pages without it.
SGLANG_POOLS = (("full_token_usage", "full"), ("swa_token_usage", "swa"), ("mamba_usage", "mamba"))
PREFIXES = {"sglang:": "sglang", "sglang_": "sglang", "vllm:": "vllm", "llamacpp:": "llamacpp", "smg_": "router"}
_REPLICA_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank")  # same numbers on every rank: keep rank 0


@dataclass
class EngineMetrics:
    flavor: Optional[str]
    generation_tokens: Optional[float] = None
    running: Optional[float] = None
    queued: Optional[float] = None
    kv_usage: Optional[float] = None
    accept_length: Optional[float] = None
    kv_pool: Optional[str] = None  # SGLang hybrid models: which pool is the fullest ("mamba", "swa")
    families: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def parse_metrics(text: str) -> EngineMetrics:
    """Reduce one /metrics page to the numbers we show. Raises MetricsParseError on garbage."""
    from prometheus_client.parser import text_string_to_metric_families

    series: dict[str, list[float]] = {}
    router: dict[str, list[tuple[dict[str, str], float]]] = {}  # smg_* samples with their labels
    pools: dict[str, list[tuple[dict[str, str], float]]] = {}  # SGLang pool usage gauges with their labels
    families = 0
    try:
        for fam in text_string_to_metric_families(text):
            families += 1
            for s in fam.samples:
                if any(s.labels.get(lbl, "0") != "0" for lbl in _REPLICA_LABELS):
                    continue
                series.setdefault(s.name, []).append(s.value)
                if s.name.startswith("smg_"):
                    router.setdefault(s.name, []).append((s.labels, s.value))
                elif s.name.endswith("usage") and s.name.startswith("sglang"):
                    pools.setdefault(s.name, []).append((s.labels, s.value))
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
    if flavor == "router":
        return _router_metrics(m, router)
    prefixes = [p for p, fl in PREFIXES.items() if fl == flavor]

    def get(names: Union[str, tuple[str, ...]], how: str = "sum") -> Optional[float]:
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
    if flavor == "sglang":
        _sglang_pools(m, pools, prefixes)
    if "accept" in names:
        acc = get(names["accept"], "mean")
        m.accept_length = acc if acc else None  # 0 means speculative decoding is off
    elif "accepted" in names:
        accepted, drafts = get(names["accepted"]), get(names["drafts"])
        m.accept_length = 1 + accepted / drafts if accepted is not None and drafts else None
    return m


def slots_usage(slots: object) -> Optional[float]:
    """llama-server's KV use from its ``/slots`` page: the tokens its busy slots hold (the
    prompt and what was decoded so far, at most the slot's context) over all slots' context.
    An idle slot holds none that a request could not take back. None when the page is not a
    list of slots with those figures (another build): unknown, never 0."""
    if not isinstance(slots, list) or not slots:
        return None
    held = total = 0
    for slot in slots:
        if not isinstance(slot, dict) or not isinstance(slot.get("n_ctx"), int) or slot["n_ctx"] <= 0:
            return None
        total += slot["n_ctx"]
        if not slot.get("is_processing"):
            continue
        prompt = slot.get("n_prompt_tokens")
        nxt = slot.get("next_token")
        decoded = nxt[0].get("n_decoded") if isinstance(nxt, list) and nxt and isinstance(nxt[0], dict) else \
            nxt.get("n_decoded") if isinstance(nxt, dict) else None
        if not isinstance(prompt, int) or not isinstance(decoded, int):
            return None
        held += min(slot["n_ctx"], prompt + decoded)
    return held / total


def _sglang_pools(m: EngineMetrics, pools: dict[str, list[tuple[dict[str, str], float]]], prefixes: list[str]) -> None:
    """KV usage of each rank = its fullest pool; the page's = the mean over DP ranks."""
    per_rank: dict[tuple[tuple[str, str], ...], tuple[float, str]] = {}
    have_full = any(p + "full_token_usage" in pools for p in prefixes)
    for name, pool in SGLANG_POOLS if have_full else (("token_usage", "full"),) + SGLANG_POOLS[1:]:
        for p in prefixes:
            for labels, v in pools.get(p + name, ()):
                rank = tuple(sorted(labels.items()))
                if rank not in per_rank or v > per_rank[rank][0]:
                    per_rank[rank] = (v, pool)
    if not per_rank:
        return
    m.kv_usage = sum(v for v, _ in per_rank.values()) / len(per_rank)
    fullest = max(per_rank.values(), key=lambda vp: vp[0])[1]
    m.kv_pool = fullest if fullest != "full" else None


def _router_metrics(m: EngineMetrics, smg: dict[str, list[tuple[dict[str, str], float]]]) -> EngineMetrics:
    """sglang-router (``smg_*``): requests in flight on its workers, tokens when it counts them
    (gRPC mode), and in ``extra`` the health of the workers behind it: ``workers``,
    ``healthy``, ``unhealthy`` (their URLs), ``circuit_open`` (URLs whose breaker is open or
    half-open), ``requests``, ``errors``, ``retries``."""
    def total(name: str, **match: str) -> Optional[float]:
        vals = [v for labels, v in smg.get(name, ()) if all(labels.get(k) == x for k, x in match.items())]
        return sum(vals) if vals else None

    m.running = total("smg_worker_requests_active")
    m.generation_tokens = total("smg_router_tokens_total", token_type="output")
    health = {labels.get("worker", "?"): v for labels, v in smg.get("smg_worker_health", ())}
    breakers = {labels.get("worker", "?"): v for labels, v in smg.get("smg_worker_cb_state", ())}
    m.extra = {
        "workers": len(health) or None,
        "healthy": sum(1 for v in health.values() if v >= 1) if health else None,
        "unhealthy": sorted(w for w, v in health.items() if v < 1),
        "circuit_open": sorted(w for w, v in breakers.items() if v != 0),
        "requests": total("smg_router_requests_total"),
        "errors": total("smg_router_request_errors_total"),
        "retries": total("smg_worker_retries_total"),
    }
    return m


def router_problem(m: EngineMetrics) -> Optional[str]:
    """One line on what is wrong behind a router, or None when every worker is healthy."""
    x = m.extra
    if m.flavor != "router" or not x:
        return None
    if x.get("workers") == 0 or x.get("workers") is None:
        return "router: no workers registered"
    parts = []
    if x["unhealthy"]:
        parts.append(f"{len(x['unhealthy'])} of {x['workers']} workers unhealthy ({', '.join(x['unhealthy'])})")
    if x["circuit_open"]:
        parts.append(f"circuit breaker open for {', '.join(x['circuit_open'])}")
    return "router: " + "; ".join(parts) if parts else None


class EngineScraper:
    """Polls one engine; keeps the counter history that turns token counts into tokens/s."""

    def __init__(self, metrics_url: str, window_s: float = 30.0) -> None:
        self.url = metrics_url
        self.base = metrics_url.rsplit("/", 1)[0]
        self.rate = CounterRate(window_s)
        self.ready_seen = False
        self.slots_page = True  # llama-server: /slots is read for KV use until it answers that it has none
        self.attempt: Optional[int] = None  # the job's attempt it scrapes (agents/agent.py)

    async def poll(self, client: "httpx.AsyncClient", now: Optional[float] = None) -> Engine:
        import httpx

        now = time.time() if now is None else now
        try:
            status, body = await asyncio.wait_for(self._fetch(client), PAGE_DEADLINE_S)
        except asyncio.TimeoutError:
            return Engine(url=self.url, state=EngineState.FAILED,
                          error=f"/metrics did not arrive whole within {PAGE_DEADLINE_S:g} s")
        except PageTooLarge as exc:
            return Engine(url=self.url, state=EngineState.FAILED, error=str(exc))
        except httpx.ConnectError:
            self.ready_seen = False
            self.slots_page = True
            return Engine(url=self.url, state=EngineState.LOADING, error="connection refused: not listening yet")
        except httpx.HTTPError as exc:
            return Engine(url=self.url, state=EngineState.STARTING if not self.ready_seen else EngineState.FAILED,
                          error=f"{type(exc).__name__}: {exc}")
        if status == 503:
            return Engine(url=self.url, state=EngineState.STARTING, error="503: still starting")
        if status == 404:
            return await self._health_only(client)
        if status != 200:
            return Engine(url=self.url, state=EngineState.FAILED, error=f"/metrics answered HTTP {status}")
        text = body.decode("utf-8", errors="replace")
        try:
            m = parse_metrics(text) if len(body) < PARSE_IN_THREAD_BYTES else \
                await asyncio.to_thread(parse_metrics, text)
        except MetricsParseError as exc:
            return Engine(url=self.url, state=EngineState.FAILED, error=f"{self.url}: {exc}")
        if not self.ready_seen:
            # SGLang serves /metrics before the model answers; /health says when it does
            health = await self._health_status(client)
            if health == 503:
                return Engine(url=self.url, state=EngineState.STARTING, flavor=m.flavor, error="health: 503")
            self.ready_seen = True
        if m.generation_tokens is not None:
            self.rate.add(now, m.generation_tokens)
        if m.flavor == "llamacpp" and m.kv_usage is None and self.slots_page:
            m.kv_usage = await self._slots_usage(client)
        return Engine(url=self.url, state=EngineState.READY, flavor=m.flavor, tokens_per_s=self.rate.rate(),
                      generation_tokens=m.generation_tokens, running=m.running, queued=m.queued,
                      kv_usage=m.kv_usage, kv_pool=m.kv_pool, accept_length=m.accept_length,
                      error=router_problem(m) if m.flavor else
                      "no SGLang, vLLM, llama.cpp or sglang-router metrics on this page")

    async def _fetch(self, client: "httpx.AsyncClient") -> tuple[int, bytes]:
        """The status and, for a 200, the body: streamed, refused past MAX_PAGE_BYTES."""
        async with client.stream("GET", self.url) as r:
            if r.status_code != 200:
                return r.status_code, b""
            declared = r.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_PAGE_BYTES:
                raise PageTooLarge(f"/metrics page of {int(declared) / 2**20:.0f} MiB is over the "
                                   f"{MAX_PAGE_BYTES >> 20} MiB limit: not read")
            body = bytearray()
            async for chunk in r.aiter_bytes():  # decoded: the cap holds for a compressed page too
                body += chunk
                if len(body) > MAX_PAGE_BYTES:
                    raise PageTooLarge(f"/metrics page over the {MAX_PAGE_BYTES >> 20} MiB limit: not read")
            return r.status_code, bytes(body)

    async def _slots_usage(self, client: "httpx.AsyncClient") -> Optional[float]:
        """llama-server's build has no KV series on /metrics: its /slots page says what each slot
        holds. A build without /slots (404, or 501 when started with --no-slots) is not asked
        again until the engine restarts; any other failure leaves the figure unknown."""
        import httpx

        try:
            r = await asyncio.wait_for(client.get(self.base + "/slots"), PAGE_DEADLINE_S)
        except (asyncio.TimeoutError, httpx.HTTPError):
            return None
        if r.status_code in (404, 501):
            self.slots_page = False
            return None
        if r.status_code != 200 or len(r.content) > MAX_PAGE_BYTES:
            return None
        try:
            return slots_usage(r.json())
        except ValueError:
            return None

    async def _health_status(self, client: "httpx.AsyncClient") -> Optional[int]:
        import httpx

        try:
            return (await client.get(self.base + "/health")).status_code
        except httpx.HTTPError:
            return None

    async def _health_only(self, client: "httpx.AsyncClient") -> Engine:
        status = await self._health_status(client)
        states: dict[Optional[int], EngineState] = {200: EngineState.READY, 503: EngineState.STARTING}
        state = states.get(status, EngineState.FAILED)
        return Engine(url=self.url, state=state,
                      error="/metrics answered 404: start the engine with --enable-metrics (or --metrics)")
