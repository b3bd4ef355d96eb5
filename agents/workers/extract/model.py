"""The model side of extraction: load a causal LM, run its decoder without the LM head and
return the chosen layers' hidden states, concatenated.

Layers count the way transformers' ``output_hidden_states`` does: 0 is the embedding
output, L (1 <= L < num_layers) the output of decoder layer L, and num_layers the last
layer's output after the final norm (transformers replaces the last entry with the normed
``last_hidden_state``).

Two ways to run:

- the fast path, for Llama-shaped decoders (llama, qwen2, qwen3 and their like): our own
  loop over the model's own weights, which stops after the deepest layer kept, fuses the
  q/k/v and gate/up projections into one matmul each (the fused weights share storage with
  the originals: no extra memory), and can be compiled (one graph reused for every layer).
  It is checked against the model's own forward on a small batch before it is used; a
  mismatch falls back to the generic path, with the reason logged.
- the generic path: the base model (``model.model``) with ``output_hidden_states``; no LM
  head, every layer runs.

Samples in a batch are right-padded. With right padding and a causal mask, a real token
never attends to a pad (pads come after it), so the fast path passes no attention mask and
SDPA can use its flash kernels; the pads' outputs are dropped.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

log = logging.getLogger("gpudeck.extract")

FAST_MODEL_TYPES = ("llama", "qwen2", "qwen3")


class ModelError(ValueError):
    """The model or the layer choice cannot be used; the message says why."""


def parse_dtype(name: str) -> torch.dtype:
    table = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
             "fp16": torch.float16, "float32": torch.float32, "fp32": torch.float32}
    try:
        return table[name]
    except KeyError:
        raise ModelError(f"--dtype {name!r}: expected one of {', '.join(table)}") from None


def load_model(path: str, device: str, dtype: torch.dtype):
    """AutoModelForCausalLM from ``path`` on ``device``, in eval mode, no gradients."""
    import importlib.util

    from transformers import AutoModelForCausalLM

    kw = {"attn_implementation": "sdpa"}
    # with accelerate the weights load straight onto the device; without it, on the CPU first
    direct = importlib.util.find_spec("accelerate") is not None
    if direct:
        kw["device_map"] = device
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kw)
    except TypeError:  # transformers < 4.56 calls it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype, **kw)
    if not direct:
        model.to(device)
    model.eval()
    model.requires_grad_(False)
    return model


def text_config(model):
    cfg = model.config
    return getattr(cfg, "text_config", None) or cfg


def context_length(cfg) -> "int | None":
    """The longest sequence the model was built for (max_position_embeddings or its other
    names), or None when the config does not say."""
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx"):
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def vocab_rows(model) -> "int | None":
    """How many token ids the input embedding has rows for (None: unknown)."""
    try:
        return int(model.get_input_embeddings().weight.shape[0])
    except (AttributeError, TypeError, IndexError):
        n = getattr(text_config(model), "vocab_size", None)
        return n if isinstance(n, int) else None


def decoder_of(model):
    """The base model without the LM head."""
    if hasattr(model, "get_decoder"):
        dec = model.get_decoder()
        if dec is not None:
            return dec
    if hasattr(model, "model"):
        return model.model
    raise ModelError(f"{type(model).__name__}: cannot find the decoder (no get_decoder() and no .model)")


def parse_layers(spec, num_layers: int) -> list[int]:
    """``"1,7,14"`` or ``[1, 7, 14]`` -> [1, 7, 14], checked against the model's depth."""
    if isinstance(spec, str):
        try:
            layers = [int(x) for x in spec.replace(" ", "").split(",") if x != ""]
        except ValueError:
            raise ModelError(f"--layers {spec!r}: expected comma-separated integers like 1,7,14") from None
    else:
        layers = [int(x) for x in spec]
    if not layers:
        raise ModelError("--layers: give at least one layer")
    if len(set(layers)) != len(layers):
        raise ModelError(f"--layers {spec!r}: a layer is listed twice")
    bad = [x for x in layers if not 0 <= x <= num_layers]
    if bad:
        raise ModelError(f"--layers {spec!r}: {bad} out of range; this model has {num_layers} decoder layers, "
                         f"so layers go from 0 (embeddings) to {num_layers} (last layer, after the final norm)")
    return layers


# ---------------------------------------------------------------- the fast path

