"""S3 through boto3 against moto's server mode on loopback (real HTTP): uploads that fail and
then succeed, the ordering of shards and done-set, restore on a fresh node.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_s3.py."""

from __future__ import annotations

import json
import os
import time

import pytest

from gpudeck.agents.workers.common import s3sync
from gpudeck.agents.workers.generate.shards import ids_in_jsonl
from support.fault_proxy import FaultProxy
from support.generate import (GenerateProc, MotoS3, assert_exactly_once, generate_argv, id_counts, read_shards,
                              run_generate, write_prompts)
from support.wait import wait_for


BUCKET = "runs"


def write_shard(out, name: str, ids: list[str]) -> None:
    (out / name).write_text("".join(json.dumps({"id": i, "answer": "a"}) + "\n" for i in ids))


def uploader(out, s3: MotoS3, prefix: str = "run-1") -> s3sync.ShardUploader:
    return s3sync.ShardUploader(str(out), s3sync.S3Location(BUCKET, prefix),
                                ids_of=lambda n: ids_in_jsonl(str(out / n)), endpoint_url=s3.endpoint,
                                backoff_s=0.05, max_backoff_s=0.3, done_interval_s=0.2)


@pytest.mark.system
def test_an_upload_that_fails_is_retried_until_it_succeeds(tmp_path, moto_s3):
    write_shard(tmp_path, "shard-000000.jsonl", ["a", "b"])
    up = uploader(tmp_path, moto_s3).start()
    up.submit("shard-000000.jsonl", ["a", "b"])  # the bucket does not exist yet
    wait_for(lambda: up.status().failures >= 2, what="failed attempts")
    st = up.status()
    assert st.pending == 1 and "NoSuchBucket" in st.last_error and "s3://runs/run-1/shard-000000.jsonl" in st.last_error
    assert moto_s3.done_ids(BUCKET, "run-1") is None
    moto_s3.client().create_bucket(Bucket=BUCKET)
    assert up.drain(30)
    up.stop()
    assert id_counts(moto_s3.shards(BUCKET, "run-1")) == {"a": 1, "b": 1}
    assert moto_s3.done_ids(BUCKET, "run-1") == {"a", "b"}
    assert (tmp_path / "uploaded.txt").read_text() == "shard-000000.jsonl\n"


@pytest.mark.system
def test_the_done_set_in_s3_holds_only_ids_of_shards_in_s3(tmp_path, moto_s3):
    moto_s3.client().create_bucket(Bucket=BUCKET)
    write_shard(tmp_path, "shard-000000.jsonl", ["a", "b"])
    up = uploader(tmp_path, moto_s3).start()
    up.submit("shard-000000.jsonl", None)
    up.submit("shard-000001.jsonl", ["c", "d"])  # its file is not there yet: that upload fails
    wait_for(lambda: moto_s3.done_ids(BUCKET, "run-1") == {"a", "b"}, what="done.txt for the first shard")
    wait_for(lambda: up.status().failures >= 2, what="the second shard to fail")
    assert "the local file is gone" in up.status().last_error
    assert moto_s3.done_ids(BUCKET, "run-1") == {"a", "b"}, "ids of a shard that is not in S3 reached done.txt"
    write_shard(tmp_path, "shard-000001.jsonl", ["c", "d"])
    assert up.drain(30)
    up.stop()
    assert moto_s3.done_ids(BUCKET, "run-1") == {"a", "b", "c", "d"}


@pytest.mark.system
def test_a_restart_queues_again_only_what_was_not_uploaded(tmp_path, moto_s3):
    moto_s3.client().create_bucket(Bucket=BUCKET)
    for n, ids in enumerate((["a"], ["b"], ["c"])):
        write_shard(tmp_path, f"shard-{n:06d}.jsonl", ids)
    (tmp_path / "uploaded.txt").write_text("shard-000000.jsonl\nshard-0000")  # a kill cut the second name
    up = uploader(tmp_path, moto_s3)
    assert up.resume(["shard-000000.jsonl", "shard-000001.jsonl", "shard-000002.jsonl"]) == \
        ["shard-000001.jsonl", "shard-000002.jsonl"]
    up.start()
    assert up.drain(30)
    up.stop()
    assert sorted(moto_s3.shards(BUCKET, "run-1")) == ["shard-000001.jsonl", "shard-000002.jsonl"]


