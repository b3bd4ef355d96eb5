"""kill -9 at random moments, 20 times, relaunching each time: every prompt id ends up in
exactly one record, every shard parses, and S3's done-set never names a record S3 lacks."""

from __future__ import annotations

import json
import os
import random

import pytest

from support.generate import (GenerateProc, assert_exactly_once, generate_argv, read_done,
                              read_jsonl_strict, read_shards, write_prompts)

pytestmark = pytest.mark.system  # sim-engines, moto and generate processes


KILLS = 20


def check_local(out) -> int:
    """Closed shards parse; the open shard parses up to a possibly half-written last line; no
    id is in two records. Returns the number of records."""
    shards = read_shards(out, allow_open=True)
    records = [r for recs in shards.values() for r in recs]
    for p in out.glob("shard-*.jsonl.tmp"):
        data = p.read_bytes()
        records += read_jsonl_strict(data[:data.rfind(b"\n") + 1], str(p))
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)), f"duplicate records after a kill: {len(ids) - len(set(ids))}"
    if (out / "done.txt").exists():
        done = set(read_done(out / "done.txt"))
        assert done <= set(ids), "the done-set names records that no shard holds"
    return len(ids)


def check_s3(s3, bucket: str, prefix: str) -> None:
    shards = s3.shards(bucket, prefix)
    ids = [r["id"] for recs in shards.values() for r in recs]
    assert len(ids) == len(set(ids)), "an id is in two shards in S3"
    done = s3.done_ids(bucket, prefix) or set()
    assert done <= set(ids), f"S3's done.txt names {len(done - set(ids))} ids whose shard is not in S3"


@pytest.mark.timeout(900)
def test_kill_9_twenty_times_loses_and_duplicates_nothing(tmp_path, sim_engines, moto_s3):
    seed = int(os.environ.get("GPUDECK_CHAOS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"chaos seed {seed} (GPUDECK_CHAOS_SEED={seed} replays it)")
    moto_s3.client().create_bucket(Bucket="chaos")
    sim = sim_engines("--latency-ms", "30", "--jitter-ms", "20", "--fail-rate", "0.02", "--seed", str(seed))
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 12000)
    out = tmp_path / "out"
    argv = generate_argv(prompts, out, [sim.url], "--concurrency", "16", "--max-attempts", "50",
                         "--s3", "s3://chaos/run", "--s3-endpoint", moto_s3.endpoint)
    log = tmp_path / "gen.log"
    finished_early = 0
    for i in range(KILLS):
        gen = GenerateProc(argv, log)
        try:
            rc = gen.proc.wait(rng.uniform(0.2, 2.5))
            finished_early += 1
            assert rc == 0, f"run {i} exited {rc} by itself:\n{gen.text()[-3000:]}"
        except Exception as exc:  # still running: the normal case
            if not type(exc).__name__ == "TimeoutExpired":
                raise
            gen.kill9()
        if out.exists():
            check_local(out)
        check_s3(moto_s3, "chaos", "run")
    gen = GenerateProc(argv, log)
    assert gen.wait(300) == 0, gen.text()[-3000:]
    shards = read_shards(out)
    assert_exactly_once(shards, ids)
    assert all(len(r) == 1000 for r in shards.values()) or sum(len(r) for r in shards.values()) == len(ids)
    assert set(read_done(out / "done.txt")) == set(ids)
    assert_exactly_once(moto_s3.shards("chaos", "run"), ids)
    assert moto_s3.done_ids("chaos", "run") == set(ids)
    killed = KILLS - finished_early
    assert killed >= 10, f"only {killed} runs were killed mid-way; the test did not test much"
    # the kills did cost something: records cut or requests sent twice
    assert sim.metric("sglang:num_requests_total") >= len(ids)
    text = log.read_text()
    assert text.count("=== ") == KILLS + 1
    progress = json.loads((out / "progress.json").read_text())
    assert progress["done"] == progress["total"] == len(ids)
    # useful records are counted once their ids are durable: never one a kill lost and the
    # next run made again, so never more than the shards hold
    useful = sum(1 for recs in shards.values() for r in recs
                 if r["finish_reason"] not in ("length", "abort", "error") and r["answer"].strip())
    assert 0 < progress["useful"] <= useful and 0 < progress["useful_of"] <= len(ids), progress
    assert progress["useful"] <= progress["useful_of"]
