"""The fast path for hybrid decoders: Gated DeltaNet (linear attention) layers mixed with
full-attention ones, as in Qwen3.5/3.6 (``qwen3_5_text``) and Qwen3-Next.

Their layers differ too much from Llama's for the fused function of :mod:`model` (gated
attention, zero-centred norms, partial rotary, the DeltaNet's conv and recurrence), so this
path takes each layer apart around the model's own modules and wins what can be won:

- it stops after the deepest layer kept, and never computes the LM head;
- it passes no attention mask. Samples are right-padded: a real token's causal attention
  and the DeltaNet's causal conv and recurrence never see a pad, which only comes after
  it, so SDPA runs its flash/cuDNN kernels (``is_causal``) and no mask is ever built;
- a Gated DeltaNet layer (Qwen3.5's layout) runs as :class:`DeltaNet`: its four input
  projections in one matmul, the causal conv on the [B, S, D] layout (flash-linear-
  attention's Triton kernel, else shifted multiply-adds that --compile makes one kernel),
  the gates and the gated norm as small functions --compile fuses, and the delta rule's
  chunked kernel (flash-linear-attention's ``chunk_gated_delta_rule``, the ``hybrid``
  extra; else transformers' reference PyTorch code, correct and much slower). Another
  layout runs the model's own module. :func:`kernels` says which ones run; the worker logs it.

Before use it is checked layer by layer against the model's own forward on a right-padded
batch with its attention mask, comparing the real tokens only (:func:`self_check`): that
checks the "no mask" reasoning on this very model.
"""

from __future__ import annotations

import functools
import importlib
import logging
from typing import Optional

import torch

from . import tuning

log = logging.getLogger("gpudeck.extract")  # the worker's own log, as model.py

HYBRID_MODEL_TYPES = ("qwen3_5_text", "qwen3_5", "qwen3_next")


def _kernel(module: str, name: str):
    """``module.name`` when it imports, else None (absent, or present and broken: no Triton, no CUDA)."""
    try:
        return getattr(importlib.import_module(module), name, None)
    except Exception:
        return None


def kernels(apart: bool = True) -> dict[str, str]:
    """Which implementation the DeltaNet layers get: the kernel package's name, or "torch"
    for PyTorch code (transformers' reference code, or :func:`conv_silu`). ``apart``: the
    layers taken apart (:class:`DeltaNet`), else the model's own module, which takes
    causal-conv1d's kernel when it is installed."""
    fla_rule = _kernel("fla.ops.gated_delta_rule", "chunk_gated_delta_rule") is not None
    if apart:
        conv = "fla" if _kernel("fla.modules.causal_conv1d", "causal_conv1d") is not None else "torch"
    else:
        conv = "causal_conv1d" if _kernel("causal_conv1d", "causal_conv1d_fn") is not None else "torch"
    return {"gated_delta_rule": "fla" if fla_rule else "torch", "causal_conv1d": conv}


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


# The Gated DeltaNet taken apart (Qwen3.5's layout). Each function matches the arithmetic of
# transformers' Qwen3_5GatedDeltaNet; self_check holds them to it on the model itself.

DELTANET_PARTS = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "conv1d", "A_log", "dt_bias", "norm",
                  "out_proj")


