"""gpudeck audit on good and on degenerate data, through the command line and the API.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_audit.py."""

from __future__ import annotations

import json
import random
import re
import subprocess

import pytest

from gpudeck.agents.workers.audit import audit_file
from support.generate import PY, ROOT, child_env

THINK_OK = [151667, 198, 198, 151668, 4048, 151645]  # "<think>\n\n</think>OK.<|im_end|>": 6 target tokens


def audit_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpudeck.console", "audit", *args], capture_output=True, text=True, env=child_env(),
                          cwd=ROOT, timeout=120)


def write_tokenized(path, n: int, placeholder_share: float, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            prompt = [rng.randrange(150000) for _ in range(rng.randint(20, 300))]
            target = THINK_OK if rng.random() < placeholder_share else \
                [rng.randrange(150000) for _ in range(rng.randint(200, 3000))]
            f.write(json.dumps({"input_ids": prompt + target, "loss_mask": [0] * len(prompt) + [1] * len(target)})
                    + "\n")


@pytest.mark.system
def test_the_87_percent_six_token_dataset_fails_loudly(tmp_path):
    data = tmp_path / "tokenized.jsonl"
    write_tokenized(data, 3000, 0.87)
    r = audit_cli(str(data))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DEGENERATE:" in r.stdout
    assert "have at most 8 target tokens (the most common length is 6" in r.stdout
    assert "answers look like placeholders" in r.stdout
    report = audit_file(str(data))
    assert report.degenerate and 0.84 < report.short_share < 0.90
    assert report.target_counts.most_common(1)[0][0] == 6


@pytest.mark.system
def test_good_tokenized_data_passes(tmp_path):
    data = tmp_path / "tokenized.jsonl"
    write_tokenized(data, 2000, 0.02)
    r = audit_cli(str(data))
    assert r.returncode == 0, r.stdout
    assert "OK: nothing degenerate found." in r.stdout
    assert re.search(r"share with <= 8 target tokens: [0-3]\.\d%", r.stdout), r.stdout


@pytest.mark.system
def test_chat_data_with_placeholder_answers_fails_and_is_fine_as_prompts(tmp_path):
    data = tmp_path / "sharegpt.jsonl"
    with open(data, "w") as f:
        for i in range(1000):
            answer = "OK." if i % 10 else "A real answer that explains the thing in a few sentences. " * 5
            f.write(json.dumps({"id": i, "conversations": [{"from": "human", "value": f"Question number {i}?"},
                                                           {"from": "gpt", "value": answer}]}) + "\n")
    r = audit_cli(str(data))
    assert r.returncode == 1
    assert "90% of answers (900 of 1,000) are empty or placeholders (most common: 'OK.')" in r.stdout
    # the same file as prompts for generate: the answers are regenerated, so it is fine
    r = audit_cli("--prompts", str(data))
    assert r.returncode == 0, r.stdout
    assert "answers will be generated again" in r.stdout


@pytest.mark.system
def test_mostly_duplicates_and_unreadable_lines_are_degenerate(tmp_path):
    data = tmp_path / "dups.jsonl"
    with open(data, "w") as f:
        for i in range(100):
            f.write(json.dumps({"messages": [{"role": "user", "content": "the same question"},
                                             {"role": "assistant", "content": "A long enough answer. " * 10}]}) + "\n")
        for i in range(20):
            f.write("{broken\n")
    r = audit_cli(str(data))
    assert r.returncode == 1
    assert "99% of samples (99 of 100) repeat an earlier prompt." in r.stdout
    assert "20 of 120 lines cannot be read" in r.stdout and f"{data}:101: not JSON" in r.stdout


@pytest.mark.system
def test_labels_format_json_output_and_a_sample(tmp_path):
    data = tmp_path / "labels.jsonl"
    with open(data, "w") as f:
        for i in range(5000):
            n = 5 if i % 2 else 400
            f.write(json.dumps({"input_ids": list(range(10 + n)), "labels": [-100] * 10 + list(range(n))}) + "\n")
    r = audit_cli("--json", "--sample", "500", str(data))
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["sampled"] is True and 400 <= doc["samples"] <= 500
    assert 0.4 < doc["short_target_share"] < 0.6
    assert doc["target_tokens_histogram"]["1-8"] > 150


@pytest.mark.system
def test_an_unreadable_file_is_a_usage_error(tmp_path):
    r = audit_cli(str(tmp_path / "missing.jsonl"))
    assert r.returncode == 2 and "cannot read" in r.stderr
