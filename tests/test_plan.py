"""``gpudeck plan generate`` and ``gpudeck plan extract``: the arithmetic, then the commands
against a real sim-engine process, a real llama-server (tests/test_generate_llama.py's
fixture) and a real (tiny) model on the CPU."""

from __future__ import annotations

import json
import random
import subprocess

import pytest

from gpudeck.agents.workers.plan import stats
from gpudeck.agents.workers.plan.extract_plan import project as project_extract
from gpudeck.agents.workers.plan.sample import split_levels
from gpudeck.agents.contract.units import parse_duration
from gpudeck.agents.workers.plan.units import UsageError, parse_deadline, parse_levels
from support.generate import (PY, ROOT, assert_exactly_once, child_env, generate_argv, read_done, read_shards,
                              run_generate)

from test_generate_llama import BINARY, QUESTIONS, llama_server

__all__ = ["llama_server"]

SEED_LAYERS, SEED_HIDDEN, SEED_SAMPLES, SEED_TOKENS_EACH = 5, 5120, 902_087, 2000


def plan_cli(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpudeck.console", "plan", *argv], capture_output=True, text=True,
                          env=child_env(), cwd=ROOT, timeout=timeout)


def write_prompts(path, n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            words = " ".join(f"w{rng.randint(0, 999)}" for _ in range(rng.randint(3, 120)))
            f.write(json.dumps({"id": f"p{i}", "prompt": f"question {i}: {words}"}) + "\n")
    return [f"p{i}" for i in range(n)]


# ---------------------------------------------------------------- the arithmetic

def test_units_and_levels():
    assert parse_duration("5d") == 5 * 86400
    assert parse_duration("1d12h") == 36 * 3600
    assert parse_duration("90m") == 5400
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration("soon")
    assert parse_deadline("2030-01-01T00:00:00+00:00", now=1893456000 - 3600) == 3600
    for bad in ("yesterday", "2000-01-01T00:00", "0s"):
        with pytest.raises(UsageError, match="--deadline"):
            parse_deadline(bad)
    assert parse_levels("64, 1,32,64") == [1, 32, 64]
    with pytest.raises(UsageError, match="--concurrency"):
        parse_levels("1,x")
    chunks = split_levels(200, [1, 32, 64, 128])
    assert sum(chunks) == 200 and chunks == sorted(chunks) and chunks[0] >= 8
    assert sum(split_levels(3, [1, 2, 4, 8])) == 3


def _processor_sharing(rate, arrivals, a=0.01):
    """Exact completions of a server where each of k running requests decodes at rate(k)
    tokens/s: (obs, timeline), simulated in small time steps."""
    dt = 0.001
    t, running, obs, timeline = 0.0, [], [], [(0.0, 0.0)]
    pending = list(arrivals)  # (start, tokens)
    while pending or running:
        while pending and pending[0][0] <= t:
            s, n = pending.pop(0)
            running.append([s, n, float(n), s + a])
            timeline.append((t, float(len(running))))
        decoding = [r for r in running if r[3] <= t]
        for r in decoding:
            r[2] -= rate(len(running)) * dt
        t += dt
        for r in [r for r in running if r[2] <= 0]:
            running.remove(r)
            obs.append(stats.Obs(r[0], t, r[1]))
            timeline.append((t, float(len(running))))
    return obs, stats.Timeline(timeline)


def test_fit_recovers_the_rates_of_a_shared_server():
    rate = lambda k: min(100.0, 800.0 / k)  # noqa: E731: 100 tok/s alone, 800 tok/s for the server
    rng = random.Random(3)
    alone = [(i * 4.0, rng.randint(20, 300)) for i in range(6)]  # one at a time, then a crowd
    crowds = [(24 + 10 * b + rng.uniform(0, 0.5), rng.randint(20, 300)) for b in range(3) for _ in range(16)]
    arrivals = alone + sorted(crowds)  # at most 16 at once: the top knot
    obs, tl = _processor_sharing(rate, arrivals)
    fit = stats.fit(obs, tl, [1, 8, 16])
    assert fit is not None
    assert fit.rate(1) == pytest.approx(100, rel=0.1)
    assert fit.rate(16) == pytest.approx(50, rel=0.15)
    assert 0 <= fit.a < 0.05


def test_projection_of_a_known_server_and_its_interval():
    obs = [stats.Obs(0.0, 1.0 + n / 100, n) for n in (100, 200, 300, 400)]
    tl = stats.Timeline([(0.0, 4.0), (10.0, 4.0)])
    fit = stats.Fit(1.0, (4.0,), (100.0,))
    tokens = [100, 200, 300, 400]
    p = stats.project(fit, obs, tl, tokens, c=4, servers=2, remaining=8000, seed=1)
    # 3.5 s per request, 8 slots: 3,500 s, plus a tail under the longest request
    assert 3500 <= p.wall_s <= 3500 + 5.0
    assert p.low_s <= p.wall_s <= p.high_s
    assert stats.servers_for(3600, 8000, 3.5, 4, p.tail_s) == 2
    assert stats.servers_for(1800, 8000, 3.5, 4, p.tail_s) == 4
    assert stats.makespan([5, 1, 1, 1, 1, 1], 2) == 5


def test_extract_projection_of_the_seed_figures():
    tokens = SEED_SAMPLES * SEED_TOKENS_EACH
    p = project_extract(layers_kept=SEED_LAYERS, num_layers=64, hidden_size=SEED_HIDDEN, dtype_bytes=2,
                        samples=SEED_SAMPLES, tokens=tokens, free_bytes=3 * 10**12)
    assert p["bytes_per_token_raw"] == 51200
    assert p["projected_bytes"] == pytest.approx(92.4e12, rel=0.01)
    assert p["projected_bytes"] / 2**40 == pytest.approx(84.0, rel=0.01)
    assert not p["fits"]
    levers = " ".join(p["levers"])
    assert "fewer layers" in levers and "--compress" in levers and "fewer samples" in levers
    assert p["s3_cost_per_month"] == pytest.approx(92.4e3 * 0.023, rel=0.01)
    ok = project_extract(layers_kept=1, num_layers=64, hidden_size=SEED_HIDDEN, dtype_bytes=2, samples=10,
                         tokens=20000, free_bytes=10**12, ratio=0.67, tokens_per_s=1000)
    assert ok["fits"] and not ok["levers"] and ok["projected_wall_s"] == 20


# ---------------------------------------------------------------- plan extract, the command

def _config_only_model(tmp_path):
    d = tmp_path / "big-model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"num_hidden_layers": 64, "hidden_size": SEED_HIDDEN,
                                               "intermediate_size": 25600, "vocab_size": 151936}))
    return d


