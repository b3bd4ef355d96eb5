"""The fits of the model line: weights, KV cache and recurrent states against the GPUs' memory."""

from __future__ import annotations

from typing import Any, Optional

from ...contract.jobs import JobSpec
from ...contract.kinds import ExtractOptions
from ...contract.ops import Check
from ...contract.units import human_bytes
from .base import FAIL, OK, WARN, Thresholds, _arg, _options
from .sizing import (_DTYPE_BYTES, kv_bytes_per_token, recurrent_state, sglang_ssm_dtype,
                     sglang_state_pool)


def _gpus_of(spec: JobSpec, count: int, totals: list[tuple[str, float]]) -> list[float]:
    """The total MiB of the GPUs the job will use: its ``gpus``, else the first ``count``."""
    idx = list(spec.gpus) or list(range(count))
    return [totals[i][1] for i in idx if i < len(totals)]


def _extract_fit(spec: JobSpec, path: str, weights: int, source: str, file_b: int, quantized: bool,
                 totals: list[tuple[str, float]], assumed: list[str]) -> Check:
    opts = _options(spec, ExtractOptions)
    want = opts.dtype
    mem = weights if quantized or want not in _DTYPE_BYTES else weights // file_b * _DTYPE_BYTES[want]
    head = f"{path}: weights {human_bytes(mem, binary=True)} in {want} (from {source}"
    head += (", quantized: as stored" if quantized else "") + ")"
    if "; ".join(assumed):
        head += "; " + "; ".join(assumed)
    if not str(opts.device).startswith("cuda"):
        return Check("model", OK, f"{head}; device {opts.device}: no GPU memory used", job=spec.name)
    gpus = _gpus_of(spec, 1, totals)
    if not gpus:
        return Check("model", WARN, f"{head}; the GPUs' memory is unknown here (no NVML): the fit is not checked",
                     "see the nvml line", job=spec.name)
    total = min(gpus) * 2**20
    rest = total - mem
    detail = f"{head}; one GPU of {human_bytes(total, binary=True)}: " \
             f"{human_bytes(max(rest, 0), binary=True)} left for batches of {opts.max_tokens_per_batch} tokens"
    if mem > 0.95 * total:
        return Check("model", FAIL, detail + " (the weights alone do not fit)",
                     "a GPU with more memory, or dtype = \"float16\"/\"bfloat16\" if it is float32", job=spec.name)
    if mem > 0.85 * total:
        return Check("model", WARN, detail + " (tight: a batch's hidden states may not fit)",
                     "lower max_tokens_per_batch", job=spec.name)
    return Check("model", OK, detail, job=spec.name)


