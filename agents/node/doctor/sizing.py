"""A model's memory besides its weights: the KV cache per token and a hybrid's recurrent state per
request, and the state pools the engines size for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ...contract.units import human_bytes
from .base import _arg


_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8_e4m3fn": 1,
                "float8": 1, "fp8": 1, "int8": 1}


def _nth(n: int) -> str:
    return {1: "layer", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def layer_layout(cfg: dict[str, Any]) -> Optional[tuple[list[str], str]]:
    """Each layer's type (transformers' names: ``full_attention``, ``linear_attention``, ...) and
    where the list comes from, for a model whose config says it: ``layer_types``, else
    ``full_attention_interval`` (every Nth layer full attention, the others linear, as
    transformers' Qwen3-Next and Qwen3.5 configs build ``layer_types`` from it). None for a
    model that says neither: every layer is attention."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types and all(isinstance(t, str) for t in types):
        return list(types), "layer_types"
    layers = int(cfg.get("num_hidden_layers") or 0)
    interval = cfg.get("full_attention_interval")
    every = int(interval) if isinstance(interval, int) and interval > 0 else 0
    said = f"every {_nth(every)}: full_attention_interval" if every else ""
    if not said and cfg.get("linear_num_value_heads"):  # linear layers, and no word of where: transformers' default
        every, said = 4, "every 4th assumed: transformers' default full_attention_interval"
    if not said or not layers:
        return None
    return ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(layers)], said


def _holds_kv(layer_type: str) -> bool:
    """An attention layer (full, sliding, chunked) holds a KV cache; a linear-attention, mamba or
    conv layer holds a state of fixed size instead."""
    return "attention" in layer_type and "linear" not in layer_type


def kv_bytes_per_token(cfg: dict[str, Any], kv_dtype_bytes: int) -> tuple[int, str]:
    """The KV cache's bytes per token over the layers that hold one (every layer, or the
    attention layers of a hybrid: :func:`layer_layout`), and the formula said in words."""
    layout = layer_layout(cfg)
    if layout:
        types, source = layout
        kv_types = [t for t in types if _holds_kv(t)]
        which = "full-attention" if set(kv_types) <= {"full_attention"} else "attention"
        layers = len(kv_types)
        counted = f"{layers} {which} layers of {len(types)} ({source})"
    else:
        layers = int(cfg.get("num_hidden_layers") or 0)
        counted = f"{layers} layers"
    if cfg.get("kv_lora_rank"):  # MLA (DeepSeek): one compressed latent per layer, the same on every GPU
        width = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)
        return layers * width * kv_dtype_bytes, f"MLA: {counted} x {width} x {kv_dtype_bytes} B"
    heads = int(cfg.get("num_attention_heads") or 1)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or int(cfg.get("hidden_size") or 0) // heads)
    return (2 * layers * kv_heads * head_dim * kv_dtype_bytes,
            f"2 x {counted} x {kv_heads} KV heads x {head_dim} x {kv_dtype_bytes} B")


@dataclass(frozen=True)
class RecurrentState:
    """What one request holds in a hybrid model's linear-attention layers, whatever its length."""

    per_request: int  # bytes over every linear layer, before tensor parallelism splits its heads
    formula: str  # said in words
    uncounted: str = ""  # layers that hold no KV cache and whose state is not counted, said in words


def recurrent_state(cfg: dict[str, Any], ssm_bytes: int, conv_bytes: int) -> Optional[RecurrentState]:
    """A request's state in the Gated DeltaNet layers (``linear_attention``; the config's
    ``linear_*`` keys, as transformers' Qwen3-Next and Qwen3.5 configs name them): per layer the
    SSM state, value heads x key head dim x value head dim in ``ssm_bytes``, and the causal
    conv's, (2 x key heads x key head dim + value heads x value head dim) x (kernel - 1) in
    ``conv_bytes``. None for a model without linear layers."""
    layout = layer_layout(cfg)
    if not layout:
        return None
    types = [t for t in layout[0] if not _holds_kv(t)]
    if not types:
        return None
    linear = types.count("linear_attention")
    keys = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
            "linear_conv_kernel_dim")
    shape = [v if isinstance(v, int) else 0 for v in (cfg.get(k) for k in keys)]  # 0: not given as a number
    others = sorted(set(types) - {"linear_attention"})
    uncounted = [f"{types.count(t)} {t} layers" for t in others]
    if linear and not all(v > 0 for v in shape):
        uncounted.insert(0, f"{linear} linear_attention layers (no {', '.join(keys)} in the config)")
        linear = 0
    note = f"the state of {' and '.join(uncounted)} is not counted" if uncounted else ""
    if not linear:
        return RecurrentState(0, "", note)
    key_heads, value_heads, key_dim, value_dim, kernel = (int(v) for v in shape)
    ssm = value_heads * key_dim * value_dim * ssm_bytes
    conv_dim = 2 * key_heads * key_dim + value_heads * value_dim
    conv = conv_dim * (kernel - 1) * conv_bytes
    return RecurrentState(
        linear * (ssm + conv),
        f"{linear} linear-attention layers x (SSM {value_heads} x {key_dim} x {value_dim} x {ssm_bytes} B = "
        f"{human_bytes(ssm, binary=True)} + conv {conv_dim} x {kernel - 1} x {conv_bytes} B = "
        f"{human_bytes(conv, binary=True)})", note)