def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # the same arithmetic as LlamaRMSNorm / Qwen3RMSNorm: float32 inside, cast, then weight
    dt = x.dtype
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return w * x32.to(dt)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def decoder_layer(h, cos, sin, w_in, w_qkv, b_qkv, w_qn, w_kn, w_o, b_o, w_post, w_gu, b_gu, w_d, b_d,
                  n_heads: int, n_kv: int, head_dim: int, eps: float, scaling: float):
    """One Llama/Qwen decoder layer, written as a pure function of its weights so that a
    compiled version is one graph shared by every layer."""
    b, s, _ = h.shape
    x = _rms(h, w_in, eps)
    qkv = F.linear(x, w_qkv, b_qkv)
    q, k, v = qkv.split((n_heads * head_dim, n_kv * head_dim, n_kv * head_dim), dim=-1)
    q = q.view(b, s, n_heads, head_dim)
    k = k.view(b, s, n_kv, head_dim)
    v = v.view(b, s, n_kv, head_dim)
    if w_qn is not None:
        q = _rms(q, w_qn, eps)
        k = _rms(k, w_kn, eps)
    q = q.transpose(1, 2)
    k = k.transpose(1, 2)
    v = v.transpose(1, 2)
    c = cos.unsqueeze(1)
    sn = sin.unsqueeze(1)
    q = q * c + _rotate_half(q) * sn
    k = k * c + _rotate_half(k) * sn
    if n_kv != n_heads:
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling, enable_gqa=True)
    else:
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling)
    a = a.transpose(1, 2).reshape(b, s, n_heads * head_dim)
    h = h + F.linear(a, w_o, b_o)
    x = _rms(h, w_post, eps)
    g, u = F.linear(x, w_gu, b_gu).chunk(2, dim=-1)
    return h + F.linear(F.silu(g) * u, w_d, b_d)


_COMPILED = None


def compiled_decoder_layer():
    """One compiled ``decoder_layer`` per process: every runner (and every layer) shares it,
    so a second run in the same process does not compile again."""
    global _COMPILED
    if _COMPILED is None:
        _COMPILED = torch.compile(decoder_layer, dynamic=None)
    return _COMPILED


def _adjacent(tensors: Sequence[torch.Tensor]) -> Optional[torch.Tensor]:
    """The one tensor these contiguous tensors already are, back to back in one storage
    (fused by an earlier runner on this model), else None."""
    first = tensors[0]
    end = first.storage_offset()
    for t in tensors:
        if not t.is_contiguous() or t.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() \
                or t.storage_offset() != end or t.shape[1:] != first.shape[1:] or t.dtype != first.dtype:
            return None
        end += t.numel()
    rows = sum(t.shape[0] for t in tensors)
    return torch.empty(0, dtype=first.dtype, device=first.device).set_(
        first.untyped_storage(), first.storage_offset(), (rows, *first.shape[1:]))


def _fuse(linears: Sequence[torch.nn.Linear]) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """One weight (and bias) for several linears that read the same input. The originals
    become views into it, so the model's own modules keep working and no memory is added;
    linears fused before (another runner on this model) are used as they are."""
    biases = [m.bias for m in linears]
    if all(x is None for x in biases):
        again = _adjacent([m.weight.data for m in linears])
        if again is not None:
            return again, None
    w = torch.cat([m.weight.data for m in linears], dim=0)
    b = torch.cat([x.data for x in biases], dim=0) if all(x is not None for x in biases) else None
    if any(x is not None for x in biases) and b is None:
        raise ModelError("some projections have a bias and some do not")
    row = 0
    for m in linears:
        n = m.weight.shape[0]
        m.weight.data = w[row:row + n]
        if b is not None:
            m.bias.data = b[row:row + n]
        row += n
    return w, b


@dataclass
class _LayerWeights:
    args: tuple


def fast_path_plan(model) -> tuple[Optional[list[_LayerWeights]], str]:
    """The fused weights of every decoder layer, or (None, why the fast path does not apply)."""
    cfg = text_config(model)
    mtype = getattr(cfg, "model_type", "?")
    if mtype not in FAST_MODEL_TYPES:
        return None, f"model_type {mtype!r} is not one of {', '.join(FAST_MODEL_TYPES)}"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return None, f"hidden_act {cfg.hidden_act!r} is not silu"
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return None, "the model has sliding-window or other non-full attention layers"
    if getattr(cfg, "use_sliding_window", False):
        return None, "sliding-window attention is on"
    dec = decoder_of(model)
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(dec, name):
            return None, f"the decoder has no {name!r}"
    plan = []
    for layer in dec.layers:
        att, mlp = layer.self_attn, layer.mlp
        needed = (att, "q_proj"), (att, "k_proj"), (att, "v_proj"), (att, "o_proj"), \
            (mlp, "gate_proj"), (mlp, "up_proj"), (mlp, "down_proj"), \
            (layer, "input_layernorm"), (layer, "post_attention_layernorm")
        missing = [n for o, n in needed if not hasattr(o, n)]
        if missing:
            return None, f"decoder layer has no {', '.join(missing)}"
        head_dim = att.head_dim
        n_heads = att.q_proj.weight.shape[0] // head_dim
        n_kv = att.k_proj.weight.shape[0] // head_dim
        w_qkv, b_qkv = _fuse([att.q_proj, att.k_proj, att.v_proj])
        w_gu, b_gu = _fuse([mlp.gate_proj, mlp.up_proj])
        qn = getattr(att, "q_norm", None)
        kn = getattr(att, "k_norm", None)
        eps = layer.input_layernorm.variance_epsilon
        plan.append(_LayerWeights(args=(
            layer.input_layernorm.weight, w_qkv, b_qkv,
            qn.weight if qn is not None else None, kn.weight if kn is not None else None,
            att.o_proj.weight, att.o_proj.bias, layer.post_attention_layernorm.weight,
            w_gu, b_gu, mlp.down_proj.weight, mlp.down_proj.bias,
            n_heads, n_kv, head_dim, eps, float(att.scaling))))
    return plan, "ok"


