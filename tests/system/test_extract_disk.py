"""The projected output against the free disk, on a real small filesystem: a 1 MiB tmpfs
mounted by the test (the 90 TB surprise, in miniature)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from support.extract import build_model, run_extract, shard_ids, write_tokenized

pytestmark = pytest.mark.system  # runs the extraction worker as a process

pytest.importorskip("torch", reason="torch is needed by the extraction worker (pip install '.[extract]')")
pytest.importorskip("transformers", reason="transformers is needed by the extraction worker")


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB filesystem."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_an_output_that_will_not_fit_is_refused_before_any_compute(tmp_path, small_disk):
    model = build_model(str(tmp_path / "model"), "qwen3")
    # 120 samples x ~45 tokens x 3 layers x 64 x 4 bytes: about 4 MB for a 1 MiB disk
    write_tokenized(str(tmp_path / "data.jsonl"), 120, seed=5, min_len=30, max_len=60)
    out = small_disk / "out"
    r = run_extract(model, str(tmp_path / "data.jsonl"), str(out), "1,3,4", "--max-tokens-per-batch", "200")
    assert r.returncode == 3, r.stderr[-2000:]
    assert "will not fit" in r.stderr
    p = json.loads((out / "progress.json").read_text())
    assert p["state"] == "disk_full_projected"
    assert "will not fit" in p["disk_alert"]
    assert p["projected_total_bytes"] > p["free_bytes"]
    assert p["total"] == 120
    assert p["computed_tokens"] == 0, "nothing should be computed once the projection says it cannot fit"
    assert shard_ids(str(out)) == {} and not [n for n in os.listdir(out) if n.endswith(".tmp")]


def test_warn_goes_on_and_the_alert_stays_in_progress(tmp_path, small_disk):
    model = build_model(str(tmp_path / "model"), "qwen3")
    write_tokenized(str(tmp_path / "data.jsonl"), 40, seed=6, min_len=30, max_len=60)  # ~1.5 MB: does not fit
    out = small_disk / "out"
    r = run_extract(model, str(tmp_path / "data.jsonl"), str(out), "1,3,4", "--max-tokens-per-batch", "200",
                    "--shard-samples", "4", "--disk-check", "warn", "--no-audit",
                    "--writers", "4")  # 8 open shards of ~140 KB could fill the 1 MiB before any closed
    # the disk fills up: the worker stops with an error, and what it wrote is whole
    assert r.returncode == 1, r.stderr[-2000:]
    assert "will not fit" in r.stderr and "No space left on device" in r.stderr
    p = json.loads((out / "progress.json").read_text())
    assert p["disk_alert"] and p["state"] == "failed"
    done = set(open(out / "done.txt").read().split())
    in_shards = {i for ids in shard_ids(str(out)).values() for i in ids}
    assert done == in_shards and 0 < len(done) < 40
