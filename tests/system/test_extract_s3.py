"""Extraction with S3 (moto's server on loopback, real HTTP through boto3): closed shards and
the done-set go up; a fresh node restores the done-set and extracts only what is missing."""

from __future__ import annotations

import json
import os
import struct

import pytest

from support.extract import MotoS3, build_model, run_extract, write_tokenized

pytestmark = pytest.mark.system  # moto and the extraction worker as a process

pytest.importorskip("torch", reason="torch is needed by the extraction worker (pip install '.[extract]')")
pytest.importorskip("transformers", reason="transformers is needed by the extraction worker")
pytest.importorskip("moto", reason="moto is needed for the S3 tests (pip install '.[dev]')")

BUCKET = "hidden-states"


@pytest.fixture
def s3(monkeypatch):
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    for k, v in MotoS3.ENV.items():
        monkeypatch.setenv(k, v)
    server = MotoS3()
    server.client().create_bucket(Bucket=BUCKET)
    yield server
    server.stop()


def ids_in_s3(s3: MotoS3, prefix: str) -> list[str]:
    """Every sample id in every shard object, read from the shards' headers."""
    ids = []
    for key in s3.keys(BUCKET, prefix + "/shard-"):
        data = s3.get(BUCKET, key)
        (n,) = struct.unpack("<Q", data[:8])
        ids += json.loads(json.loads(data[8:8 + n])["__metadata__"]["ids"])
    return ids


def test_shards_go_to_s3_and_a_fresh_node_extracts_only_what_is_missing(tmp_path, s3):
    model = build_model(str(tmp_path / "model"), "qwen3")
    recs = write_tokenized(str(tmp_path / "data.jsonl"), 30, seed=9)
    first = tmp_path / "first.jsonl"
    first.write_text("".join(line for line in open(tmp_path / "data.jsonl").readlines()[:18]))
    args = ("--s3", f"s3://{BUCKET}/run", "--s3-endpoint", s3.endpoint, "--shard-samples", "5")

    r = run_extract(model, str(first), str(tmp_path / "node1"), "1,4", *args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(ids_in_s3(s3, "run")) == sorted(rec["id"] for rec in recs[:18])
    done = set(s3.get(BUCKET, "run/done.txt").decode().split())
    assert done == {rec["id"] for rec in recs[:18]}

    # a fresh node: empty output directory, all 30 samples as input
    r = run_extract(model, str(tmp_path / "data.jsonl"), str(tmp_path / "node2"), "1,4", *args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "restored the done-set" in r.stderr
    ids = ids_in_s3(s3, "run")
    assert sorted(ids) == sorted(rec["id"] for rec in recs), "every sample exactly once in S3"
    local = [n for n in os.listdir(tmp_path / "node2") if n.startswith("shard-")]
    assert local and all(n not in os.listdir(tmp_path / "node1") for n in local), \
        "the fresh node numbers its shards after those already in S3"
    assert set(s3.get(BUCKET, "run/done.txt").decode().split()) == {rec["id"] for rec in recs}
    p = json.loads((tmp_path / "node2" / "progress.json").read_text())
    assert p["done"] == 30 and p["s3"]["pending"] == 0


def test_a_run_that_starts_again_removes_its_s3_marker_before_the_model_loads(tmp_path, s3):
    """The fence's claim comes first and takes the last run's `_SUCCESS` with it (local and in
    S3): a job `after` this one never reads "complete" while the new run loads its model, here
    a model that then fails to load."""
    model = build_model(str(tmp_path / "model"), "qwen3")
    data = tmp_path / "data.jsonl"
    write_tokenized(str(data), 10, seed=3)
    args = ("--s3", f"s3://{BUCKET}/again", "--s3-endpoint", s3.endpoint, "--shard-samples", "5")
    out = tmp_path / "out"
    r = run_extract(model, str(data), str(out), "1", *args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "again/_SUCCESS" in s3.keys(BUCKET, "again/") and (out / "_SUCCESS").exists()

    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # loads nothing: the run stops at the model
    r = run_extract(str(broken), str(data), str(out), "1", *args)
    assert r.returncode != 0, r.stderr[-3000:]
    assert "again/_SUCCESS" not in s3.keys(BUCKET, "again/"), s3.keys(BUCKET, "again/")
    assert not (out / "_SUCCESS").exists()