class HiddenStateRunner:
    """``runner(input_ids)`` -> hidden states of the chosen layers, [B, S, len(layers) * H],
    in the user's layer order. ``input_ids`` is [B, S], right-padded."""

    def __init__(self, model, layers, fast: bool = True, compile: bool = False, check: bool = True) -> None:
        self.model = model
        self.cfg = text_config(model)
        self.decoder = decoder_of(model)
        self.num_layers = self.cfg.num_hidden_layers
        self.layers = parse_layers(layers, self.num_layers)
        self.hidden = self.cfg.hidden_size
        self.out_width = len(self.layers) * self.hidden
        self.layers_run = max(self.layers)  # the deepest decoder layer that must run
        self.dtype = next(self.decoder.parameters()).dtype
        self.device = next(self.decoder.parameters()).device
        self.path = "generic"
        self.why_not_fast = "fast path switched off"
        self._plan = None
        self._layer_fn = decoder_layer
        self._check_compiled = False
        self._hybrid = False
        if fast:
            plan, why = fast_path_plan(model)
            self.why_not_fast = why
            if plan is None:
                self._try_hybrid(check, compile)
            if plan is not None:
                self._plan = plan
                self.path = "fast"
                if check:
                    err = self.self_check()
                    if err is not None:
                        log.warning("fast path disagrees with the model's own forward (%s); using the generic path", err)
                        self.why_not_fast = f"self-check failed: {err}"
                        self._plan, self.path = None, "generic"
        if compile and self._plan is not None:
            self._layer_fn = compiled_decoder_layer()
            self._check_compiled = check
            self.path = "fast+compiled"
        self.generic_full_depth = self.path == "generic"
        if self.path == "generic":
            self.layers_run = self.num_layers  # the generic path runs every layer

    def _try_hybrid(self, check: bool, compile: bool) -> None:
        """The hybrid path (linear and full attention layers, :mod:`hybrid`) where it applies."""
        from . import hybrid

        steps, path, why = hybrid.layer_steps(self.cfg, self.decoder, self.layers_run, _fuse, self.device,
                                              layer_tolerance(self.dtype) if check else None, compile)
        if steps is None:
            self.why_not_fast = f"{self.why_not_fast}; not hybrid either: {why}" if path is None else why
            return
        assert path is not None, "the hybrid path's steps come with its name"
        self._hybrid, self._steps, self.path, self.why_not_fast = True, steps, path, why

    def flop_model(self):
        """What one sample costs (perf.FlopModel, or perf.CountedFlops for a hybrid)."""
        from .perf import FlopModel

        if self._hybrid:
            from . import hybrid
            return hybrid.counted_flops(self.cfg, self.decoder, self.layers_run)
        return FlopModel.from_config(self.cfg, self.layers_run)

    # -- running
    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                 out: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self._hybrid:
            from . import hybrid

            b, s = input_ids.shape
            with self._attention():
                return hybrid.run(self.decoder, self._steps, input_ids, self.num_layers,
                                  {layer: j for j, layer in enumerate(self.layers)}, self.hidden,
                                  self._alloc(b, s, out))
        if self._plan is not None:
            out = self._fast(input_ids, out)
            if self._check_compiled:  # the first compiled batch is checked against eager once
                self._check_compiled = False
                self._compare_compiled(input_ids, out)
            return out
        return self._generic(input_ids, attention_mask, out)

    @property
    def _fast_plan(self) -> list[_LayerWeights]:
        """The fast path's weights, asked for on the fast path only."""
        assert self._plan is not None, "the fast path runs with its plan"
        return self._plan

    def _compare_compiled(self, input_ids: torch.Tensor, got: torch.Tensor) -> None:
        """The first compiled batch: the compiled layer against the eager one on the same
        input (one graph serves every layer, so one layer tells)."""
        dec = self.decoder
        h = dec.embed_tokens(input_ids[:1])
        cos, sin = dec.rotary_emb(h, torch.arange(h.shape[1], device=h.device).unsqueeze(0))
        with self._attention():
            fast = self._layer_fn(h, cos, sin, *self._fast_plan[0].args)
            ref = decoder_layer(h, cos, sin, *self._fast_plan[0].args)
        err = _rel_err(fast, ref)
        if not err <= layer_tolerance(self.dtype):
            log.warning("the compiled layer disagrees with eager (relative error %.2e); running eager", err)
            self._layer_fn, self.path = decoder_layer, "fast"
            got.copy_(self._fast(input_ids, None))

    def _alloc(self, b: int, s: int, out: Optional[torch.Tensor]) -> torch.Tensor:
        if out is None:
            return torch.empty(b, s, self.out_width, dtype=self.dtype, device=self.device)
        return out

    def _attention(self):
        """SDPA backends in order of preference: cuDNN first where it runs (Hopper: about
        twice flash's speed at 2k tokens, measured in bench/extract_gpu.py), then flash."""
        import contextlib

        if self.device.type != "cuda" or os.environ.get("GPUDECK_SDPA") == "default":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                 SDPBackend.MATH]
        if os.environ.get("GPUDECK_SDPA") == "flash":
            order = order[1:]
        try:
            return sdpa_kernel(order, set_priority=True)
        except TypeError:  # torch < 2.6: no priority order, the default one
            return contextlib.nullcontext()

    def _fast(self, input_ids: torch.Tensor, out: Optional[torch.Tensor]) -> torch.Tensor:
        with self._attention():
            return self._fast_inner(input_ids, out)

    def _fast_inner(self, input_ids: torch.Tensor, out: Optional[torch.Tensor]) -> torch.Tensor:
        b, s = input_ids.shape
        dec, hsz = self.decoder, self.hidden
        out = self._alloc(b, s, out)
        slot = {layer: j for j, layer in enumerate(self.layers)}
        h = dec.embed_tokens(input_ids)
        pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
        cos, sin = dec.rotary_emb(h, pos)
        if 0 in slot:
            out[..., slot[0] * hsz:(slot[0] + 1) * hsz] = h
        if self._layer_fn is not decoder_layer:
            # batch and length vary from batch to batch: one graph for all shapes
            for t, dims in ((h, (0, 1)), (cos, (1,)), (sin, (1,))):
                for d in dims:
                    torch._dynamo.maybe_mark_dynamic(t, d)
        for i in range(self.layers_run):
            h = self._layer_fn(h, cos, sin, *self._fast_plan[i].args)
            j = slot.get(i + 1)
            if j is not None:
                out[..., j * hsz:(j + 1) * hsz] = dec.norm(h) if i + 1 == self.num_layers else h
        return out

    def _generic(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor],
                 out: Optional[torch.Tensor]) -> torch.Tensor:
        b, s = input_ids.shape
        res = self.decoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                           use_cache=False)
        hs = res.hidden_states
        out = self._alloc(b, s, out)
        for j, layer in enumerate(self.layers):
            out[..., j * self.hidden:(j + 1) * self.hidden] = hs[layer]
        return out

    # -- checking
    @torch.inference_mode()
    def self_check(self, seq: int = 48, batch: int = 2) -> Optional[str]:
        """Check the fast path against the model's own forward, layer by layer: each of our
        layers is fed the model's own input to that layer, and its output is compared with
        the model's output of that layer. Layer by layer, so that rounding differences are
        not amplified through depth (a random-weight model amplifies them a lot); a wrong
        layer is still caught at once. None when all agree, else what differs."""
        gen = torch.Generator(device="cpu").manual_seed(0)
        ids = torch.randint(0, self.cfg.vocab_size, (batch, seq), generator=gen).to(self.device)
        ref = self.decoder(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
        dec = self.decoder
        emb = dec.embed_tokens(ids)
        if _rel_err(emb, ref[0]) > 0:
            return "the embedding output differs from hidden_states[0]"
        cos, sin = dec.rotary_emb(emb, torch.arange(seq, device=self.device).unsqueeze(0))
        tol = layer_tolerance(self.dtype)
        with self._attention():
            for i in range(self.layers_run):
                mine = decoder_layer(ref[i], cos, sin, *self._fast_plan[i].args)
                if i + 1 == self.num_layers:
                    mine = dec.norm(mine)
                err = _rel_err(mine, ref[i + 1])
                if not err <= tol:  # NaN fails too
                    return f"decoder layer {i + 1}: relative error {err:.2e} > {tol:.0e}"
        return None


def layer_tolerance(dtype: torch.dtype) -> float:
    """Relative error allowed for one decoder layer computed two ways."""
    return 1e-5 if dtype == torch.float32 else 2e-2


def _rel_err(a: torch.Tensor, r: torch.Tensor) -> float:
    a, r = a.float(), r.float()
    return ((a - r).norm() / r.norm().clamp_min(1e-12)).item()
