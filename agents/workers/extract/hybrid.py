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
    """cos and sin for positions 0..S-1, shared by every full-attention layer and by every
    sample of the batch. A multimodal rotary (``mrope_section``: Qwen3.5) takes a row of
    positions per grid axis, text having the same position on all three."""
    pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
    if hasattr(decoder.rotary_emb, "mrope_section"):
        pos = pos.unsqueeze(0).expand(3, -1, -1)
    return decoder.rotary_emb(h, pos)


def run_layer(layer, h: torch.Tensor, pe) -> torch.Tensor:
    """The model's own decoder layer, as it is."""
    out = layer(h, position_embeddings=pe, attention_mask=None)
    return out[0] if isinstance(out, tuple) else out


# The layer taken apart: the token mixer (DeltaNet or attention) is the model's own module,
# called as is; what surrounds it (the zero-centred RMSNorms, the residuals, the SiLU MLP with
# its gate and up projections fused into one matmul) is two pure functions of the weights,
# which --compile turns into one graph each, shared by every layer.

def zc_rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3.5's RMSNorm: float32 inside, times (1 + weight), cast back."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (x32 * (1.0 + w.float())).type_as(x)


def mlp_block(h: torch.Tensor, mixed: torch.Tensor, w_post: torch.Tensor, w_gu: torch.Tensor, w_down: torch.Tensor,
              eps: float) -> torch.Tensor:
    """Residual after the mixer, then the post-attention norm and the MLP, and its residual."""
    import torch.nn.functional as F

    h = h + mixed
    g, u = F.linear(zc_rms(h, w_post, eps), w_gu).chunk(2, dim=-1)
    return h + F.linear(F.silu(g) * u, w_down)


class Parts:
    """The weights of one layer taken apart, and the functions that run it."""

    def __init__(self, layer, w_gu: torch.Tensor, norm_fn=zc_rms, block_fn=mlp_block) -> None:
        """``w_gu``: the gate and up projections' weights in one (model._fuse)."""
        self.layer = layer
        self.eps = float(getattr(layer.input_layernorm, "eps", getattr(layer.input_layernorm, "variance_epsilon", 1e-6)))
        self.w_gu = w_gu
        self.norm_fn, self.block_fn = norm_fn, block_fn

    def __call__(self, h: torch.Tensor, pe) -> torch.Tensor:
        layer = self.layer
        x = self.norm_fn(h, layer.input_layernorm.weight, self.eps)
        if hasattr(layer, "linear_attn"):
            mixed = layer.linear_attn(hidden_states=x, attention_mask=None)
        else:
            mixed = layer.self_attn(hidden_states=x, position_embeddings=pe, attention_mask=None)[0]
        return self.block_fn(h, mixed, layer.post_attention_layernorm.weight, self.w_gu, layer.mlp.down_proj.weight,
                             self.eps)


def parts_apply(cfg, decoder) -> tuple[bool, str]:
    """Whether the layers can be taken apart (SiLU MLP without biases); the norms' arithmetic
    is checked by :func:`self_check`."""
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return False, f"hidden_act {cfg.hidden_act!r} is not silu"
    for layer in decoder.layers:
        mlp = getattr(layer, "mlp", None)
        if mlp is None or not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")):
            return False, "an MLP without gate_proj, up_proj and down_proj (mixture of experts?)"
        if any(getattr(m, "bias", None) is not None for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj)):
            return False, "MLP projections with biases"
    return True, "ok"


_COMPILED: dict = {}


def compiled_parts() -> tuple:
    """zc_rms and mlp_block compiled once per process, shapes dynamic."""
    if not _COMPILED:
        _COMPILED["norm"] = torch.compile(zc_rms, dynamic=True)
        _COMPILED["block"] = torch.compile(mlp_block, dynamic=True)
    return _COMPILED["norm"], _COMPILED["block"]


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
def run(decoder, steps, input_ids: torch.Tensor, num_layers: int, slot: dict[int, int],
        hidden: int, out: torch.Tensor) -> torch.Tensor:
    """The decoder through ``steps`` (one callable (h, pe) -> h per layer to run); the output
    of layer L goes to slot[L] of ``out``."""
    h = decoder.embed_tokens(input_ids)
    pe = position_embeddings(decoder, h)
    if 0 in slot:
        out[..., slot[0] * hidden:(slot[0] + 1) * hidden] = h
    for i, step in enumerate(steps):
        h = step(h, pe)
        j = slot.get(i + 1)
        if j is not None:
            out[..., j * hidden:(j + 1) * hidden] = decoder.norm(h) if i + 1 == num_layers else h
    return out


@torch.inference_mode()
def self_check(decoder, steps, vocab: int, num_layers: int, tol: float, device,
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
    for i, step in enumerate(steps):
        mine = step(ref[i], pe)
        if i + 1 == num_layers:
            mine = decoder.norm(mine)
        a, r = mine[real].float(), ref[i + 1][real].float()
        err = ((a - r).norm() / r.norm().clamp_min(1e-12)).item()
        if not err <= tol:  # NaN fails too
            return f"decoder layer {i + 1}: relative error {err:.2e} > {tol:.0e}"
    return None
