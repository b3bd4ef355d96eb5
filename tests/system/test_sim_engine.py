"""gpudeck sim-engine as a real process: the routes and metric names of SGLang, parsed by
the agent's own scraper."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from gpudeck.agents.sense.engines import EngineScraper, parse_metrics
from support.wait import wait_for

pytestmark = pytest.mark.system  # sim-engine processes


FIXTURE_NAMES = ("sglang:generation_tokens_total", "sglang:prompt_tokens_total", "sglang:num_requests_total",
                 "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:gen_throughput",
                 "sglang:cache_hit_rate", "sglang:spec_accept_length", "sglang:e2e_request_latency_seconds_count",
                 "sglang:time_to_first_token_seconds_count")


def chat(url: str, **body) -> httpx.Response:
    body.setdefault("messages", [{"role": "user", "content": "What is a shard?"}])
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=10)


def test_chat_completions_with_and_without_reasoning(sim_engines):
    sim = sim_engines()
    r = chat(sim.url, max_tokens=4096)
    assert r.status_code == 200
    doc = r.json()
    msg = doc["choices"][0]["message"]
    assert msg["role"] == "assistant" and msg["content"] and msg["reasoning_content"]
    assert doc["choices"][0]["finish_reason"] == "stop"
    usage = doc["usage"]
    assert usage["completion_tokens"] == len(msg["content"].split()) + len(msg["reasoning_content"].split())
    assert chat(sim.url).json()["choices"][0]["message"]["content"] == msg["content"], "same prompt, same answer"
    off = chat(sim.url, chat_template_kwargs={"enable_thinking": False}).json()
    assert off["choices"][0]["message"]["reasoning_content"] is None
    cut = chat(sim.url, max_tokens=3).json()
    assert cut["choices"][0]["finish_reason"] == "length" and cut["usage"]["completion_tokens"] == 3
    assert chat(sim.url, messages="nope").status_code == 400


def test_metrics_carry_the_fixture_names_and_the_scraper_reads_them(sim_engines):
    sim = sim_engines("--out-tokens", "10-10")
    for _ in range(5):
        assert chat(sim.url, chat_template_kwargs={"enable_thinking": False}).status_code == 200
    text = httpx.get(sim.url + "/metrics").text
    for name in FIXTURE_NAMES:
        assert f"\n{name}{{" in text, f"{name} is missing from /metrics"
    assert "_created" not in text  # like SGLang's multiprocess collector
    m = parse_metrics(text)
    assert (m.flavor, m.generation_tokens, m.running, m.queued) == ("sglang", 50.0, 0.0, 0.0)
    assert m.accept_length is None  # 0: speculative decoding off
    assert sim.metric("sglang:gen_throughput") > 0

    async def scrape():
        async with httpx.AsyncClient() as client:
            return await EngineScraper(sim.url + "/metrics").poll(client)
    engine = asyncio.run(scrape())
    assert engine.state == "ready" and engine.flavor == "sglang" and engine.error is None


def test_running_requests_show_in_the_gauges(sim_engines):
    sim = sim_engines("--latency-ms", "1500")

    async def load():
        async with httpx.AsyncClient(timeout=10) as client:
            tasks = [asyncio.ensure_future(client.post(sim.url + "/v1/chat/completions",
                                                       json={"messages": [{"role": "user", "content": f"q{i}"}]}))
                     for i in range(6)]
            await asyncio.sleep(0.7)
            running = parse_metrics((await client.get(sim.url + "/metrics")).text)
            await asyncio.gather(*tasks)
            return running
    running = asyncio.run(load())
    assert running.running == 6.0 and running.kv_usage > 0
    assert parse_metrics(httpx.get(sim.url + "/metrics").text).running == 0.0


def test_startup_health_info_and_models(sim_engines):
    sim = sim_engines("--startup-s", "1.0", "--model", "Qwen/Qwen3-8B")
    assert httpx.get(sim.url + "/health").status_code == 503
    assert chat(sim.url).status_code == 503
    wait_for(lambda: httpx.get(sim.url + "/health").status_code == 200, timeout=10, what="ready")
    info = httpx.get(sim.url + "/get_server_info").json()
    assert info["internal_states"][0]["last_gen_throughput"] == 0.0
    assert httpx.get(sim.url + "/server_info").json()["model_path"] == "Qwen/Qwen3-8B"
    assert httpx.get(sim.url + "/v1/models").json()["data"][0]["id"] == "Qwen/Qwen3-8B"
    assert httpx.get(sim.url + "/get_model_info").json()["is_generation"] is True


def test_each_failure_kind(sim_engines):
    fail500 = sim_engines("--fail-rate", "1", "--fail-kinds", "500")
    r = chat(fail500.url)
    assert r.status_code == 500 and "simulated" in r.json()["message"]
    garbage = sim_engines("--fail-rate", "1", "--fail-kinds", "garbage")
    r = chat(garbage.url)
    assert r.status_code == 200
    try:
        json.loads(r.text)
        raise AssertionError("a garbage answer parsed as JSON")
    except ValueError:
        pass
    drop = sim_engines("--fail-rate", "1", "--fail-kinds", "disconnect")
    try:
        chat(drop.url)
        raise AssertionError("the connection was not dropped")
    except httpx.RemoteProtocolError:
        pass
    assert sim_engines("--fail-rate", "0.5", "--seed", "3").metric("sglang:num_requests_total") == 0


def test_a_bad_flag_is_a_clear_error(tmp_path):
    import subprocess

    from support.generate import PY, ROOT, child_env
    r = subprocess.run([PY, "-m", "gpudeck.console", "sim-engine", "--port", "0", "--fail-kinds", "boom"],
                       capture_output=True, text=True, env=child_env(), cwd=ROOT, timeout=60)
    assert r.returncode != 0 and "unknown kind(s) boom" in r.stderr


# ---------------------------------------------------------------- streaming (the openai client)

def _openai(url: str):
    import openai
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=30)


def _chunks(client, content: str, **kw):
    return client.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": content}],
                                          stream=True, stream_options={"include_usage": True}, **kw)


def _stream(client, content: str, **kw) -> list:
    return list(_chunks(client, content, **kw))


def test_streaming_with_the_openai_client_matches_the_plain_answer(sim_engines):
    sim = sim_engines("--out-tokens", "30-30", "--tok-s", "200", "--latency-ms", "50")
    client = _openai(sim.url)
    plain = client.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "Why?"}])
    before = sim.metric("sglang:generation_tokens_total")
    t0 = time.monotonic()
    chunks = _stream(client, "Why?")
    took = time.monotonic() - t0
    assert len(chunks) == 1 + 30 + 1 + 1, "role, one per token, finish, usage"
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    msg = plain.choices[0].message
    assert content == msg.content and reasoning == msg.reasoning_content and reasoning
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"] and chunks[-2].choices[0].finish_reason == "stop"
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 30 == plain.usage.completion_tokens
    assert last.usage.prompt_tokens == plain.usage.prompt_tokens
    assert took >= 0.05 + 30 / 200 * 0.8, f"30 tokens at 200 tok/s came in {took:.3f} s"
    assert sim.metric("sglang:generation_tokens_total") == before + 30
    assert sim.metric("sglang:num_requests_total") == 2

    off = list(client.chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "Why?"}], stream=True, max_tokens=7,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}}))
    assert not any(getattr(c.choices[0].delta, "reasoning_content", None) for c in off if c.choices)
    assert off[-1].choices[0].finish_reason == "length" and off[-1].usage is None, "no usage unless asked"
    assert len("".join(c.choices[0].delta.content or "" for c in off).split()) == 7


def test_streamed_tokens_arrive_over_time_and_count_while_streaming(sim_engines):
    sim = sim_engines("--out-tokens", "40-40", "--tok-s", "40")
    seen: list[float] = []
    gen_mid: list[float] = []
    for c in _chunks(_openai(sim.url), "slow please"):
        seen.append(time.monotonic())
        if len(seen) == 20:
            gen_mid.append(sim.metric("sglang:generation_tokens_total"))
    assert seen[-1] - seen[1] > 0.6, "40 tokens at 40 tok/s arrive over about a second"
    assert 10 <= gen_mid[0] < 40, "the counter moves while the stream runs"
    assert sim.metric("sglang:generation_tokens_total") == 40


def test_streaming_failures(sim_engines):
    import openai
    fail500 = sim_engines("--fail-rate", "1", "--fail-kinds", "500")
    try:
        _stream(_openai(fail500.url), "x")
        raise AssertionError("no error")
    except openai.InternalServerError:
        pass
    drop = sim_engines("--fail-rate", "1", "--fail-kinds", "disconnect", "--out-tokens", "20-20")
    got: list = []
    try:
        for c in _openai(drop.url).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], stream=True):
            got.append(c)
        raise AssertionError("the stream was not cut")
    except (httpx.HTTPError, openai.APIError):
        pass
    assert 1 <= len(got) <= 11 and all(c.choices[0].finish_reason is None for c in got)
    assert drop.metric("sglang:num_aborted_requests_total") == 1
    assert drop.metric("sglang:num_requests_total") == 0