@pytest.mark.system
def test_plan_extract_refuses_the_seed_figures_against_this_disk(tmp_path):
    model = _config_only_model(tmp_path)
    out = tmp_path / "out"
    r = plan_cli("extract", "--model", str(model), "--data", str(tmp_path / "unused.jsonl"), "--out", str(out),
                 "--layers", "8,16,32,48,64", "--tokens", str(SEED_SAMPLES * SEED_TOKENS_EACH),
                 "--samples", str(SEED_SAMPLES))
    assert r.returncode == 3, r.stderr
    assert "92.4 TB" in r.stdout and "84.0 TiB" in r.stdout and "DOES NOT FIT" in r.stdout
    assert "fewer layers" in r.stdout and "--compress" in r.stdout and "NO-GO" in r.stdout
    plan = json.loads((out / "plan.json").read_text())
    assert plan["verdict"] == "no-go" and plan["projected_bytes"] == pytest.approx(92.4e12, rel=0.01)
    assert plan["compression"] is None


@pytest.mark.system
def test_plan_extract_bad_input_says_where(tmp_path):
    model = _config_only_model(tmp_path)
    r = plan_cli("extract", "--model", str(model), "--data", "x", "--out", str(tmp_path / "o"),
                 "--layers", "1,99", "--tokens", "10")
    assert r.returncode == 2 and "--layers" in r.stderr and "Traceback" not in r.stderr
    r = plan_cli("extract", "--model", str(tmp_path), "--data", "x", "--out", str(tmp_path / "o"),
                 "--layers", "1", "--tokens", "10")
    assert r.returncode == 2 and "config.json" in r.stderr