@pytest.mark.system
def test_restore_on_a_fresh_node_includes_orphan_shards(tmp_path, moto_s3):
    c = moto_s3.client()
    c.create_bucket(Bucket=BUCKET)
    c.put_object(Bucket=BUCKET, Key="run-1/shard-000000.jsonl", Body=b'{"id": "a"}\n{"id": "b"}\n')
    c.put_object(Bucket=BUCKET, Key="run-1/done.txt", Body=b"a\nb\n")
    c.put_object(Bucket=BUCKET, Key="run-1/uploaded.txt", Body=b"shard-000000.jsonl\n")
    # uploaded just before a crash, before done.txt caught up: an orphan
    c.put_object(Bucket=BUCKET, Key="run-1/shard-000001.jsonl", Body=b'{"id": "c"}\n')
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    client = s3sync.make_client(moto_s3.endpoint)
    loc = s3sync.S3Location.parse("s3://runs/run-1")
    r = s3sync.restore_done_set(client, loc, str(fresh), "done.txt", ids_in_jsonl)
    assert (r.ids, r.shards, r.orphans) == (3, 2, ["shard-000001.jsonl"])
    assert set((fresh / "done.txt").read_text().split()) == {"a", "b", "c"}
    assert set((fresh / "done-uploaded.txt").read_text().split()) == {"a", "b", "c"}
    assert s3sync.list_shard_numbers(client, loc) == {0, 1}
    # nothing there yet: a first run
    assert s3sync.restore_done_set(client, s3sync.S3Location(BUCKET, "run-2"), str(tmp_path), "x.txt",
                                   ids_in_jsonl) is None
    assert s3sync.restore_done_set(client, s3sync.S3Location("no-such-bucket", "p"), str(tmp_path), "x.txt",
                                   ids_in_jsonl) is None


@pytest.mark.system
def test_generate_uploads_never_block_and_a_fresh_node_continues(tmp_path, moto_s3, sim_engines):
    secret = "wJalrXUtnFEMI-do-not-print-me"
    sim = sim_engines("--latency-ms", "5")
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 3500)
    s3_args = ("--s3", f"s3://{BUCKET}/run-1", "--s3-endpoint", moto_s3.endpoint)
    key_id = "AKIADONOTPRINTME"
    env = {"AWS_SECRET_ACCESS_KEY": secret, "AWS_ACCESS_KEY_ID": key_id}
    # node A: the bucket does not exist yet, every upload fails, generation goes on regardless
    node_a = tmp_path / "node-a"
    gen = GenerateProc(generate_argv(prompts, node_a, [sim.url], "--concurrency", "16", *s3_args), tmp_path / "a.log",
                       env)

    def progress():
        try:
            return json.loads((node_a / "progress.json").read_text())
        except (OSError, ValueError):
            return None

    wait_for(lambda: (p := progress()) and p["done"] == 3500 and p["uploads"]["failures"] > 0
             and p["uploads"]["pending"] == 4, timeout=120,
             what="all prompts done while uploads fail (shards 0..3 waiting for the bucket)")
    assert gen.proc.poll() is None  # it waits for the uploads, it did not give up
    moto_s3.client().create_bucket(Bucket=BUCKET)
    assert gen.wait() == 0, gen.text()[-3000:]
    assert secret not in gen.text() and key_id not in gen.text()
    assert "NoSuchBucket" in gen.text()
    s3_shards = moto_s3.shards(BUCKET, "run-1")
    assert_exactly_once(s3_shards, ids)
    assert moto_s3.done_ids(BUCKET, "run-1") == set(ids)

    # more prompts; node B starts with no local state at all
    ids += write_prompts(prompts, 1500, start=3500)
    before = sim.metric("sglang:num_requests_total")
    node_b = tmp_path / "node-b"
    assert run_generate(generate_argv(prompts, node_b, [sim.url], *s3_args), tmp_path / "b.log", env=env) == 0
    assert "restored the done-set" in (tmp_path / "b.log").read_text()
    assert sim.metric("sglang:num_requests_total") - before == 1500, "node B sent prompts that S3 already had"
    s3_shards = moto_s3.shards(BUCKET, "run-1")
    assert_exactly_once(s3_shards, ids)
    assert sorted(read_shards(node_b)) == ["shard-000004.jsonl", "shard-000005.jsonl"]  # after node A's numbers
    assert moto_s3.done_ids(BUCKET, "run-1") == set(ids)
    assert not os.path.exists(node_b / "shard-000000.jsonl")


# ---------------------------------------------------------------- a flaky link to S3

@pytest.fixture
def s3_proxy(moto_s3):
    """A proxy in front of moto that can reset, hang or refuse (tests/fault_proxy.py)."""
    host, port = moto_s3.endpoint.rsplit("//", 1)[1].split(":")
    proxy = FaultProxy(host, int(port))
    yield proxy
    proxy.close()


def quick_client(endpoint: str):
    """A client that gives up on a silent server in a second, as the test cannot wait 60 s."""
    import boto3
    from botocore.config import Config
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=1, read_timeout=1,
                      s3={"addressing_style": "path"}))