def sglang_ssm_dtype(args: list[str], env: dict[str, str], cfg: dict[str, Any]) -> tuple[str, str]:
    """The SSM state's dtype as SGLang picks it, and where from: ``--mamba-ssm-dtype`` (which
    sets SGLANG_MAMBA_SSM_DTYPE), the job's SGLANG_MAMBA_SSM_DTYPE, the config's
    ``mamba_ssm_dtype``, else float32 (sglang/srt/configs/mamba_utils.py)."""
    for value, said in ((_arg(args, "--mamba-ssm-dtype"), "--mamba-ssm-dtype"),
                        (env.get("SGLANG_MAMBA_SSM_DTYPE"), "the job's SGLANG_MAMBA_SSM_DTYPE"),
                        (cfg.get("mamba_ssm_dtype"), "the config's mamba_ssm_dtype")):
        if value in ("float32", "bfloat16", "float16"):
            return str(value), said
    return "float32", "SGLang's default; --mamba-ssm-dtype sets it"


@dataclass(frozen=True)
class StatePool:
    """The recurrent states an engine holds for a hybrid model, and the requests they let run."""

    states: int  # each the state of one request (or of a prefix kept for reuse)
    running: int  # requests that can run at once
    said: str  # both, and where they come from, in words


# SGLang keeps about 3 states a running request when its radix cache is on (the request's own,
# and the prefixes it caches and tracks): MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO, the same
# from 0.5.4 to 0.5.23. With --disable-radix-cache, one.
SGLANG_STATES_PER_REQUEST = 3
SGLANG_MAMBA_FULL_MEMORY_RATIO = 0.9  # --mamba-full-memory-ratio's default


def sglang_state_pool(args: list[str], room: float, per_state: float) -> StatePool:
    """How SGLang sizes its state pool (``--max-mamba-cache-size``; else, with
    --disable-radix-cache, ``--max-running-requests``; else ``--mamba-full-memory-ratio`` of
    what the weights leave, ``room``, the KV cache the rest) and the running requests it allows:
    the pool over the states a request takes, at most ``--max-running-requests``."""
    size = _arg(args, "--max-mamba-cache-size")
    most = _arg(args, "--max-running-requests")
    single = "--disable-radix-cache" in args
    per_request = 1 if single else SGLANG_STATES_PER_REQUEST
    why = "a state each" if single else f"{per_request} states a request with SGLang's radix cache"
    if size:
        states, source = int(size), f"--max-mamba-cache-size {size}"
    elif single and most:
        return StatePool(int(most), int(most), f"{most} requests running at once (--max-running-requests {most} "
                                               f"with --disable-radix-cache: a state each)")
    else:
        ratio_arg = _arg(args, "--mamba-full-memory-ratio")
        r = float(ratio_arg) if ratio_arg else SGLANG_MAMBA_FULL_MEMORY_RATIO
        states = int(room * r / (1 + r) // per_state) if per_state > 0 else 0
        source = f"{r:g}/{1 + r:g} of what the weights leave: --mamba-full-memory-ratio {r:g}" + (
            "" if ratio_arg else " assumed, SGLang's default")
    running = states // per_request
    if most and int(most) <= running:
        running, why = int(most), f"--max-running-requests {most}"
    elif most:
        why += f": fewer than --max-running-requests {most}"
    return StatePool(states, running, f"{states} states ({source}), {running} requests running at once ({why})")


DEFAULT_LLAMA_SLOTS = 4  # llama-server's --parallel -1 (auto): its start says "n_slots = 4"


def llama_server_state_pool(slots: Optional[int]) -> StatePool:
    """The state pool of a llama-server job (its ``slots``, the server's --parallel), for that
    kind's fit: llama.cpp holds one recurrent state per slot, and a slot runs one request."""
    if slots:
        return StatePool(slots, slots, f"{slots} slots: {slots} requests running at once, a state each")
    n = DEFAULT_LLAMA_SLOTS
    return StatePool(n, n, f"{n} slots assumed (llama-server's --parallel when not given): {n} requests running "
                           f"at once, a state each")

