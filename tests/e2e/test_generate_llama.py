"""End to end against a real engine: llama.cpp's llama-server serving SmolLM2-135M on the
CPU (tests/tools/llama_server.sh; `make test` builds it). Real completions, real token
counts and real /metrics pass through gpudeck generate and the agent's scraper."""

from __future__ import annotations

import json

import httpx
import pytest

from gpudeck.agents.engines import parse_metrics
from support.generate import assert_exactly_once, generate_argv, read_shards, run_generate
from support.llama import QUESTIONS, llama_server  # noqa: F401


@pytest.mark.timeout(900)  # two shared CPU cores decode ~25-135 tokens/s
def test_generate_against_a_real_llama_server(tmp_path, llama_server):
    prompts = tmp_path / "prompts.jsonl"
    with open(prompts, "w") as f:
        for i in range(200):
            q = QUESTIONS[i % len(QUESTIONS)]
            f.write(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"{q} (#{i})"}]}) + "\n")
    out = tmp_path / "out"
    log = tmp_path / "gen.log"
    # 16 tokens cut most answers: the plumbing is tested here, not their use (--min-useful-pct 0: exit 0)
    rc = run_generate(generate_argv(prompts, out, [llama_server], "--concurrency", "8", "--max-tokens", "16",
                                    "--temperature", "0.7", "--model-name", "smollm2", "--min-useful-pct", "0"),
                      log, timeout=840)
    assert rc == 0, log.read_text()[-3000:]
    shards = read_shards(out)
    assert_exactly_once(shards, [f"q{i}" for i in range(200)])
    recs = [r for rs in shards.values() for r in rs]
    assert all(r["prompt_tokens"] > 5 and 0 < r["completion_tokens"] <= 16 for r in recs)
    assert sum(1 for r in recs if r["answer"].strip()) > 150, "the model said nothing to most prompts"
    assert all(r["finish_reason"] in ("stop", "length") for r in recs)
    progress = json.loads((out / "progress.json").read_text())
    generated = sum(r["completion_tokens"] for r in recs)
    assert progress["done"] == 200 and progress["tokens"] == generated
    assert progress["quality"]["cut_at_max_tokens"] == sum(1 for r in recs if r["finish_reason"] == "length")
    # the engine's own counters agree with what the records say
    m = parse_metrics(httpx.get(llama_server + "/metrics", timeout=10).text)
    assert m.flavor == "llamacpp"
    assert m.generation_tokens >= generated