def conv_silu(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The causal depthwise conv and its SiLU on [B, S, D], ``w`` [D, W]: out[t] is the sum
    over k of w[:, k] * x[t + k - W + 1], as shifted multiply-adds in float32; no transposes,
    and one kernel once compiled."""
    import torch.nn.functional as F

    s, width = x.shape[1], w.shape[1]
    xp = F.pad(x, (0, 0, width - 1, 0)).float()
    w32 = w.float()
    y = xp[:, 0:s] * w32[:, 0]
    for k in range(1, width):
        y = y + xp[:, k:k + s] * w32[:, k]
    return F.silu(y).to(x.dtype)


def gates(a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor):
    """The delta rule's decay g (log space, float32) and its step size beta."""
    import torch.nn.functional as F

    return -a_log.float().exp() * F.softplus(a.float() + dt_bias), b.sigmoid()


def gated_rms(o: torch.Tensor, z: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3.5's RMSNormGated over each head: float32 norm, times the weight in the input
    dtype, times SiLU(z) in float32, cast back."""
    import torch.nn.functional as F

    h = o.float()
    h = (w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(o.dtype)) * F.silu(z.float())
    return h.to(o.dtype)


def _fla_conv(causal_conv1d, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """flash-linear-attention's ``causal_conv1d`` with SiLU; it reads the strided [B, S, D] view as it is."""
    y = causal_conv1d(x=x, weight=w, activation="silu")
    return y[0] if isinstance(y, tuple) else y


def delta_rule_of(mixer):
    """The chunked gated delta rule: flash-linear-attention's kernel, else the reference code
    the model's own module would run; None when neither is found."""
    fn = _kernel("fla.ops.gated_delta_rule", "chunk_gated_delta_rule")
    if fn is None:
        fn = getattr(mixer, "chunk_gated_delta_rule", None)
    if fn is None:
        import sys
        fn = getattr(sys.modules.get(type(mixer).__module__), "torch_chunk_gated_delta_rule", None)
    return fn


def deltanet_of(mixer, fuse) -> tuple[Optional["DeltaNet"], str]:
    """(:class:`DeltaNet` for this linear-attention module, "ok"), its input projections fused
    with ``fuse`` (model._fuse); or (None, why it cannot run it)."""
    missing = [n for n in DELTANET_PARTS if not hasattr(mixer, n)]
    if missing:
        return None, f"a DeltaNet without {', '.join(missing)} (another layout)"
    if mixer.conv1d.bias is not None or any(getattr(mixer, n).bias is not None for n in DELTANET_PARTS[:4]):
        return None, "DeltaNet projections or conv with biases"
    if getattr(mixer, "activation", "silu") != "silu":
        return None, f"DeltaNet activation {mixer.activation!r} is not silu"
    rule = delta_rule_of(mixer)
    if rule is None:
        return None, "no chunked gated delta rule found (neither fla nor transformers')"
    return DeltaNet(mixer, fuse([getattr(mixer, n) for n in DELTANET_PARTS[:4]])[0], rule), "ok"


class DeltaNet:
    """One Gated DeltaNet token mixer taken apart: x [B, S, hidden] -> its output."""

    def __init__(self, mixer, w_in: torch.Tensor, rule) -> None:
        """``w_in``: in_proj_qkv, in_proj_z, in_proj_b and in_proj_a's weights in one (model._fuse);
        ``rule``: the chunked gated delta rule (:func:`delta_rule_of`)."""
        self.m = mixer
        self.w_in = w_in
        self.splits = [getattr(mixer, n).weight.shape[0] for n in DELTANET_PARTS[:4]]
        self.qkv_splits = [mixer.key_dim, mixer.key_dim, mixer.value_dim]
        self.w_conv = mixer.conv1d.weight.squeeze(1)  # [D, W], a view
        self.eps = float(getattr(mixer.norm, "variance_epsilon", getattr(mixer.norm, "eps", 1e-6)))
        self.rule = rule
        fla_conv = _kernel("fla.modules.causal_conv1d", "causal_conv1d")
        self.conv_fn = functools.partial(_fla_conv, fla_conv) if fla_conv is not None else conv_silu
        self.gates_fn, self.norm_fn = gates, gated_rms

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        import torch.nn.functional as F

        m = self.m
        b_, s, _ = x.shape
        qkv, z, b, a = F.linear(x, self.w_in).split(self.splits, dim=-1)
        q, k, v = self.conv_fn(qkv, self.w_conv).split(self.qkv_splits, dim=-1)
        g, beta = self.gates_fn(a, b, m.A_log, m.dt_bias)
        o, _ = self.rule(q.reshape(b_, s, m.num_k_heads, m.head_k_dim), k.reshape(b_, s, m.num_k_heads, m.head_k_dim),
                         v.reshape(b_, s, m.num_v_heads, m.head_v_dim), g=g, beta=beta, initial_state=None,
                         output_final_state=False, use_qk_l2norm_in_kernel=True)
        o = self.norm_fn(o, z.reshape(b_, s, m.num_v_heads, m.head_v_dim), m.norm.weight, self.eps)
        return F.linear(o.reshape(b_, s, -1), m.out_proj.weight)


class Parts:
    """The weights of one layer taken apart, and the functions that run it."""

    def __init__(self, layer, w_gu: torch.Tensor, mixer: Optional[DeltaNet] = None, norm_fn=zc_rms,
                 block_fn=mlp_block) -> None:
        """``w_gu``: the gate and up projections' weights in one (model._fuse); ``mixer``: the
        layer's DeltaNet taken apart, else its own token mixer runs."""
        self.layer = layer
        self.eps = float(getattr(layer.input_layernorm, "eps", getattr(layer.input_layernorm, "variance_epsilon", 1e-6)))
        self.w_gu = w_gu
        self.mixer = mixer
        self.norm_fn, self.block_fn = norm_fn, block_fn

    def __call__(self, h: torch.Tensor, pe) -> torch.Tensor:
        layer = self.layer
        x = self.norm_fn(h, layer.input_layernorm.weight, self.eps)
        if self.mixer is not None:
            mixed = self.mixer(x)
        elif hasattr(layer, "linear_attn"):
            mixed = layer.linear_attn(hidden_states=x, attention_mask=None)
        else:
            mixed = layer.self_attn(hidden_states=x, position_embeddings=pe, attention_mask=None)[0]
        return self.block_fn(h, mixed, layer.post_attention_layernorm.weight, self.w_gu, layer.mlp.down_proj.weight,
                             self.eps)

    def compile(self) -> None:
        """Its small functions compiled (shared by every layer: compiled once per process)."""
        c = compiled_parts()
        self.norm_fn, self.block_fn = c["norm"], c["block"]
        if self.mixer is not None:
            self.mixer.gates_fn, self.mixer.norm_fn = c["gates"], c["gated_norm"]
            if self.mixer.conv_fn is conv_silu:
                self.mixer.conv_fn = c["conv"]


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


def compiled_parts() -> dict:
    """The layers' small functions compiled once per process, shapes dynamic."""
    if not _COMPILED:
        for name, fn in (("norm", zc_rms), ("block", mlp_block), ("gates", gates), ("gated_norm", gated_rms),
                         ("conv", conv_silu)):
            _COMPILED[name] = torch.compile(fn, dynamic=True)
    return _COMPILED


def layer_steps(cfg, decoder, layers_run: int, fuse, device, tol: Optional[float],
                compile: bool) -> tuple[Optional[list], Optional[str], str]:
    """The hybrid path for the first ``layers_run`` layers: (steps, path, what runs), with path
    "hybrid" (taken apart: :class:`Parts`, their DeltaNets as :class:`DeltaNet` where the
    layout allows; "hybrid+compiled" with ``compile``) when that agrees with the model's own
    forward, else "hybrid-layers" (the model's own layers one by one). ``tol``: the
    self-check's tolerance, None for no check. (None, None, why) when the model is not a
    hybrid; (None, path, why) when no path agrees."""
    ok, why = hybrid_plan(cfg, decoder)
    if not ok:
        return None, None, why
    layers = decoder.layers[:layers_run]
    tried: list[tuple[str, list]] = []
    apart, why_not_apart = parts_apply(cfg, decoder)
    why_whole = ""  # why a DeltaNet module runs whole
    if apart:
        steps = []
        for layer in layers:
            mixer = None
            if hasattr(layer, "linear_attn"):
                mixer, why = deltanet_of(layer.linear_attn, fuse)
                why_whole = why_whole or (why if mixer is None else "")
            steps.append(Parts(layer, fuse([layer.mlp.gate_proj, layer.mlp.up_proj])[0], mixer))
        tried.append(("hybrid", steps))
    tried.append(("hybrid-layers", [functools.partial(run_layer, layer) for layer in layers]))
    if device.type == "cuda":  # the kernel package is imported by now: its autotuners pinned before they tune
        tuning.pin(torch.cuda.get_device_name(device))
    for path, steps in tried:
        err = self_check(decoder, steps, cfg.vocab_size, cfg.num_hidden_layers, tol, device) \
            if tol is not None else None
        if err is None:
            break
        log.warning("the %s path disagrees with the model's own forward (%s)", path, err)
    else:
        return None, "generic", f"hybrid self-check failed: {err}"
    if compile and path == "hybrid":
        for part in steps:
            part.compile()
        path = "hybrid+compiled"
    k = kernels(apart=path != "hybrid-layers" and not why_whole)
    said = "kernels: " + ", ".join(f"{n}={v}" for n, v in k.items()) \
        + ("" if apart else f"; layers called whole: {why_not_apart}") \
        + (f"; DeltaNet modules called whole: {why_whole}" if apart and why_whole else "")
    if k["gated_delta_rule"] == "torch" and device.type == "cuda":
        log.warning("hybrid model: the DeltaNet layers run transformers' reference PyTorch code; pip install "
                    "'gpudeck[hybrid]' (flash-linear-attention) for the Triton kernels")
    return steps, path, said


def counted_flops(cfg, decoder, layers_run: int):
    """perf.CountedFlops of the first ``layers_run`` layers, from their own linears."""
    from .perf import CountedFlops

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
