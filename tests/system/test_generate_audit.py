"""`gpudeck audit` of a generate output: a real `gpudeck generate` against a simulated engine
that loops on some prompts, uploading to moto's S3 over real HTTP; each shard's figures are
written as it closes, and the audit of the directory and of the S3 prefix says the same."""

from __future__ import annotations

import json
import subprocess

import pytest

from support.generate import PY, ROOT, child_env, generate_argv, read_shards, run_generate, write_prompts

pytestmark = pytest.mark.system  # a sim-engine, a generate worker, a moto server, the CLI


def audit_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpudeck.console", "audit", *args], capture_output=True, text=True,
                          env=child_env(), cwd=ROOT, timeout=120)


@pytest.mark.timeout(180)
def test_each_shard_is_audited_as_it_closes_and_audit_reads_the_output_local_or_in_s3(tmp_path, moto_s3,
                                                                                       sim_engines):
    moto_s3.client().create_bucket(Bucket="runs")
    sim = sim_engines("--junk", "loop", "--junk-rate", "0.3", "--latency-ms", "2")
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out"
    write_prompts(prompts, 250)
    argv = generate_argv(prompts, out, [sim.url], "--concurrency", "8", "--max-tokens", "200", "--shard-size", "100",
                         "--s3", "s3://runs/gen", "--s3-endpoint", moto_s3.endpoint)
    assert run_generate(argv, tmp_path / "gen.log") == 0, (tmp_path / "gen.log").read_text()[-3000:]

    shards = read_shards(out, shard_size=100)
    assert sorted(shards) == ["shard-000000.jsonl", "shard-000001.jsonl", "shard-000002.jsonl"]
    records = [r for recs in shards.values() for r in recs]
    cut = sum(r["finish_reason"] == "length" for r in records)
    assert 30 < cut < 120  # the engine loops on about 30% of the prompts, past max_tokens
    for name, recs in shards.items():  # each shard's figures, written as it closed
        doc = json.loads((out / "quality" / name.replace(".jsonl", ".json")).read_text())
        assert doc["records"] == len(recs) and doc["bytes"] == (out / name).stat().st_size
        assert doc["problems"]["cut_at_max_tokens"] == sum(r["finish_reason"] == "length" for r in recs)
        assert doc["useful"] == sum(r["finish_reason"] == "stop" and bool(r["answer"].strip()) for r in recs)
    assert "closed shard-000000.jsonl (100 records): " in (tmp_path / "gen.log").read_text()

    r = audit_cli(str(out), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    local = json.loads(r.stdout)
    assert local["records"] == 250 and local["problems"]["cut_at_max_tokens"] == cut
    assert local["problems"]["repetition"] >= cut * 0.9 and local["useful"] == 250 - cut
    assert [s["from"] for s in local["shards"]] == ["figures"] * 3 and local["degenerate"] is False
    progress = json.loads((out / "progress.json").read_text())  # the worker's own counters say the same
    assert {k: progress["quality"][k] for k in local["problems"]} == local["problems"]
    assert (progress["useful"], progress["useful_of"]) == (local["useful"], local["records"])

    r = audit_cli(str(out))
    assert r.returncode == 0 and f"generate output {out}: 250 records in 3 shards" in r.stdout, r.stdout + r.stderr
    assert f"cut at max_tokens:   {cut:>10,}" in r.stdout and "OK: at least 50% of the records are useful" in r.stdout
    r = audit_cli(str(out), "--min-useful-pct", "95")
    assert r.returncode == 1 and "DEGENERATE: " in r.stdout and "under 95% (--min-useful-pct)" in r.stdout

    # in S3: the same figures, beside what the prefix holds
    r = audit_cli("s3://runs/gen", "--s3-endpoint", moto_s3.endpoint, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    q = doc["quality"]
    assert q["output"] == "s3://runs/gen" and [s["shard"] for s in q["shards"]] == sorted(shards)
    assert {k: q[k] for k in ("records", "useful", "useful_pct", "problems")} == \
        {k: local[k] for k in ("records", "useful", "useful_pct", "problems")}
    assert doc["objects"] >= 3 and doc["bytes"] > 0
    r = audit_cli("s3://runs/gen", "--s3-endpoint", moto_s3.endpoint, "--min-useful-pct", "95")
    assert r.returncode == 1 and r.stdout.startswith("s3://runs/gen: ") and "generate output s3://runs/gen: 250 " \
        "records in 3 shards" in r.stdout, r.stdout + r.stderr


@pytest.mark.system
def test_a_directory_without_generate_shards_is_a_usage_error(tmp_path):
    r = audit_cli(str(tmp_path))
    assert r.returncode == 2 and "is a directory without generate shards" in r.stderr, r.stderr
