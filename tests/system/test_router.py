"""The router job kind: sglang-router in front of two sim-engines, generate through it, and
its smg_* metrics through the agent's scraper.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_router.py."""

from __future__ import annotations

import asyncio
import subprocess

import httpx
import pytest

from gpudeck.agents.sense.engines import EngineScraper, parse_metrics
from gpudeck.agents.contract.jobs import JobSpec
from support.generate import (PY, ROOT, assert_exactly_once, child_env, free_port, generate_argv, read_shards,
                              run_generate, write_prompts)
from support.wait import wait_for


@pytest.mark.system
def test_generate_through_a_router_to_two_engines(tmp_path, sim_engines):
    # a model path that is a local directory keeps the router from asking the Hub for a tokenizer
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    a = sim_engines("--latency-ms", "10", "--model", str(model_dir))
    b = sim_engines("--latency-ms", "10", "--model", str(model_dir))
    port, metrics_port = free_port(), free_port()
    spec = JobSpec(name="router", kind="router", port=port, metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
                   options={"workers": [a.url, b.url],
                            "router_args": ["--policy", "round_robin", "--log-level", "warn",
                                            "--health-check-interval-secs", "1", "--health-failure-threshold", "2"]})
    log = open(tmp_path / "router.log", "wb")
    router = subprocess.Popen(spec.argv(PY), stdout=log, stderr=log, env=child_env({"HF_HUB_OFFLINE": "1"}),
                              cwd=ROOT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"

        def ready():
            try:
                return httpx.get(url + "/health", timeout=2).status_code == 200 and \
                    "smg_worker_health" in httpx.get(spec.metrics_url, timeout=2).text
            except httpx.HTTPError:
                return False
        wait_for(ready, timeout=60, what="the router to be ready")
        prompts = tmp_path / "prompts.jsonl"
        ids = write_prompts(prompts, 600)
        out = tmp_path / "out"
        assert run_generate(generate_argv(prompts, out, [url], "--concurrency", "32"), tmp_path / "gen.log") == 0, \
            (tmp_path / "gen.log").read_text()[-3000:]
        assert_exactly_once(read_shards(out), ids)
        recs = [r for rs in read_shards(out).values() for r in rs]
        assert {r["server"] for r in recs} == {url}
        served_a, served_b = a.metric("sglang:num_requests_total"), b.metric("sglang:num_requests_total")
        assert served_a + served_b == 600 and served_a > 100 and served_b > 100

        m = parse_metrics(httpx.get(spec.metrics_url, timeout=5).text)
        assert m.flavor == "router"
        assert m.extra["workers"] == 2 and m.extra["healthy"] == 2 and m.extra["unhealthy"] == []
        assert m.extra["requests"] >= 600

        # one engine dies: the router's health checks notice, the scraper says which one
        b.kill()

        def unhealthy():
            engine = asyncio.run(_scrape(spec.metrics_url))
            return engine if engine.error and b.url in engine.error else None
        engine = wait_for(unhealthy, timeout=60, interval=1.0, what="the router to report the dead worker")
        assert engine.flavor == "router" and engine.state == "ready"
        assert "1 of 2 workers unhealthy" in engine.error or "circuit breaker open" in engine.error
    finally:
        router.terminate()
        try:
            router.wait(15)
        except subprocess.TimeoutExpired:
            router.kill()
            router.wait()
        log.close()


async def _scrape(url: str):
    async with httpx.AsyncClient(timeout=5) as client:
        return await EngineScraper(url).poll(client)
