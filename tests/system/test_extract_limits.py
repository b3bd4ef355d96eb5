"""Samples the model cannot take: longer than its context or the batch budget (refused with
file:line, or cut with --max-seq-len), token ids beyond its vocabulary. Real processes, a
tiny model whose context is 512 positions."""

from __future__ import annotations

import json
import random
import time

import pytest

from support.extract import WORDS, build_model, run_extract, write_tokenized

pytestmark = pytest.mark.system  # runs the extraction worker as a process

pytest.importorskip("torch", reason="torch is needed by the extraction worker (pip install '.[extract]')")
pytest.importorskip("transformers", reason="transformers is needed by the extraction worker")

HUGE_WORDS = 150_000  # a chat answer of ~300K tokens: far past a context of 512


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    return build_model(str(tmp_path_factory.mktemp("models") / "ctx512"), "qwen3", layers=2, context=512)


def _data_with_a_huge_chat_sample(path) -> int:
    """20 normal tokenized samples, then one chat record whose answer is HUGE_WORDS words; the
    line number of the huge one."""
    write_tokenized(str(path), 20, seed=3)
    rng = random.Random(1)
    huge = {"id": "huge", "messages": [{"role": "user", "content": "tell me everything"}],
            "reasoning": None, "answer": " ".join(rng.choice(WORDS) for _ in range(HUGE_WORDS))}
    with open(path, "a") as f:
        f.write(json.dumps(huge) + "\n")
    return 21


def test_a_sample_longer_than_the_context_is_refused_with_file_and_line(tmp_path, small_model):
    data = tmp_path / "data.jsonl"
    line = _data_with_a_huge_chat_sample(data)
    t0 = time.monotonic()
    r = run_extract(small_model, str(data), str(tmp_path / "out"), "1,2", "--no-audit", timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{data}:{line}: sample 'huge' has more than" in r.stderr
    assert "the model's context (512 positions)" in r.stderr and "--max-seq-len" in r.stderr
    assert "Traceback" not in r.stderr
    assert took < 60, f"the refusal took {took:.1f} s"


def test_max_seq_len_truncates_the_huge_sample_and_counts_it(tmp_path, small_model):
    from gpudeck.agents.workers.extract.reader import open_extract

    data = tmp_path / "data.jsonl"
    _data_with_a_huge_chat_sample(data)
    out = tmp_path / "out"
    r = run_extract(small_model, str(data), str(out), "1,2", "--no-audit", "--max-seq-len", "256", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    progress = json.loads((out / "progress.json").read_text())
    assert progress["done"] == 21 and progress["quality"]["truncated"] == 1
    result = open_extract(str(out))
    huge = result.get("huge")
    assert huge.input_ids.shape[0] == 256 and huge.hidden_states.shape[0] == 256
    # --max-seq-len above the context: cut at the context
    out2 = tmp_path / "out2"
    r = run_extract(small_model, str(data), str(out2), "1", "--no-audit", "--max-seq-len", "100000", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert open_extract(str(out2)).get("huge").input_ids.shape[0] == 512


def test_a_tokenized_sample_longer_than_the_batch_budget_is_refused(tmp_path, small_model):
    data = tmp_path / "data.jsonl"
    write_tokenized(str(data), 5, seed=4)
    with open(data, "a") as f:
        f.write(json.dumps({"id": "long", "input_ids": [7] * 300, "loss_mask": [1] * 300}) + "\n")
    r = run_extract(small_model, str(data), str(tmp_path / "out"), "1", "--no-audit", "--max-tokens-per-batch", "256")
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{data}:6: sample 'long' has 300 tokens" in r.stderr and "--max-tokens-per-batch 256" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_token_id_beyond_the_vocabulary_is_refused_with_file_and_line(tmp_path, small_model):
    data = tmp_path / "data.jsonl"
    write_tokenized(str(data), 5, seed=5)
    with open(data, "a") as f:
        f.write(json.dumps({"id": "oov", "input_ids": [1, 2, 999999, 3], "loss_mask": [0, 1, 1, 1]}) + "\n")
    r = run_extract(small_model, str(data), str(tmp_path / "out"), "1", "--no-audit")
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{data}:6: sample 'oov' has token id 999999 at position 2, beyond the model's vocabulary" in r.stderr
    assert "Traceback" not in r.stderr and "IndexError" not in r.stderr


def test_duplicate_ids_are_refused_unless_dedupe_first(tmp_path, small_model):
    from gpudeck.agents.workers.extract.reader import open_extract

    data = tmp_path / "data.jsonl"
    recs = write_tokenized(str(data), 6, seed=6)
    with open(data, "a") as f:  # t2 again, with other tokens
        f.write(json.dumps({"id": "t2", "input_ids": [5] * 20, "loss_mask": [1] * 20}) + "\n")
    out = tmp_path / "out"
    r = run_extract(small_model, str(data), str(out), "1", "--no-audit")
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{data}:7: id 't2' repeats an earlier line's id (1 line(s)" in r.stderr and "--dedupe first" in r.stderr
    assert "Traceback" not in r.stderr and not list(out.glob("shard-*"))
    r = run_extract(small_model, str(data), str(out), "1", "--no-audit", "--dedupe", "first")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--dedupe first: 1 record(s) repeat an earlier id and are dropped" in r.stderr
    result = open_extract(str(out))
    assert sorted(result.ids()) == sorted(x["id"] for x in recs)
    assert result.get("t2").input_ids.tolist() == recs[2]["input_ids"], "the first line of the id is kept"
