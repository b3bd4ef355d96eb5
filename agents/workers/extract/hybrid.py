"""The fast path for hybrid decoders: Gated DeltaNet (linear attention) layers mixed with
full-attention ones, as in Qwen3.5/3.6 (``qwen3_5_text``) and Qwen3-Next.

Their layers differ too much from Llama's for the fused function of :mod:`model` (gated
attention, zero-centred norms, partial rotary, the DeltaNet's conv and recurrence), so this
path calls the model's own decoder layers and wins what can be won around them:

- it stops after the deepest layer kept, and never computes the LM head;
- it passes no attention mask. Samples are right-padded: a real token's causal attention
  and the DeltaNet's causal conv and recurrence never see a pad, which only comes after
  it, so SDPA runs its flash/cuDNN kernels (``is_causal``) and no mask is ever built;
- the DeltaNet's kernels: transformers takes flash-linear-attention's Triton kernels
  (``chunk_gated_delta_rule``) and causal-conv1d's when they are installed (the
  ``hybrid`` and ``conv1d`` extras), else its reference PyTorch code, which is correct and
  much slower; :func:`kernels` says which ones run, and the worker logs it.

Before use it is checked layer by layer against the model's own forward on a right-padded
batch with its attention mask, comparing the real tokens only (:func:`self_check`): that
checks the "no mask" reasoning on this very model.
"""

from __future__ import annotations

import importlib
from typing import Optional

import torch

HYBRID_MODEL_TYPES = ("qwen3_5_text", "qwen3_5", "qwen3_next")


def kernels() -> dict[str, str]:
    """Which implementation the DeltaNet layers get: the kernel package's name, or "torch"
    for transformers' reference code (what transformers itself falls back to when the
    import fails)."""
    def importable(module: str, name: str) -> bool:
        try:
            return hasattr(importlib.import_module(module), name)
        except Exception:  # absent, or present and broken (no Triton, no CUDA): the reference code runs
            return False

    return {"gated_delta_rule": "fla" if importable("fla.ops.gated_delta_rule", "chunk_gated_delta_rule") else "torch",
            "causal_conv1d": "causal_conv1d" if importable("causal_conv1d", "causal_conv1d_fn") else "torch"}


def hybrid_plan(cfg, decoder) -> tuple[bool, str]:
    """(True, "ok") when the hybrid path applies to this model, else (False, why not)."""
    mtype = getattr(cfg, "model_type", "?")
    if mtype not in HYBRID_MODEL_TYPES:
        return False, f"model_type {mtype!r} is not one of {', '.join(HYBRID_MODEL_TYPES)}"
    types = list(getattr(cfg, "layer_types", None) or [])
    if not types or "linear_attention" not in types:
        return False, "no linear_attention layers in layer_types"
    bad = sorted(set(types) - {"linear_attention", "full_attention"})
    if bad:
        return False, f"layer types {bad} are not linear_attention or full_attention"
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(decoder, name):
            return False, f"the decoder has no {name!r}"
    for i, layer in enumerate(decoder.layers):
        mixer = "linear_attn" if types[i] == "linear_attention" else "self_attn"
        if not hasattr(layer, mixer):
            return False, f"decoder layer {i} ({types[i]}) has no {mixer!r}"
    return True, "ok"


def position_embeddings(decoder, h: torch.Tensor):
    """cos and sin for positions 0..S-1, shared by every full-attention layer (the rotary
    module broadcasts one row of positions to the batch, and to its own sections)."""
    pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
    return decoder.rotary_emb(h, pos)


def run_layer(layer, h: torch.Tensor, pe) -> torch.Tensor:
    out = layer(h, position_embeddings=pe, attention_mask=None)
    return out[0] if isinstance(out, tuple) else out


def counted_flops(cfg, decoder, layers_run: int):
    """perf.CountedFlops of the first ``layers_run`` layers, from their own linears."""
    from gpudeck.agents.workers.extract.perf import CountedFlops

    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    params = width = 0
    for layer in decoder.layers[:layers_run]:
        params += sum(m.weight.numel() for m in layer.modules() if isinstance(m, torch.nn.Linear))
        if hasattr(layer, "self_attn"):
            width += heads * head_dim
    return CountedFlops(matmul_params=params, attn_width=width)


@torch.inference_mode()
def run(decoder, input_ids: torch.Tensor, layers_run: int, num_layers: int, slot: dict[int, int],
        hidden: int, out: torch.Tensor) -> torch.Tensor:
    """The decoder up to layer ``layers_run``; the output of layer L goes to slot[L] of ``out``."""
    h = decoder.embed_tokens(input_ids)
    pe = position_embeddings(decoder, h)
    if 0 in slot:
        out[..., slot[0] * hidden:(slot[0] + 1) * hidden] = h
    for i in range(layers_run):
        h = run_layer(decoder.layers[i], h, pe)
        j = slot.get(i + 1)
        if j is not None:
            out[..., j * hidden:(j + 1) * hidden] = decoder.norm(h) if i + 1 == num_layers else h
    return out


@torch.inference_mode()
def self_check(decoder, vocab: int, layers_run: int, num_layers: int, tol: float, device,
               seq: int = 48, batch: int = 2) -> Optional[str]:
    """Each layer, fed the model's own input to it from a masked forward of a right-padded
    batch and run with no mask, must give the model's output on the real tokens. None when
    all agree, else what differs."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq), generator=gen).to(device)
    mask = torch.ones(batch, seq, dtype=torch.long, device=device)
    mask[1:, seq * 2 // 3:] = 0  # the second sample is right-padded
    ref = decoder(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False).hidden_states
    real = mask.bool()
    pe = position_embeddings(decoder, ref[0])
    for i in range(layers_run):
        mine = run_layer(decoder.layers[i], ref[i], pe)
        if i + 1 == num_layers:
            mine = decoder.norm(mine)
        a, r = mine[real].float(), ref[i + 1][real].float()
        err = ((a - r).norm() / r.norm().clamp_min(1e-12)).item()
        if not err <= tol:  # NaN fails too
            return f"decoder layer {i + 1}: relative error {err:.2e} > {tol:.0e}"
    return None