@pytest.mark.system
def test_uploads_go_on_after_resets_hangs_and_refusals(tmp_path, moto_s3, s3_proxy):
    moto_s3.client().create_bucket(Bucket=BUCKET)
    up = s3sync.ShardUploader(str(tmp_path), s3sync.S3Location(BUCKET, "run-1"),
                              ids_of=lambda n: ids_in_jsonl(str(tmp_path / n)),
                              client_factory=lambda: quick_client(s3_proxy.url),
                              backoff_s=0.05, max_backoff_s=0.3, done_interval_s=0.2).start()
    ids: list[str] = []

    def shard(n: int) -> str:
        name = f"shard-{n:06d}.jsonl"
        batch = [f"r{n}-{i}" for i in range(3)]
        write_shard(tmp_path, name, batch)
        ids.extend(batch)
        up.submit(name, batch)
        return name

    shard(0)
    assert up.drain(30)
    for n, mode in enumerate(("reset", "hang", "refuse"), start=1):
        s3_proxy.mode = mode
        failures = up.status().failures
        shard(n)
        wait_for(lambda: up.status().failures >= failures + 2, timeout=60, what=f"failed attempts while {mode}")
        assert up.status().pending == 1 and up.status().last_error
        assert up._thread.is_alive(), f"the upload thread died while S3 was {mode}"
        s3_proxy.mode = "pass"
        assert up.drain(60), f"uploads did not resume after {mode}: {up.status()}"
    up.stop()
    assert id_counts(moto_s3.shards(BUCKET, "run-1")) == {i: 1 for i in ids}
    assert moto_s3.done_ids(BUCKET, "run-1") == set(ids)


@pytest.mark.system
def test_the_upload_thread_outlives_an_unexpected_error(tmp_path, moto_s3, monkeypatch):
    moto_s3.client().create_bucket(Bucket=BUCKET)
    write_shard(tmp_path, "shard-000000.jsonl", ["a", "b"])
    up = uploader(tmp_path, moto_s3)
    real = up._upload_one
    calls = []

    def flaky(*args):
        calls.append(args[1])
        if len(calls) == 1:
            raise AttributeError("'NoneType' object has no attribute 'get'")  # a bug, not an S3 error
        return real(*args)

    monkeypatch.setattr(up, "_upload_one", flaky)
    up.start()
    up.submit("shard-000000.jsonl", ["a", "b"])
    assert up.drain(30), up.status()
    st = up.status()
    assert st.failures >= 1 and "unexpectedly" in st.last_error and calls == ["shard-000000.jsonl"] * 2
    up.stop()
    assert moto_s3.done_ids(BUCKET, "run-1") == {"a", "b"}


@pytest.mark.system
def test_generate_through_a_link_that_drops_uploads_every_shard(tmp_path, moto_s3, s3_proxy, sim_engines):
    """The adversarial run's case: uploads through a proxy that resets every connection for 2 s
    after two shards went up. Every shard reaches S3, and the worker finishes with exit 0."""
    moto_s3.client().create_bucket(Bucket=BUCKET)
    sim = sim_engines("--latency-ms", "20")
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 1200)
    out = tmp_path / "out"
    gen = GenerateProc(generate_argv(prompts, out, [sim.url], "--concurrency", "8", "--shard-size", "100",
                                     "--s3", f"s3://{BUCKET}/run-1", "--s3-endpoint", s3_proxy.url),
                       tmp_path / "gen.log")
    wait_for(lambda: len(moto_s3.shards(BUCKET, "run-1")) >= 2, timeout=120, what="two shards in S3")
    s3_proxy.mode = "reset"
    wait_for(lambda: gen.proc.poll() is None and
             (out / "progress.json").exists() and
             json.loads((out / "progress.json").read_text())["uploads"]["failures"] > 0,
             timeout=120, what="an upload to fail on a reset")
    time.sleep(2)  # the outage itself: S3 stays unreachable for two seconds
    s3_proxy.mode = "pass"
    assert gen.wait(240) == 0, gen.text()[-3000:]
    assert_exactly_once(moto_s3.shards(BUCKET, "run-1"), ids)
    assert moto_s3.done_ids(BUCKET, "run-1") == set(ids)
    doc = json.loads((out / "progress.json").read_text())
    assert doc["finished"] is True and doc["uploads"]["pending"] == 0


@pytest.mark.system
def test_a_worker_that_gives_up_on_s3_is_not_finished(tmp_path, moto_s3, s3_proxy, sim_engines):
    """S3 refuses once the worker runs: the worker retries, then, past its drain time, exits 1
    with the last error, and progress.json says not finished, uploads pending."""
    moto_s3.client().create_bucket(Bucket=BUCKET)
    sim = sim_engines("--latency-ms", "30")
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, 250)
    out = tmp_path / "out"
    gen = GenerateProc(generate_argv(prompts, out, [sim.url], "--shard-size", "100", "--concurrency", "4",
                                     "--s3", f"s3://{BUCKET}/run-1", "--s3-endpoint", s3_proxy.url),
                       tmp_path / "gen.log", {"GPUDECK_S3_DRAIN_S": "3"})
    wait_for(lambda: (out / "progress.json").exists(), timeout=120, what="the worker to start")
    s3_proxy.mode = "refuse"
    assert gen.wait(240) == 1, gen.text()[-3000:]
    doc = json.loads((out / "progress.json").read_text())
    assert doc["done"] == 250 and doc["finished"] is False
    assert doc["uploads"]["pending"] >= 1 and doc["uploads"]["failures"] > 0 and doc["uploads"]["last_error"]
    assert len(moto_s3.shards(BUCKET, "run-1")) < 3
    assert "last error: None" not in gen.text() and "not in S3 yet" in gen.text()
