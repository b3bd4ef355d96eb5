"""``gpudeck plan generate`` and ``gpudeck plan extract``: the arithmetic, then the commands
against a real sim-engine process, a real llama-server (tests/e2e/test_generate_llama.py's
fixture) and a real (tiny) model on the CPU.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_plan.py, tests/e2e/test_plan.py."""

from __future__ import annotations

import json

import pytest
from support.generate import assert_exactly_once, generate_argv, read_done, read_shards, run_generate
from support.plan import SEED_HIDDEN, SEED_SAMPLES, SEED_TOKENS_EACH, plan_cli, write_prompts


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
    # the top level, where the pilot drained: the drain as it was; the start, this worker's own
    assert plan["tail_measured"] is True and plan["projected_tail_s"] >= 0
    assert 0 < plan["projected_start_s"] < 60 and "s of start and" in r.stdout
    rec = plan["pilot_record"]  # each completion as measured, for a look at how the projection came about
    assert len(rec["completions"]) == taken and all(0 <= s <= e and n >= 0 for s, e, n, _ in rec["completions"])
    assert rec["timeline"][0][0] >= 0 and max(k for _, k in rec["timeline"]) == 16
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
def test_a_fleet_job_launched_after_a_pilot_run_by_hand_takes_the_output_over(tmp_path, sim_engines):
    """The documented flow: `plan generate` by hand on the node, then the fleet's generate job on
    the same output. The pilot's attempt id is named for the host (no GPUDECK_NODE), the job's
    for the fleet's node: another node's id that no move made, so the launch goes on (it used to
    be refused with "the job moved to node <host>", a move that never happened)."""
    import socket

    from support.cli import gpudeck
    from support.core import reap
    from support.wait import wait_for

    sim = sim_engines(*SIM_SHARED)
    prompts, out, home = tmp_path / "prompts.jsonl", tmp_path / "out", tmp_path / "home"
    home.mkdir()
    ids = write_prompts(prompts, 120)
    r = plan_cli("generate", "--prompts", str(prompts), "--out", str(out), "--server", sim.url, "--pilot", "20",
                 "--concurrency", "4", "--max-tokens", "200", "--hold", "0")
    assert r.returncode == 0, r.stderr[-3000:]
    assert socket.gethostname() != "box" and (out / "_attempt").read_text().split("-")[1] != "box"
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'''
[defaults]
nvml = false
interval = 0.2

[[nodes]]
name = "box"
local = true
home = "{home}"

[[jobs]]
name = "gen"
node = "box"
kind = "generate"
prompts = "{prompts}"
out = "{out}"
servers = ["{sim.url}"]
max_tokens = 200
''')
    try:
        r = gpudeck("launch", "-f", str(fleet), "gen", check=False)
        assert r.returncode == 0 and "moved" not in r.stderr, r.stderr
        job = wait_for(lambda: (j := next(j for j in json.loads(gpudeck("status", "-f", str(fleet), "--json").stdout)
                                          ["jobs"] if j["name"] == "gen"))["state"] not in ("starting", "running")
                       and j, timeout=120, what="the run of the rest")
        assert job["state"] == "exited" and job["exit_code"] == 0, job
        assert_exactly_once(read_shards(out), ids)
        assert "-box-" in (out / "_attempt").read_text()
    finally:
        reap(home)
