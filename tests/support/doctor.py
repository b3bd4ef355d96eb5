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


def config_dir(tmp_path: Path, name: str, config: dict, weights: int) -> Path:
    """A model directory with this config.json as it is, and the safetensors index."""
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": weights},
                                                                 "weight_map": {}}))
    return d


# The seed's model: Qwen3.6-27B's shape, a multimodal config whose text_config lists each layer's
# type (layer_types): 64 layers, every 4th full attention (4 KV heads of 256), Gated DeltaNet in
# the other 48 (16 key heads, 48 value heads, head dims 128, conv kernel 4).
SEED_LINEAR = {"linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
               "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}
SEED_TEXT = {"model_type": "qwen3_5_text", "num_hidden_layers": 64, "hidden_size": 5120, "num_attention_heads": 24,
             "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 262144, "dtype": "bfloat16",
             "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(64)],
             **SEED_LINEAR}
SEED_WEIGHTS = 54 * 10**9  # 27B parameters in bf16
# what the doctor must say of it, worked by hand:
SEED_KV_PER_TOKEN = 2 * 16 * 4 * 256 * 2  # 2 (K and V) x 16 attention layers x 4 KV heads x 256 x 2 B = 64 KiB
SEED_SSM = 48 * 128 * 128 * 4  # value heads x key dim x value dim in float32: 3 MiB a layer
SEED_CONV = (2 * 16 * 128 + 48 * 128) * (4 - 1) * 2  # (2 x key heads x key dim + value heads x value dim) x
#                                                      (kernel - 1) in bf16: 60 KiB a layer
SEED_STATE_PER_REQUEST = 48 * (SEED_SSM + SEED_CONV)  # 146.8 MiB over the 48 linear layers


def seed_model_dir(tmp_path: Path, **text) -> Path:
    return config_dir(tmp_path, "qwen3.6-27b", {"model_type": "qwen3_5", "architectures":
                                                ["Qwen3_5ForConditionalGeneration"],
                                                "text_config": {**SEED_TEXT, **text},
                                                "vision_config": {"depth": 27}}, SEED_WEIGHTS)


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