@pytest.mark.system
@pytest.mark.timeout(600)
def test_plan_extract_counts_a_real_dataset_and_measures_compression(tmp_path):
    from support.extract import build_model, write_chat_shards
    from transformers import AutoTokenizer

    from gpudeck.agents.workers.extract.data import Encoder, input_files, iter_lines

    model = build_model(str(tmp_path / "model"))
    data = tmp_path / "data"
    write_chat_shards(str(data), 30)
    tok = AutoTokenizer.from_pretrained(model)
    enc = Encoder(tok)
    expect = sum(enc.encode(p, n, o).n for p, n, o in iter_lines(input_files(str(data))))
    out = tmp_path / "out"
    r = plan_cli("extract", "--model", model, "--data", str(data), "--out", str(out), "--layers", "1,3,4",
                 "--device", "cpu", "--dtype", "bfloat16", "--compress", "--pilot-samples", "8", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    plan = json.loads(r.stdout)
    assert plan["samples"] == 30 and plan["tokens"] == expect
    assert plan["bytes_per_token_raw"] == 3 * 64 * 2
    assert plan["compression"]["measured"] and 0 < plan["compression"]["ratio"] < 1.2
    assert plan["projected_bytes"] == pytest.approx(expect * (384 * plan["compression"]["ratio"] + 5), rel=1e-6)
    assert plan["fits"] and plan["verdict"] == "go" and plan["time"]["tokens_per_s"] is None
    # the pilot's pace is the worker's own once it runs (first durable shard to last), start-up apart
    pil = plan["pilot"]
    assert pil["first_shard_s"] >= 0 and pil["tokens_per_s"] > 0 and pil["tokens_per_s_with_startup"] > 0
    assert json.loads((out / "plan.json").read_text())["tokens"] == expect


# ---------------------------------------------------------------- plan generate, the command

SIM_SHARED = ("--tok-s", "400", "--batch-tok-s", "3200", "--latency-ms", "5", "--out-median", "40",
              "--out-sigma", "0.8", "--out-tokens", "1-2000")


@pytest.mark.system
@pytest.mark.timeout(300)
def test_plan_generate_against_the_sim_engine_then_the_run_skips_the_pilot(tmp_path, sim_engines):
    sim = sim_engines(*SIM_SHARED)
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 300)
    out = tmp_path / "out"
    r = plan_cli("generate", "--prompts", str(prompts), "--out", str(out), "--server", sim.url, "--pilot", "60",
                 "--concurrency", "1,4,16", "--max-tokens", "200", "--price-per-hour", "2", "--deadline", "1h",
                 "--hold", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "verdict: GO" in r.stdout and "CONC/SERVER" in r.stdout
    plan = json.loads((out / "plan.json").read_text())
    for key in ("prompts", "pilot_done", "best_concurrency", "completions_per_s", "output_tokens_per_s",
                "projected_wall_s", "projected_wall_s_low", "projected_wall_s_high", "projected_output_tokens",
                "projected_bytes", "projected_cost", "verdict"):
        assert plan[key] is not None, key
    # each level held full for a second: more than its share of the 60, from a reserve of half the 240 others
    taken = plan["pilot_done"]
    assert 60 < taken <= 180 and plan["prompts"] == 300 and plan["remaining"] == 300 - taken
    assert all(row["measured"] == "steady state" and row["steady_s"] >= 0.7 for row in plan["levels"]), plan["levels"]
    assert plan["projected_wall_s_low"] <= plan["projected_wall_s"] <= plan["projected_wall_s_high"]
    assert plan["best_concurrency"] == 16  # 3,200 tok/s shared: 16 in flight is the fastest here
    assert 0 < plan["output_length"]["cut_share"] < 0.1 and plan["output_length"]["reasoning_share"] > 0.4
    assert plan["servers_needed"] == 1
    assert len(read_done(out / "done.txt")) == taken
    # the run itself: the pilot's 60 are not generated again
    rc = run_generate(generate_argv(prompts, out, [sim.url], "--max-tokens", "200"), tmp_path / "gen.log")
    assert rc == 0, (tmp_path / "gen.log").read_text()[-3000:]
    assert_exactly_once(read_shards(out), ids)
    assert sim.metric("sglang:num_requests_total") == 300


@pytest.mark.system
def test_plan_generate_json_no_go_and_bad_input(tmp_path, sim_engines):
    sim = sim_engines("--out-tokens", "50-60", "--tok-s", "2000")
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, 40)
    out = tmp_path / "out"
    r = plan_cli("generate", "--prompts", str(prompts), "--out", str(out), "--server", sim.url, "--pilot", "10",
                 "--concurrency", "1,4", "--max-tokens", "20", "--json")
    assert r.returncode == 1, r.stderr[-3000:]
    plan = json.loads(r.stdout)
    assert 10 < plan["pilot_done"] <= 25  # the 10 and a reserve of half the other 30 (the default hold is not met)
    assert plan["projected_wall_s"] > 0  # the few prompts left take a few milliseconds: not rounded to nothing
    assert plan["verdict"] == "no-go" and any("cut at max_tokens=20" in why for why in plan["reasons"])
    assert plan["output_length"]["cut_share"] == 1.0
    for bad, where in ((("--concurrency", "1,x"), "--concurrency"), (("--deadline", "someday"), "--deadline")):
        r = plan_cli("generate", "--prompts", str(prompts), "--out", str(out), "--server", sim.url, *bad)
        assert r.returncode == 2 and where in r.stderr and "Traceback" not in r.stderr


