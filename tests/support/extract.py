"""Helpers for the extraction tests: a tiny random-weight model and a tiny tokenizer built
here (no downloads), and datasets in the shapes the worker reads."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from support.core import ROOT  # noqa: F401 (re-exported)
from support.s3 import MotoS3  # noqa: F401 (re-exported)
from typing import Optional


# A Qwen-style template: the assistant's reasoning_content goes inside <think>...</think>
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' -}}"
    "{%- if m['role'] == 'assistant' and m.reasoning_content is defined and m.reasoning_content -%}"
    "{{- '<think>\\n' + m.reasoning_content + '\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{{- m['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# the same without reasoning support: the worker then writes the reasoning into the content
PLAIN_TEMPLATE = (
    "{%- for m in messages -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
SPECIAL = ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|pad|>"]
WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly pack boxes of jam and "
         "explain why numbers like 12 and 345 matter to people who ask questions about rivers, stars, "
         "bread, code, graphs and music; think carefully then answer").split()


def build_tokenizer(template: str = CHAT_TEMPLATE):
    """A byte-level BPE tokenizer trained here on a few sentences, with chat special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(20)) for _ in range(300)]
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|pad|>")
    fast.chat_template = template
    return fast


def build_model(model_dir: str, arch: str = "qwen3", template: Optional[str] = CHAT_TEMPLATE, layers: int = 4,
                seed: int = 0, context: int = 4096) -> str:
    """A random-weight Qwen3- or Llama-shaped model (hidden 64, GQA 4/2 heads) saved with a
    tokenizer to ``model_dir``; ``hybrid``: Qwen3.5-shaped (``qwen3_5_text``), three of four
    layers Gated DeltaNet (linear attention), the fourth full attention."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    tok = build_tokenizer(template) if template is not None else None
    vocab = max(512, len(tok)) if tok is not None else 512
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context)
    if arch == "hybrid":
        from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
        cfg = Qwen3_5TextConfig(head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                                linear_value_head_dim=16, layer_types=(["linear_attention"] * 3 + ["full_attention"])
                                * (layers // 4) + ["linear_attention"] * (layers % 4), **common)
    else:
        cfg = Qwen3Config(head_dim=16, **common) if arch == "qwen3" else LlamaConfig(**common)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(model_dir)
    if tok is not None:
        tok.save_pretrained(model_dir)
    return model_dir


def write_tokenized(path: str, n: int, vocab: int = 512, seed: int = 0, min_len: int = 12, max_len: int = 80,
                    id_prefix: str = "t") -> list[dict]:
    """Tokenized JSONL; each sample's target (the loss-mask ones at its end) is 9+ tokens."""
    rng = random.Random(seed)
    out = []
    with open(path, "w") as f:
        for i in range(n):
            length = rng.randint(min_len, max_len)
            target = rng.randint(9, length - 1)
            rec = {"id": f"{id_prefix}{i}", "input_ids": [rng.randrange(vocab) for _ in range(length)],
                   "loss_mask": [0] * (length - target) + [1] * target}
            f.write(json.dumps(rec) + "\n")
            out.append(rec)
    return out


def chat_record(i: int, rng: random.Random, multi_turn: bool = False) -> dict:
    def words(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k))
    messages = [{"role": "system", "content": "answer briefly"}]
    if multi_turn:
        messages += [{"role": "user", "content": words(6)}, {"role": "assistant", "content": words(5)}]
    messages.append({"role": "user", "content": words(rng.randint(4, 12)) + "?"})
    return {"id": f"c{i}", "messages": messages, "reasoning": words(rng.randint(10, 30)),
            "answer": words(rng.randint(10, 30)), "finish_reason": "stop", "server": "sim"}


def write_chat_shards(directory: str, n: int, per_shard: int = 10, seed: int = 0) -> list[dict]:
    """The generation worker's output: shard-NNNNNN.jsonl files of chat records."""
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(seed)
    recs = [chat_record(i, rng, multi_turn=(i % 3 == 0)) for i in range(n)]
    for s in range(0, n, per_shard):
        with open(os.path.join(directory, f"shard-{s // per_shard:06d}.jsonl"), "w") as f:
            for r in recs[s:s + per_shard]:
                f.write(json.dumps(r) + "\n")
    return recs


def reference_hidden_states(model_dir: str, input_ids: list[int], layers: list[int], dtype: str = "float32"):
    """A plain transformers forward, batch 1, with output_hidden_states: the reference."""
    import torch
    from transformers import AutoModelForCausalLM

    key = (model_dir, dtype)
    model = _MODELS.get(key)
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
        _MODELS[key] = model
    with torch.no_grad():
        hs = model(input_ids=torch.tensor([input_ids]), output_hidden_states=True).hidden_states
    return {layer: hs[layer][0] for layer in layers}


_MODELS: dict = {}


def rel_err(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def extract_argv(model: str, data: str, out: str, layers: str = "1,3,4", *extra: str) -> list[str]:
    return [sys.executable, "-m", "gpudeck.agents.workers.extract", "--model", model, "--data", data, "--out", out,
            "--layers", layers, "--device", "cpu", "--dtype", "float32", *extra]


def run_extract(model: str, data: str, out: str, layers: str = "1,3,4", *extra: str,
                timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run(extract_argv(model, data, out, layers, *extra), env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=str(ROOT))


def shard_ids(out_dir: str) -> dict[str, list[str]]:
    """Sample ids in every complete shard file, from the shards' own headers."""
    from gpudeck.agents.workers.extract.layout import SHARD_RE, read_header

    out = {}
    for name in sorted(os.listdir(out_dir)):
        if SHARD_RE.match(name):
            meta, _ = read_header(os.path.join(out_dir, name))
            out[name] = json.loads(meta["ids"])
    return out