def _sglang_fit(spec: JobSpec, path: str, cfg: dict[str, Any], weights: int, source: str, model_b: int,
                totals: list[tuple[str, float]], assumed: list[str], th: Thresholds) -> Check:
    args = list(spec.args)
    tp = spec.tp or int(_arg(args, "--tp-size", "--tp") or 1)
    dp = spec.dp or int(_arg(args, "--dp-size", "--dp") or 1)
    frac_arg = _arg(args, "--mem-fraction-static")
    frac = float(frac_arg) if frac_arg else th.mem_fraction
    if not frac_arg:
        assumed.append(f"memory fraction {frac:g} assumed (SGLang picks its own by GPU size)")
    kv_arg = _arg(args, "--kv-cache-dtype") or "auto"
    kv_b = 1 if kv_arg.startswith("fp8") else (2 if "quantization_config" in cfg else model_b)
    per_token, formula = kv_bytes_per_token(cfg, kv_b)
    ctx = int(_arg(args, "--context-length") or cfg.get("max_position_embeddings") or 0)
    shards = 1 if cfg.get("kv_lora_rank") else max(1, min(tp, int(cfg.get("num_key_value_heads")
                                                                   or cfg.get("num_attention_heads") or 1)))
    per_gpu_token = per_token / shards
    head = (f"{path}: weights {human_bytes(weights, binary=True)} (from {source}), tp {tp}, dp {dp}; "
            f"KV {per_token / 1024:.0f} KiB per token ({formula}, kv dtype {kv_arg})")
    per_state, said = _sglang_state(spec, args, cfg, model_b, tp)
    head += said
    if assumed:
        head += "; " + "; ".join(assumed)
    gpus = _gpus_of(spec, tp * dp, totals)
    if not totals:
        return Check("model", WARN, f"{head}; the GPUs' memory is unknown here (no NVML): the fit is not checked",
                     "see the nvml line", job=spec.name)
    if len(gpus) < tp * dp:
        return Check("model", FAIL, f"{head}; tp x dp = {tp * dp} GPUs, the node has {len(gpus)} for it",
                     "lower tp or dp, or list the job's gpus", job=spec.name)
    budget = min(gpus) * 2**20 * frac
    per_gpu = weights / tp
    room = budget - per_gpu
    detail = (f"{head}; per GPU: {human_bytes(per_gpu, binary=True)} of weights in "
              f"{human_bytes(budget, binary=True)} ({frac:g} of {human_bytes(min(gpus) * 2**20, binary=True)})")
    if room <= 0:
        return Check("model", FAIL, detail + ": the weights do not fit",
                     "raise tp (more GPUs per replica), or a quantized model", job=spec.name)
    kv_room = room
    less = "raise --mem-fraction-static or tp, or lower --context-length"
    if per_state:
        kv_room, detail, refused = _sglang_states(spec, args, room, per_state, detail)
        if refused:
            return refused
        less += ", or give the states less (--mamba-full-memory-ratio, --max-mamba-cache-size)"
    tokens = int(kv_room / per_gpu_token) if per_gpu_token else 0
    detail += f", {human_bytes(kv_room, binary=True)} left for the KV cache: about {tokens:,} tokens"
    if ctx:
        detail += f" ({tokens / ctx:.1f} contexts of {ctx:,})"
    detail += "; rough: activations and CUDA graphs come out of the rest"
    if ctx and tokens < ctx:
        return Check("model", WARN, detail + ": less than one full context", less, job=spec.name)
    return Check("model", OK, detail, job=spec.name)



def _sglang_state(spec: JobSpec, args: list[str], cfg: dict[str, Any], model_b: int,
                  tp: int) -> tuple[float, str]:
    """The share on each GPU of a hybrid's recurrent state per request as SGLang holds it, and
    what the line says of it (0 and empty for a model without one)."""
    ssm_dtype, ssm_said = sglang_ssm_dtype(args, spec.env, cfg)
    state = recurrent_state(cfg, _DTYPE_BYTES[ssm_dtype], model_b)
    per_state = state.per_request / tp if state else 0.0  # the linear layers' heads split over the tp GPUs
    said = ""
    if state and state.per_request:
        said += f"; recurrent state {human_bytes(state.per_request, binary=True)} per request ({state.formula})"
        if tp > 1:
            said += f", {human_bytes(per_state, binary=True)} on each of tp {tp} GPUs"
        said += f", SSM in {ssm_dtype} ({ssm_said}), conv in the model's dtype"
    if state and state.uncounted:
        said += f"; {state.uncounted}"
    return per_state, said


def _sglang_states(spec: JobSpec, args: list[str], room: float, per_state: float,
                   detail: str) -> tuple[float, str, Optional[Check]]:
    """SGLang's state pool out of what the weights leave (``room``): the room left for the KV
    cache, the line so far with the pool said, and the failed line when the states leave none."""
    pool = sglang_state_pool(args, room, per_state)
    held = pool.states * per_state
    kv_room = room - held
    detail += (f", {human_bytes(room, binary=True)} left: {pool.said}; their states take "
               f"{human_bytes(held, binary=True)}")
    fewer = "lower --max-mamba-cache-size or --max-running-requests, halve the SSM state with " \
            "--mamba-ssm-dtype bfloat16, or raise tp"
    if kv_room <= 0:
        return kv_room, detail, Check("model", FAIL, detail + ": the recurrent states do not fit", fewer,
                                      job=spec.name)
    if pool.running < 1:
        return kv_room, detail, Check("model", FAIL, detail + ": no request can run: SGLang refuses to start",
                                      "raise --max-mamba-cache-size or --mem-fraction-static, or halve the SSM "
                                      "state with --mamba-ssm-dtype bfloat16", job=spec.name)
    return kv_room, detail, None
