"""What tests/system/test_doctor.py and tests/unit/test_doctor.py share (split out of tests/test_doctor.py
when the suite went into tiers)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from gpudeck.agents.contract.jobs import JobSpec
from gpudeck.agents.contract.vocab import Verdict

OK, WARN, FAIL = Verdict.OK, Verdict.WARN, Verdict.FAIL


def model_dir(tmp_path: Path, weights: int, **config) -> Path:
    """A model directory as transformers writes it: config.json and the safetensors index."""
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    cfg = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096,
           "max_position_embeddings": 32768, "torch_dtype": "bfloat16", **config}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": weights},
                                                                 "weight_map": {}}))
    return d


# ---------------------------------------------------------------- S3


def generate_job(s3: str, endpoint: str = "", env=None) -> JobSpec:
    opts = {"prompts": "/p.jsonl", "out": "/o", "servers": ["http://127.0.0.1:1"], "s3": s3}
    if endpoint:
        opts["s3_endpoint"] = endpoint
    return JobSpec(name="gen", kind="generate", options=opts, env=env or {})


def no_aws(monkeypatch, tmp_path):
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role asked for, on no network