@pytest.mark.system
def test_plan_generate_runs_the_audit_first(tmp_path, sim_engines):
    sim = sim_engines()
    prompts = tmp_path / "prompts.jsonl"
    with open(prompts, "w") as f:
        for i in range(50):
            f.write(json.dumps({"id": f"d{i}", "prompt": "same"}) + "\n")
    r = plan_cli("generate", "--prompts", str(prompts), "--out", str(tmp_path / "out"), "--server", sim.url)
    assert r.returncode == 2 and "degenerate" in r.stderr
    assert sim.metric("sglang:num_requests_total") == 0


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
    rc = run_generate(generate_argv(prompts, out, [llama_server], "--max-tokens", "48", "--model-name", "smollm2"),
                      tmp_path / "gen.log", timeout=840)
    assert rc == 0, (tmp_path / "gen.log").read_text()[-3000:]
    assert_exactly_once(read_shards(out), [f"q{i}" for i in range(16)])


# ---------------------------------------------------------------- the sim-engine's new knobs

def test_sim_engine_lengths_are_heavy_tailed_and_the_decode_is_shared():
    import asyncio
    import zlib

    from gpudeck.agents.workers.sim_engine.decode import SharedDecoder, output_length

    lengths = [output_length(zlib.crc32(str(i).encode()), 1, 32768, median=300, sigma=1.1) for i in range(5000)]
    assert 250 <= stats.percentile(lengths, 50) <= 350
    assert 0.002 < sum(n >= 4096 for n in lengths) / len(lengths) < 0.03  # some would hit max_tokens=4096
    assert output_length(7, 16, 96) == 16 + 7 % 81  # uniform stays as it was

    d = SharedDecoder(tok_s=800, batch_tok_s=50000)
    assert d.rate(1) == 800 and d.rate(62) == 800 and d.rate(128) == pytest.approx(50000 / 128)
    assert SharedDecoder(tok_s=0, batch_tok_s=0).rate(5) == float("inf")

    async def race():
        fast = SharedDecoder(tok_s=0, batch_tok_s=200000)
        order: list[int] = []

        async def one(n):
            await fast.decode(n)
            order.append(n)
        await asyncio.gather(*(one(n) for n in (3000, 1000, 2000, 10)))
        return order, fast.running

    order, running = asyncio.run(race())
    assert order == [10, 1000, 2000, 3000] and running == 0  # shared fairly: the shortest ends first
