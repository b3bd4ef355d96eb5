"""Resume: the extraction worker killed with SIGKILL at random points, relaunched each time,
ends with every sample in exactly one shard; and each state a crash can leave is repaired.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_extract_resume.py."""

from __future__ import annotations

import glob
import json
import os
import random
import signal
import subprocess
import time

import pytest


from support.extract import (ROOT, build_model, extract_argv, reference_hidden_states, rel_err, run_extract,
                             shard_ids, write_tokenized)
from support.wait import wait_for

pytest.importorskip("torch", reason="torch is needed by the extraction worker (pip install '.[extract]')")
pytest.importorskip("transformers", reason="transformers is needed by the extraction worker")
pytest.importorskip("safetensors", reason="safetensors is needed by the extraction worker")




def done_count(out: str) -> int:
    try:
        with open(os.path.join(out, "done.txt"), "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def assert_consistent(out: str) -> set[str]:
    """What must hold at any moment, even right after a kill -9: no sample in two shard files,
    and every id of the done-set in a shard file."""
    per_shard = shard_ids(out)
    seen: dict[str, str] = {}
    for name, ids in per_shard.items():
        for i in ids:
            assert i not in seen, f"{i} is in {seen[i]} and in {name}"
            seen[i] = name
    done = set(open(os.path.join(out, "done.txt")).read().split()) if os.path.exists(os.path.join(out, "done.txt")) \
        else set()
    missing = done - set(seen)
    assert not missing, f"ids in the done-set without a shard: {sorted(missing)[:5]}"
    return set(seen)


@pytest.mark.system
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "compressed"])
def test_kill_9_at_random_points_leaves_no_duplicate_and_loses_nothing(tmp_path, compress):
    model = build_model(str(tmp_path / "model"), "qwen3")
    recs = write_tokenized(str(tmp_path / "data.jsonl"), 240, seed=11, min_len=12, max_len=60)
    out = str(tmp_path / "out")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("GPUDECK_PROGRESS_FILE", None)
    codec = ["--compress"] if compress else []
    argv = extract_argv(model, str(tmp_path / "data.jsonl"), out, "1,3,4", "--max-tokens-per-batch", "160",
                        "--shard-samples", "6", "--throttle-ms", "30", "--writers", "2", *codec)
    rng = random.Random(1234)
    kills = 0
    for attempt in range(6):
        before = done_count(out)
        proc = subprocess.Popen(argv, env=env, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            # a random point: after some more samples are durable, then a random moment later
            target = before + rng.randint(1, 30)
            wait_for(lambda: done_count(out) >= target or proc.poll() is not None, 180,
                     f"{target} done samples (attempt {attempt})")
            time.sleep(rng.uniform(0.0, 0.25))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                kills += 1
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
        assert_consistent(out)
    assert kills >= 3, "the run ended before it could be killed often enough; slow it down"

    r = run_extract(model, str(tmp_path / "data.jsonl"), out, "1,3,4", "--max-tokens-per-batch", "160",
                    "--shard-samples", "6", *codec)
    assert r.returncode == 0, r.stderr[-3000:]
    ids = assert_consistent(out)
    assert ids == {rec["id"] for rec in recs}
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]
    # every sample exactly once in the index too, and the reader agrees
    from gpudeck.agents.workers.extract.reader import open_extract
    result = open_extract(out)
    assert len(result) == len(recs)
    assert json.loads(open(os.path.join(out, "progress.json")).read())["done"] == len(recs)
    if compress:
        from gpudeck.agents.workers.extract.layout import CODEC_PLANES_ZSTD, read_header
        assert {read_header(p)[0].get("codec") for p in result.shards} == {CODEC_PLANES_ZSTD}
    for rec in rng.sample(recs, 8):  # and the states are right, not just present
        s = result.get(rec["id"])
        ref = reference_hidden_states(model, rec["input_ids"], [1, 3, 4])
        assert max(rel_err(s.layer(layer), ref[layer]) for layer in (1, 3, 4)) <= 1e-5


@pytest.mark.system
def test_every_state_a_crash_can_leave_is_repaired(tmp_path):
    """The steps of a shard's close, cut at each point by hand: temp file written, renamed
    but not indexed, indexed but not in the done-set, a half-written index line."""
    from gpudeck.agents.workers.extract.layout import DONESET, INDEX
    from gpudeck.agents.workers.extract.reader import open_extract

    model = build_model(str(tmp_path / "model"), "llama")
    recs = write_tokenized(str(tmp_path / "data.jsonl"), 40, seed=3)
    out = tmp_path / "out"
    args = ("--max-tokens-per-batch", "300", "--shard-samples", "5")
    r = run_extract(model, str(tmp_path / "data.jsonl"), str(out), "2", *args)
    assert r.returncode == 0, r.stderr[-2000:]
    index = [json.loads(line) for line in open(out / INDEX)]
    n_shards = len(index)
    assert n_shards >= 8
    # shard 7: renamed, then killed before its index line (a half-written one)
    # shard 6: indexed, then killed before its ids reached the done-set
    # a temp shard of a run killed while writing it
    last, second = index[-1], index[-2]
    lines = open(out / INDEX).read().splitlines(keepends=True)
    (out / INDEX).write_text("".join(lines[:-1]) + lines[-1][:25])
    dropped = set(last["ids"]) | set(second["ids"])
    kept = [i for i in open(out / DONESET).read().split() if i not in dropped]
    (out / DONESET).write_text("".join(i + "\n" for i in kept))
    tmp = out / f".shard-{n_shards:06d}.safetensors.tmp"
    tmp.write_bytes(b"\0" * 1000)

    r = run_extract(model, str(tmp_path / "data.jsonl"), str(out), "2", *args)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"re-indexed ['{last['shard']}']" in r.stderr
    assert not tmp.exists()
    ids = assert_consistent(str(out))
    assert ids == {rec["id"] for rec in recs}
    assert len(open_extract(str(out))) == 40
    assert sorted(open(out / DONESET).read().split()) == sorted(ids)
    assert len([json.loads(line) for line in open(out / INDEX)]) == n_shards, "nothing was computed again"


@pytest.mark.system
def test_sigterm_closes_the_open_shard_and_stops(tmp_path):
    model = build_model(str(tmp_path / "model"), "qwen3")
    # far more samples than get done before the signal, however slow this machine is today
    write_tokenized(str(tmp_path / "data.jsonl"), 2000, seed=4)
    out = str(tmp_path / "out")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    env.pop("GPUDECK_PROGRESS_FILE", None)
    argv = extract_argv(model, str(tmp_path / "data.jsonl"), out, "1", "--max-tokens-per-batch", "120",
                        "--shard-samples", "50", "--throttle-ms", "40")
    proc = subprocess.Popen(argv, env=env, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        wait_for(lambda: done_count(out) >= 50, 180, "the first shard")
        # and a sample in the next, open shard (a temp file grows from 0 with its first sample)
        def open_shard_has_a_sample() -> bool:
            for p in glob.glob(os.path.join(out, ".shard-*.tmp")):
                try:
                    if os.path.getsize(p) > 0:
                        return True
                except FileNotFoundError:  # renamed as we looked
                    pass
            return False

        wait_for(open_shard_has_a_sample, 180, "a sample in the open shard")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    ids = assert_consistent(out)
    assert 50 < len(ids) < 2000, "the open shard was closed early, not dropped, and the run stopped"
    assert json.loads(open(os.path.join(out, "progress.json")).read())["state"] == "stopped"
