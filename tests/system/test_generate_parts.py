"""``gpudeck generate --part I/N``: one option of GenerateOptions (flag, fleet key, argv), the
split of the prompts between parts by extract's rule (every prompt in exactly one part, each
bad line reported by one part), each part in its own directory and S3 prefix with its own
total, and a part killed mid-run that resumes its own done-set.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_generate_parts.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from gpudeck.agents.workers.common.parts import in_part
from support.generate import (GenerateProc, assert_exactly_once, generate_argv, read_done, read_shards,
                              write_prompts)
from support.wait import wait_for
from support.generate_parts import N


# ---------------------------------------------------------------- against the sim engine


def _part_dir(out: Path, i: int) -> Path:
    return out / f"part-{i}-of-{N}"


def _progress(out: Path, i: int) -> dict:
    return json.loads((_part_dir(out, i) / "progress.json").read_text())


@pytest.mark.system
def test_three_parts_generate_every_prompt_exactly_once(tmp_path, sim_engines, moto_s3):
    moto_s3.client().create_bucket(Bucket="gen")
    sim = sim_engines("--latency-ms", "2")
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 900)
    out = tmp_path / "out"
    procs = [GenerateProc(generate_argv(prompts, out, [sim.url], "--part", f"{i}/{N}", "--shard-size", "100",
                                        "--concurrency", "8", "--s3", "s3://gen/run", "--s3-endpoint",
                                        moto_s3.endpoint), tmp_path / f"gen-{i}.log") for i in range(N)]
    for i, p in enumerate(procs):
        assert p.wait() == 0, f"part {i}:\n{p.text()[-3000:]}"
    assert sorted(p.name for p in out.iterdir()) == [f"part-{i}-of-{N}" for i in range(N)]
    seen: set[str] = set()
    for i in range(N):
        expected = [pid for pid in ids if in_part(pid, (i, N))]
        done = read_done(_part_dir(out, i) / "done.txt")
        assert sorted(done) == sorted(expected), f"part {i} holds other prompts than its own"
        assert not seen & set(done), f"part {i} shares prompts with another part"
        seen |= set(done)
        assert_exactly_once(read_shards(_part_dir(out, i), shard_size=100), expected)
        p = _progress(out, i)
        assert p["done"] == p["total"] == len(expected) and p["finished"]
        assert f"--part {i}/{N}: {len(expected)} of the 900 prompt line(s) are this part's" in procs[i].text()
        # S3: under the prefix of the part
        assert moto_s3.done_ids("gen", f"run/part-{i}-of-{N}") == set(expected)
        assert_exactly_once(moto_s3.shards("gen", f"run/part-{i}-of-{N}"), expected)
    assert seen == set(ids), "the union of the parts is every prompt"
    assert not moto_s3.objects("gen", "run/done.txt") and not moto_s3.objects("gen", "run/shard-")
    assert sim.metric("sglang:num_requests_total") == len(ids), "a prompt was sent by two parts"


@pytest.mark.system
def test_a_part_killed_mid_run_resumes_its_own_done_set(tmp_path, sim_engines):
    sim = sim_engines("--latency-ms", "50")
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 3000)
    out = tmp_path / "out"
    logs = [tmp_path / f"gen-{i}.log" for i in range(N)]
    argv = [generate_argv(prompts, out, [sim.url], "--part", f"{i}/{N}", "--shard-size", "100",
                          "--concurrency", "8") for i in range(N)]
    procs = [GenerateProc(a, log) for a, log in zip(argv, logs)]
    victim = 1
    expected = {i: [pid for pid in ids if in_part(pid, (i, N))] for i in range(N)}
    done_file = _part_dir(out, victim) / "done.txt"
    wait_for(lambda: done_file.exists() and len(read_done(done_file)) >= 200, timeout=120,
             what="part 1 to finish 200 prompts", detail=lambda: procs[victim].text()[-2000:])
    # the total is the part's own from the start, not the file's
    wait_for(lambda: (_part_dir(out, victim) / "progress.json").exists(), what="part 1's progress")
    assert _progress(out, victim)["total"] == len(expected[victim])
    procs[victim].kill9()
    done_at_kill = len(read_done(done_file))
    assert done_at_kill < len(expected[victim]), "part 1 finished before the kill: make it slower"
    relaunch = GenerateProc(argv[victim], logs[victim])
    assert relaunch.wait() == 0, relaunch.text()[-3000:]
    m = re.findall(r"resume: (\d+) ids done", relaunch.text())
    assert m and int(m[-1]) >= done_at_kill, "the relaunch did not start from its own done-set"
    for i, p in enumerate(procs):
        if i != victim:
            assert p.wait() == 0, f"part {i}:\n{p.text()[-3000:]}"
    union: list[str] = []
    for i in range(N):
        done = read_done(_part_dir(out, i) / "done.txt")
        assert sorted(done) == sorted(expected[i])
        assert_exactly_once(read_shards(_part_dir(out, i), shard_size=100), expected[i])
        p = _progress(out, i)
        assert p["done"] == p["total"] == len(expected[i])
        union += done
    assert sorted(union) == sorted(ids), "every prompt in exactly one part"
