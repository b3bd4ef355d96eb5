"""The extraction worker on the CPU, with tiny random-weight models built by the tests.

Tolerances (relative Frobenius error ||got - ref|| / ||ref|| per sample and layer, against a
plain transformers forward with output_hidden_states, batch 1, no padding):
- float32: 1e-5 (measured: 3e-7 at worst; the fast path is the same arithmetic, batched
  and right-padded);
- bfloat16: 2e-2 (measured: 6.5e-3 at worst; the batched matmuls round differently from
  batch 1, and bf16 keeps 8 bits of mantissa).


The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_extract.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.extract import ROOT, write_tokenized
from support.extract_cases import extract, models  # noqa: F401
pytest.importorskip("transformers", reason="transformers is needed by the extraction worker")
pytest.importorskip("safetensors", reason="safetensors is needed by the extraction worker")


@pytest.mark.system
def test_importing_the_worker_module_does_not_import_torch():
    code = ("import sys, agents.workers.extract, agents.workers.extract.perf; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.system
def test_gpudeck_extract_runs_the_worker(tmp_path, models):
    write_tokenized(str(tmp_path / "d.jsonl"), 6)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "gpudeck.console", "extract", "--model", models["llama"], "--data",
                        str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "out"), "--layers", "2", "--device", "cpu"],
                       cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "out" / "progress.json").read_text())["done"] == 6
