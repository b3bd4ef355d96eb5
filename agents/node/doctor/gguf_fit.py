"""The model line of a llama-server job: its GGUF's weights and the KV cache of its ``slots`` x
``context`` tokens against the GPUs' memory.

The GGUF's header is read with the ``gguf`` package (llama.cpp's gguf-py, on PyPI as ``gguf``)
in a subprocess of the agent's interpreter, bounded by a timeout: a 50,000-token vocabulary
takes it a few seconds, and the agent does not keep numpy for it. Without the package the line
says the fit is not known, and how to know it."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ...contract.jobs import JobSpec
from ...contract.kinds import LlamaServerOptions
from ...contract.ops import Check
from ...contract.units import human_bytes
from .base import FAIL, OK, WARN, Thresholds, _arg, _options
from .imports import timed_import
from .fit import _gpus_of
from .sizing import llama_server_state_pool

# What the subprocess prints: the architecture's own keys (``llama.block_count``, ...), a few
# general ones, and the tensors' bytes. The tokenizer's arrays are not printed.
_READ = r"""
import json, sys
try:
    import gguf
except ImportError as exc:
    print(json.dumps({"missing": f"{type(exc).__name__}: {exc}"}))
    sys.exit(0)
try:
    r = gguf.GGUFReader(sys.argv[1])
    arch = str(r.fields["general.architecture"].contents())
    out = {k: r.fields[k].contents() for k in r.fields
           if k.startswith(arch + ".") or k in ("general.architecture", "general.name", "general.size_label")}
    out["tensor_bytes"] = sum(int(t.n_bytes) for t in r.tensors)
except Exception as exc:
    out = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(out, default=str))
"""

# llama.cpp's KV cache types (--cache-type-k / -ctk, --cache-type-v / -ctv; f16 when not given):
# bytes per element, a quantized type's block over its 32 elements
CACHE_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
                    "iq4_nl": 18 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32}
FIT_FAIL, FIT_WARN = 0.95, 0.85  # of the GPUs' memory: the rest is llama.cpp's compute buffers and CUDA's own


def read_gguf(path: Path, python: str, timeout_s: float) -> tuple[Optional[dict[str, Any]], str]:
    """The GGUF header's figures, or None and why not (no gguf package: ``missing`` in the why)."""
    said, why = timed_import(python, _READ, timeout_s, str(path))
    if said is None:
        return None, f"reading its header: {why}"
    if "missing" in said:
        return None, f"missing: the agent's python {python} has no gguf package ({said['missing']})"
    if "error" in said:
        return None, f"its header cannot be read: {said['error']}"
    return said, ""


@dataclass(frozen=True)
class GgufKv:
    per_token: float  # bytes
    formula: str  # said in words
    notes: list[str]  # what is not counted, or counted as more than llama.cpp holds


def _per_layer(value: Any, layers: int) -> list[int]:
    """A key that is one number for every layer, or a list of one per layer."""
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(value or 0)] * layers


