"""``gpudeck plan generate`` and ``gpudeck plan extract``: the arithmetic, then the commands
against a real sim-engine process, a real llama-server (tests/e2e/test_generate_llama.py's
fixture) and a real (tiny) model on the CPU.

The e2e tier's tests of this file (end to end); the others are in tests/unit/test_plan.py,
tests/system/test_plan.py."""

from __future__ import annotations

import json

import pytest
from support.generate import assert_exactly_once, generate_argv, read_shards, run_generate

from support.llama import BINARY, QUESTIONS, llama_server  # noqa: F401 (llama_server: a fixture)
from support.plan import plan_cli


@pytest.mark.system
@pytest.mark.slow
@pytest.mark.timeout(900)  # two shared CPU cores decode ~25-135 tokens/s
@pytest.mark.skipif(not BINARY.exists(), reason=f"llama-server is not built ({BINARY} is missing)")
def test_plan_generate_against_a_real_llama_server(tmp_path, llama_server):
    prompts = tmp_path / "prompts.jsonl"
    with open(prompts, "w") as f:
        for i in range(16):
            f.write(json.dumps({"id": f"q{i}", "messages": [{"role": "user",
                                                             "content": f"{QUESTIONS[i % len(QUESTIONS)]} (#{i})"}]})
                    + "\n")
    out = tmp_path / "out"
    r = plan_cli("generate", "--prompts", str(prompts), "--out", str(out), "--server", llama_server, "--pilot", "8",
                 "--hold", "0", "--concurrency", "1,2", "--max-tokens", "48", "--model", "smollm2", "--json",
                 timeout=840)
    assert r.returncode in (0, 1), r.stderr[-3000:]  # a small model may ramble past 48 tokens: a no-go
    plan = json.loads(r.stdout)
    assert plan["pilot_done"] == 8 and plan["pilot_failed"] == 0 and plan["best_concurrency"] in (1, 2)
    assert plan["completions_per_s"] > 0 and 0 < plan["output_length"]["mean"] <= 48
    assert plan["projected_wall_s_low"] <= plan["projected_wall_s"] <= plan["projected_wall_s_high"]
    assert plan["verdict"] == ("go" if r.returncode == 0 else "no-go")
    rc = run_generate(generate_argv(prompts, out, [llama_server], "--max-tokens", "48", "--model-name", "smollm2",
                                    "--min-useful-pct", "0"),  # a small model may ramble past 48: not junk here
                      tmp_path / "gen.log", timeout=840)
    assert rc == 0, (tmp_path / "gen.log").read_text()[-3000:]
    assert_exactly_once(read_shards(out), [f"q{i}" for i in range(16)])
