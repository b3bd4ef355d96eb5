"""The pilot of ``gpudeck plan extract``: the first ``--pilot-samples`` samples through the
extract worker itself (run.py, with the real model) into a temporary directory, for the
compression ratio of ``--compress`` (the hidden-state tensors' bytes in the shards against
their raw size) and, on a GPU, the speed and the start-up (the model's load to the first
durable shard, compiled as the job will be, with the job's start-up caches, which it leaves
warm). torch loads here, only when a pilot runs."""

from __future__ import annotations

import glob
import logging
import os
import tempfile
import time
from typing import Optional

log = logging.getLogger("gpudeck.plan")

CPU_PILOT_MAX_PARAMS = 1.0e9


def _device(args, shape: dict) -> tuple[Optional[str], str]:
    """(device for the pilot or None, why not)."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed here (pip install gpudeck[extract])"
    if args.device.startswith("cuda") and torch.cuda.is_available():
        return args.device, ""
    if not args.compress:
        return None, "no GPU here to measure the speed on"
    if shape["params"] > CPU_PILOT_MAX_PARAMS:
        return None, (f"no GPU here, and the model (~{shape['params'] / 1e9:.1f}B parameters) is too big for a "
                      f"pilot on the CPU")
    return "cpu", ""


def _write_pilot_data(args, path: str) -> int:
    """The first samples of the data (of ``--part``), as they are, into ``path``."""
    from ..common.parts import in_part
    from ..extract.data import input_files, iter_lines, record_id
    import json
    n = 0
    with open(path, "w") as f:
        for p, lineno, obj in iter_lines(input_files(args.data)):
            if not in_part(record_id(p, lineno, obj), args.part):
                continue
            obj.setdefault("id", record_id(p, lineno, obj))
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")
            n += 1
            if n >= args.pilot_samples:
                break
    return n


def _measure(out_dir: str) -> tuple[int, int, int]:
    """(tokens, raw bytes, stored bytes) of the hidden states in the closed shards."""
    from ..extract.layout import DTYPE_SIZES, read_header
    tokens = raw = stored = 0
    for path in glob.glob(os.path.join(out_dir, "shard-*.safetensors")):
        meta, table = read_header(path)
        for name, t in table.items():
            size = t["data_offsets"][1] - t["data_offsets"][0]
            if name.endswith(".hidden_states"):
                n, width = t["shape"]
                tokens += n
                raw += n * width * DTYPE_SIZES[t["dtype"]]
                stored += size
            elif name.endswith(".hidden_states.low"):
                planes, n_layers, n, per_layer = t["shape"]
                tokens += n
                raw += (planes + 1) * n_layers * n * per_layer
                stored += size
            elif name.endswith(".hidden_states.high_zstd"):
                stored += size
    return tokens, raw, stored


def pilot(args, shape: dict) -> Optional[dict]:
    """What the pilot measured: ratio (stored/raw bytes of the hidden states), tokens,
    tokens_per_s, device; or {"why": ...} when none could run."""
    device, why = _device(args, shape)
    if device is None:
        return {"why": why}
    from ..extract.model import load_model, parse_dtype
    from ..extract.options import ExtractOptions
    from ..extract.run import Extraction

    with tempfile.TemporaryDirectory(prefix="gpudeck-plan-") as tmp:
        data = os.path.join(tmp, "pilot.jsonl")
        if not _write_pilot_data(args, data):
            return {"why": "no samples for a pilot"}
        out = os.path.join(tmp, "out")
        log.info("pilot: %d samples through the extract worker on %s", args.pilot_samples, device)
        # compiled as the job will be (on by default on CUDA), with the job's start-up caches:
        # the pilot measures the start-up the job will see and leaves the caches warm for it
        opts = ExtractOptions(model=args.model, data=data, out=out, layers=args.layers,
                              shard_samples=max(1, args.pilot_samples // 8),
                              max_tokens_per_batch=args.max_tokens_per_batch, device=device, dtype=args.dtype,
                              chat_template=args.chat_template, max_seq_len=args.max_seq_len,
                              compile=args.compile if device.startswith("cuda") else False,
                              cache_dir=args.cache_dir, generic_forward=args.generic_forward,
                              compress=args.compress, disk_check="off",
                              audit=False, progress_file=os.path.join(tmp, "progress.json"))
        marks: list[tuple[float, int]] = []  # (when, tokens) of each durable shard
        t_load = time.monotonic()
        extraction = Extraction(opts, on_shard_closed=lambda path, entry: marks.append((time.monotonic(),
                                                                                       sum(entry["n_tokens"]))))
        if device.startswith("cuda"):
            extraction.cache_dirs = extraction.prepare_cache(device)  # before the load, as the worker does
        extraction.model = load_model(args.model, device, parse_dtype(args.dtype))
        t0 = time.monotonic()
        rc = extraction.run()
        elapsed = time.monotonic() - t0
        warm = bool(extraction.cache_dirs is not None and extraction.cache_dirs.warm)
        if rc != 0:
            return {"why": f"the pilot run failed (exit {rc}); see the log above"}
        tokens, raw, stored = _measure(out)
    if not tokens:
        return {"why": "the pilot wrote no hidden states"}
    # the run's pace once it runs: from the first durable shard to the last, so that the
    # start-up (the self-check, kernels' autotuning, the first batch) does not count against
    # days of extraction; with one shard only, the whole pilot
    steady = None
    if len(marks) >= 2 and marks[-1][0] > marks[0][0]:
        steady = sum(n for _, n in marks[1:]) / (marks[-1][0] - marks[0][0])
    whole = tokens / elapsed if elapsed > 0 else None
    return {"device": device, "tokens": tokens, "ratio": round(stored / raw, 4) if args.compress else None,
            "tokens_per_s": round(rate, 1) if (rate := steady or whole) else None,
            "tokens_per_s_with_startup": round(whole, 1) if whole else None,
            "first_shard_s": round(marks[0][0] - t0, 3) if marks else None,
            # the model's load to the first durable shard: the start-up, the interpreter's imports apart
            "startup_s": round(marks[0][0] - t_load, 2) if marks else None, "cache_warm": warm,
            "note": "the worker's pace from its first durable shard to its last, compiled as the job will be; "
                    "startup_s: the model's load to the first durable shard"}