def gguf_kv(meta: dict[str, Any], k_bytes: float, v_bytes: float) -> GgufKv:
    """The KV cache's bytes per token of a GGUF's model (each layer's KV heads x its key and
    value lengths, in the cache's types), and the formula said in words."""
    arch = str(meta.get("general.architecture"))

    def key(name: str) -> Any:
        """The architecture's own key (``llama.block_count``), as the header says it."""
        return meta.get(f"{arch}.{name}")

    layers = int(key("block_count") or 0)
    heads = _per_layer(key("attention.head_count"), layers)
    kv = _per_layer(key("attention.head_count_kv") or key("attention.head_count"), layers)
    width = int(key("embedding_length") or 0)
    most_heads = max(heads, default=0)
    k_len = int(key("attention.key_length") or (width // most_heads if most_heads else 0))
    v_len = int(key("attention.value_length") or k_len)
    notes: list[str] = []
    if key("attention.sliding_window"):
        notes.append(f"sliding-window layers counted whole (a window of {key('attention.sliding_window')} tokens: "
                     f"llama.cpp holds less for them)")
    if key("attention.kv_lora_rank"):  # MLA: one latent per layer and token
        latent = int(key("attention.kv_lora_rank")) + int(key("rope.dimension_count") or 0)
        return GgufKv(layers * latent * k_bytes, f"MLA: {layers} layers x {latent} x {k_bytes:g} B", notes)
    kv_layers = [n for n in kv if n]
    if len(set(kv_layers)) == 1 and k_len == v_len and k_bytes == v_bytes:
        counted = f"{len(kv_layers)} layers" + (f" of {layers}" if len(kv_layers) < layers else "")
        formula = f"2 x {counted} x {kv_layers[0]} KV heads x {k_len} x {k_bytes:g} B"
    else:
        formula = (f"{sum(kv_layers)} KV heads over {len(kv_layers)} of {layers} layers x "
                   f"({k_len} x {k_bytes:g} B + {v_len} x {v_bytes:g} B)")
    return GgufKv(sum(kv_layers) * (k_len * k_bytes + v_len * v_bytes), formula, notes)


def _cache_type(args: list[str], *flags: str) -> tuple[str, float, bool]:
    """A KV cache type the job's args give (else f16), its bytes per element, and whether it is known."""
    kind = _arg(args, *flags) or "f16"
    return kind, CACHE_TYPE_BYTES.get(kind, 2.0), kind in CACHE_TYPE_BYTES


def _on_gpu(gpu_layers: Any, layers: int) -> tuple[float, str]:
    """The share of the model llama-server puts on the GPUs, and how the line says it."""
    if gpu_layers in (None, "auto"):
        return 1.0, "gpu_layers auto: as many layers as fit (all counted)"
    if gpu_layers == "all" or int(gpu_layers) >= layers:
        return 1.0, f"gpu_layers {gpu_layers}: every layer"
    return int(gpu_layers) / layers if layers else 0.0, f"gpu_layers {gpu_layers} of {layers} layers"


def check_gguf(spec: JobSpec, path: Path, name: str, gpu_totals: list[tuple[str, float]],
               th: Thresholds = Thresholds(), python: str = sys.executable) -> Check:
    """A llama-server job's GGUF (at ``path``, named ``name`` in the line) and its slots' KV cache
    against the memory of the GPUs it sees (its ``gpus``, else all: llama.cpp splits the layers
    over them)."""
    meta, why = read_gguf(path, python, max(1.0, th.quick_timeout_s * 0.8))
    if meta is None:
        if why.startswith("missing: "):
            return Check("model", WARN, f"{name}: its fit is not known: {why[len('missing: '):]}",
                         f"{python} -m pip install gguf (llama.cpp's gguf-py), then doctor again", job=spec.name)
        return Check("model", FAIL, f"{name}: not a GGUF model llama-server can load: {why}",
                     "point model at a complete .gguf file (a copy still in progress?)", job=spec.name)
    return gguf_fit(spec, meta, name, gpu_totals)


def _gguf_head(spec: JobSpec, meta: dict[str, Any], name: str) -> tuple[str, float, float, list[str]]:
    """What the line says of the model and its cache, the weights' and the cache's bytes on the
    GPUs, and the notes of what is not counted."""
    opts = _options(spec, LlamaServerOptions)
    args = list(spec.args)
    arch = str(meta.get("general.architecture"))
    k_kind, k_bytes, k_known = _cache_type(args, "--cache-type-k", "-ctk")
    v_kind, v_bytes, v_known = _cache_type(args, "--cache-type-v", "-ctv")
    kv = gguf_kv(meta, k_bytes, v_bytes)
    notes = list(kv.notes) + [f"cache type {t} not known here: 2 B assumed" for t, known in
                              ((k_kind, k_known), (v_kind, v_known)) if not known]
    if any(k.startswith(f"{arch}.ssm.") for k in meta):
        notes.append(f"the recurrent layers' state is not counted ({llama_server_state_pool(opts.slots).said})")
    tokens = opts.slots * opts.context
    layers = int(meta.get(f"{arch}.block_count") or 0)
    share, placed = _on_gpu(opts.gpu_layers, layers)
    weights = float(meta.get("tensor_bytes") or 0)
    head = (f"{name}: GGUF {arch}, weights {human_bytes(weights, binary=True)} (its tensors); KV "
            f"{kv.per_token / 1024:.1f} KiB per token ({kv.formula}, cache types K {k_kind} V {v_kind}) x "
            f"{opts.slots} slots x {opts.context:,} tokens = {human_bytes(kv.per_token * tokens, binary=True)}; "
            f"{placed}")
    return head, weights * share, kv.per_token * tokens * share, notes


def gguf_fit(spec: JobSpec, meta: dict[str, Any], name: str, totals: list[tuple[str, float]]) -> Check:
    """The model line from the GGUF's figures (``meta``, :func:`read_gguf`'s)."""
    head, weights, cache, notes = _gguf_head(spec, meta, name)
    if notes:
        head += "; " + "; ".join(notes)
    gpu_layers = _options(spec, LlamaServerOptions).gpu_layers
    auto = gpu_layers in (None, "auto")
    if gpu_layers == 0:
        return Check("model", OK, f"{head}: on the CPU, no GPU memory used", job=spec.name)
    gpus = _gpus_of(spec, len(totals), totals)
    if not gpus:
        return Check("model", WARN, f"{head}; the GPUs' memory is unknown here (no NVML): the fit is not checked",
                     "see the nvml line", job=spec.name)
    total = sum(gpus) * 2**20
    need = weights + cache
    detail = (f"{head}; {human_bytes(need, binary=True)} of the {human_bytes(total, binary=True)} of "
              f"{len(gpus)} GPU(s); rough: llama.cpp's compute buffers come out of the rest")
    fewer = "fewer slots or a shorter context, a smaller quantization, or --cache-type-k/-v q8_0 in args"
    if need > FIT_FAIL * total:
        if auto:
            return Check("model", WARN, detail + ": it does not fit whole: llama-server's auto keeps layers on "
                                                 "the CPU (slower)", fewer, job=spec.name)
        return Check("model", FAIL, detail + ": it does not fit", fewer + ", or fewer gpu_layers", job=spec.name)
    if need > FIT_WARN * total:
        return Check("model", WARN, detail + " (tight)", fewer, job=spec.name)
    return Check("model", OK, detail, job=spec.name)

