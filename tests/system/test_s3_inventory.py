"""What a job's S3 prefix holds, and costs a month: a generate job on a prefix where an
earlier run left 645 MB-like leftovers (here, a few MB); its run lists the prefix once at its
start and counts its own uploads on top; `status --json` has the job's objects, bytes and
monthly cost at the fleet's [defaults] s3_price_per_gb_month, and `gpudeck audit
s3://bucket/prefix` lists it on demand. moto's S3 over real HTTP, a real agent and worker."""

from __future__ import annotations

import json

import pytest

from support.generate import write_prompts
from support.watch import gpudeck_watch, stop_watch, wait_state

pytestmark = pytest.mark.system  # a moto server, an agent, a generate worker, a sim-engine

LEFT = {"old/part-0.bin": 3_000_000, "old/part-1.bin": 1_500_000, "notes.txt": 12}  # what an earlier run left


@pytest.mark.timeout(240)
def test_status_json_has_each_job_s_s3_bytes_and_their_monthly_cost(tmp_path, home, moto_s3, sim_engines):
    s3 = moto_s3.client()
    s3.create_bucket(Bucket="runs")
    for key, size in LEFT.items():
        s3.put_object(Bucket="runs", Key=f"gen/{key}", Body=b"x" * size)
    sim = sim_engines("--latency-ms", "5", "--out-tokens", "8-24")
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, 250)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'''
[defaults]
home = "{home}"
nvml = false
interval = 0.2
s3_price_per_gb_month = 0.02

[[jobs]]
name = "gen"
kind = "generate"
prompts = "{prompts}"
out = "{tmp_path / 'out'}"
servers = ["{sim.url}"]
concurrency = 4
max_tokens = 64
shard_size = 100
s3 = "s3://runs/gen"
s3_endpoint = "{moto_s3.endpoint}"
''')
    f = ("-f", str(fleet))
    try:
        for args in (("watch", "start", "--supervise", "none"), ("launch", "gen")):
            r = gpudeck_watch(*args, *f)
            assert r.returncode == 0, r.stdout + r.stderr
        end = wait_state(home, "gen", lambda s: s.get("state") in ("exited", "failed"), 120, what="gen to end")
        assert end["state"] == "exited", (home / "jobs" / "gen" / "job.log").read_text()[-3000:]
        held = {obj["Key"]: obj["Size"] for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket="runs", Prefix="gen/") for obj in page.get("Contents", ())}
        r = gpudeck_watch("status", "--json", *f)
        assert r.returncode == 0, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        (job,) = [j for j in doc["jobs"] if j["name"] == "gen"]
        # the start's listing (the earlier run's leftovers) plus every upload of the run: what S3 holds
        assert job["s3_objects"] == len(held) and job["s3_bytes"] == sum(held.values()), (job, held)
        assert job["s3_bytes"] > sum(LEFT.values()) and job["s3_listed_at"] is not None
        assert job["s3_cost_per_month"] == pytest.approx(sum(held.values()) / 1e9 * 0.02, rel=1e-4)
        assert doc["fleet"]["s3_bytes"] == job["s3_bytes"] and doc["fleet"]["s3_price_per_gb_month"] == 0.02

        # on demand: a listing now, by folder
        r = gpudeck_watch("audit", "s3://runs/gen", "--s3-endpoint", moto_s3.endpoint, "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        listed = json.loads(r.stdout)
        assert (listed["objects"], listed["bytes"]) == (len(held), sum(held.values()))
        old = next(x for x in listed["folders"] if x["folder"] == "old/")
        assert (old["objects"], old["bytes"]) == (2, 4_500_000)
        assert listed["cost_per_month"] == pytest.approx(sum(held.values()) / 1e9 * 0.023)
        text = gpudeck_watch("audit", "s3://runs/gen", "--s3-endpoint", moto_s3.endpoint,
                             "--s3-price-per-gb-month", "0.02").stdout
        assert text.startswith(f"s3://runs/gen: {len(held):,} objects, ") and "a month at $0.02/GB-month" in text
    finally:
        stop_watch(home)
