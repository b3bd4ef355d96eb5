"""``gpudeck plan extract``: how big the hidden states of a dataset will be, whether they
fit the disk, what S3 will charge for them, how long the run takes, and, when it does not
fit, what would.

Bytes per token = layers kept x hidden size x dtype bytes (from the model's config.json;
no weights are loaded for this), plus the 5 bytes of its token id and loss mask, times the
compression ratio with ``--compress``: measured by a pilot through the extract worker
itself when a GPU is there or the model is small enough for the CPU, else the documented
0.67, said to be unmeasured. Tokens are counted after the chat template by the extract
worker's own reader (data.py), streaming, or given with ``--tokens``/``--samples``.

The time is the tokens at the worker's steady pace (the pilot's, from its first durable
shard to its last, or ``--tokens-per-s``), plus its start-up (the process's start to the
first durable shard: the model's load, the kernels' compile, the first batch) once for the
first start and once for each of ``--restarts``: a job restarted often, or run as many
short jobs, pays it each time.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import sys
import time
from typing import Any, Optional, Union

from ...contract.documents import PLAN_FILE, write_plan
from ..extract.cli import add_arguments as add_extract_arguments
from .dataset import fingerprint_or_why
from .numbers import number
from .units import UsageError

log = logging.getLogger("gpudeck.plan")

EXIT_GO, EXIT_FAIL, EXIT_USAGE, EXIT_NO_FIT = 0, 1, 2, 3

DOCUMENTED_RATIO = 0.67  # --compress on bf16 hidden states of real models (docs/workers.md, codec.py)
TOKEN_EXTRA_BYTES = 5  # its input id (int32) and loss mask (uint8), stored beside the states
DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "float32": 4, "fp32": 4}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_extract_arguments(p)
    p.add_argument("--tokens", type=int, help="the dataset's token count, instead of counting it")
    p.add_argument("--samples", type=int, help="with --tokens: the number of samples")
    p.add_argument("--tokens-per-s", type=number(0, above=True),
                   help="the worker's speed on one GPU, for the time projection without a GPU")
    p.add_argument("--gpus", type=int, default=1,
                   help="GPUs the run is split over (--part I/N each): the time divides over them (default 1)")
    p.add_argument("--price-per-hour", type=number(0), help="dollars per GPU-hour, for the run's cost")
    p.add_argument("--s3-price-per-gb-month", type=number(0), default=0.023,
                   help="dollars per GB-month (default 0.023)")
    p.add_argument("--pilot-samples", type=int, default=64, help="samples in the pilot run (default 64; 0: none)")
    p.add_argument("--restarts", type=int, default=0, metavar="N",
                   help="restarts to expect (the watcher's, Slurm's requeues, moves): each pays the start-up again "
                        "(default 0)")
    p.add_argument("--startup-s", type=number(0), metavar="SECONDS",
                   help="seconds from a process's start to its first durable shard, instead of the measured one "
                        "(OUT/progress.json's startup_s from an earlier run, else the pilot's)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (the same as OUT/plan.json)")


# ---------------------------------------------------------------- the model's shape, without weights

def model_shape(model_dir: str) -> dict:
    """num_layers, hidden_size and an estimate of the parameters, from config.json."""
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except OSError as exc:
        raise UsageError(f"--model {model_dir}: cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not valid JSON: {exc}") from None
    cfg = cfg.get("text_config") or cfg
    try:
        layers, hidden = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"])
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"{path}: needs num_hidden_layers and hidden_size") from None
    inter = int(cfg.get("intermediate_size") or 4 * hidden)
    vocab = int(cfg.get("vocab_size") or 0)
    return {"num_layers": layers, "hidden_size": hidden,
            "params": layers * (4 * hidden * hidden + 3 * hidden * inter) + 2 * vocab * hidden}


def parse_layers(spec: Union[str, list[int]], num_layers: int) -> list[int]:
    """Like the worker's (0 = embeddings ... L = the last layer), without importing torch; the
    flag's parser (agents/contract/kinds.py) gives a list already."""
    try:
        layers = list(spec) if isinstance(spec, list) else [int(x) for x in spec.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise UsageError(f"--layers {spec!r}: expected comma-separated integers like 1,7,14") from None
    if not layers or len(set(layers)) != len(layers):
        raise UsageError(f"--layers {spec!r}: give distinct layers")
    bad = [x for x in layers if not 0 <= x <= num_layers]
    if bad:
        raise UsageError(f"--layers {spec!r}: {bad} out of range 0..{num_layers} for this model")
    return layers


# ---------------------------------------------------------------- the projection

def project(*, layers_kept: int, num_layers: int, hidden_size: int, dtype_bytes: int, samples: int, tokens: int,
            free_bytes: int, ratio: Optional[float] = None, s3_price: float = 0.023,
            tokens_per_s: Optional[float] = None, startup_s: Optional[float] = None, restarts: int = 0,
            gpus: int = 1, price: Optional[float] = None) -> dict:
    """The output's size and what fits (pure). ``ratio``: the compression ratio with
    --compress, None without it. ``tokens_per_s`` is one GPU's: ``gpus`` of them share the
    tokens (each its --part, each paying its own start-up), so the time divides by them and
    the dollars, at ``price`` per GPU-hour, do not change with them. The wall time adds
    ``startup_s`` (a process's start to its first durable shard) for the first start and each
    of ``restarts``."""
    raw = layers_kept * hidden_size * dtype_bytes
    per_token = raw * (ratio or 1.0) + TOKEN_EXTRA_BYTES
    total = tokens * per_token
    fits = total <= free_bytes
    out: dict[str, Any] = {"layers_kept": layers_kept, "num_layers": num_layers, "hidden_size": hidden_size,
           "dtype_bytes": dtype_bytes, "samples": samples, "tokens": tokens, "bytes_per_token_raw": raw,
           "bytes_per_token": round(per_token, 2), "projected_bytes": int(total), "free_bytes": int(free_bytes),
           "fits": fits, "s3_price_per_gb_month": s3_price,
           "s3_cost_per_month": round(total / 1e9 * s3_price, 2),
           "gpus": gpus, "price_per_hour": price,
           "projected_wall_s": wall_time(tokens / gpus, tokens_per_s, startup_s, restarts),
           "projected_cost": round(tokens / tokens_per_s / 3600 * price, 2) if tokens_per_s and price is not None
           else None,
           "startup_s": startup_s, "restarts": restarts,
           "startup_total_s": round((1 + restarts) * startup_s, 1) if startup_s is not None else None, "levers": []}
    if not fits:
        out["levers"] = levers(out, ratio)
    return out


def wall_time(tokens: float, tokens_per_s: Optional[float], startup_s: Optional[float] = None,
              restarts: int = 0) -> Optional[float]:
    """The run's wall time: the tokens at the steady pace, and the start-up once per start."""
    if not tokens_per_s:
        return None
    return round(tokens / tokens_per_s + (1 + restarts) * (startup_s or 0.0), 1)


def levers(p: dict, ratio: Optional[float]) -> list[str]:
    """What would make the output fit, each in a sentence."""
    from ...contract.units import human_bytes
    free, tokens, total = p["free_bytes"], max(1, p["tokens"]), p["projected_bytes"]
    per_layer = p["hidden_size"] * p["dtype_bytes"] * (ratio or 1.0)
    k = int((free / tokens - TOKEN_EXTRA_BYTES) // per_layer) if free / tokens > TOKEN_EXTRA_BYTES else 0
    out = []
    if k >= 1:
        out.append(f"fewer layers: at most {k} of the {p['layers_kept']} asked for fit")
    else:
        out.append("fewer layers: not even one layer of every sample fits")
    if ratio is None:
        with_c = tokens * (p["bytes_per_token_raw"] * DOCUMENTED_RATIO + TOKEN_EXTRA_BYTES)
        out.append(f"--compress: about {human_bytes(with_c)} (x{DOCUMENTED_RATIO}), "
                   + ("which fits" if with_c <= free else "still too big alone"))
    n_fit = int(p["samples"] * free / total) if total else p["samples"]
    out.append(f"fewer samples: about {n_fit:,} of the {p['samples']:,} fit")
    out.append(f"or split the data over {math.ceil(total / max(1, free))} nodes like this one (--part I/N)")
    return out


# ---------------------------------------------------------------- the command

def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=os.environ.get("GPUDECK_LOG_LEVEL", "WARNING" if args.json else "INFO"),
                        stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        plan = make_plan(args)
    except UsageError as exc:
        print(f"gpudeck plan extract: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"gpudeck plan extract: {exc}", file=sys.stderr)
        return EXIT_FAIL
    try:
        write_plan(os.path.join(args.out, PLAN_FILE), plan)
    except OSError as exc:
        log.error("cannot write %s: %s", os.path.join(args.out, PLAN_FILE), exc.strerror or exc)
    from .render import render_extract
    print(json.dumps(plan, indent=1) if args.json else render_extract(plan))
    return EXIT_GO if plan["verdict"] == "go" else EXIT_NO_FIT


def make_plan(args: argparse.Namespace) -> dict:
    dtype_bytes = DTYPE_BYTES.get(args.dtype)
    if dtype_bytes is None:
        raise UsageError(f"--dtype {args.dtype!r}: expected one of {', '.join(DTYPE_BYTES)}")
    if args.tokens is not None and (args.tokens < 1 or (args.samples is not None and args.samples < 1)):
        raise UsageError("--tokens and --samples must be at least 1")
    if args.gpus < 1:
        raise UsageError(f"--gpus {args.gpus}: give at least 1")
    shape = model_shape(args.model)
    layers = parse_layers(args.layers, shape["num_layers"])
    os.makedirs(args.out, exist_ok=True)
    if args.tokens is not None:  # arithmetic alone: the data is not read, torch and numpy are not imported
        samples, tokens, pil = (args.samples or 1), args.tokens, None
    else:
        samples, tokens, pil = read_data(args, shape)
    compression = None
    if args.compress:
        compression = ({"ratio": pil["ratio"], "measured": True, "pilot_tokens": pil["tokens"]}
                       if pil and pil.get("ratio") else
                       {"ratio": DOCUMENTED_RATIO, "measured": False, "pilot_tokens": 0,
                        "why": (pil or {}).get("why", "no pilot")})
    if args.restarts < 0:
        raise UsageError("--restarts must be 0 or more")
    tps, source = _speed(args, pil)
    startup, startup_source = startup_seconds(args, pil)
    plan = project(layers_kept=len(layers), num_layers=shape["num_layers"], hidden_size=shape["hidden_size"],
                   dtype_bytes=dtype_bytes, samples=samples, tokens=tokens,
                   free_bytes=shutil.disk_usage(args.out).free, ratio=compression["ratio"] if compression else None,
                   s3_price=args.s3_price_per_gb_month, tokens_per_s=tps, startup_s=startup, restarts=args.restarts,
                   gpus=args.gpus, price=args.price_per_hour)
    plan.update(kind="extract", dataset=fingerprint_or_why(args.data, args.part), layers=layers,
                compression=compression, tokens_given=args.tokens is not None, disk_path=os.path.abspath(args.out),
                time={"tokens_per_s": tps, "source": source, "startup_s": startup, "startup_source": startup_source,
                      "restarts": args.restarts},
                pilot=pil, written_at=time.time())
    plan["verdict"] = "go" if plan["fits"] else "no-go"
    from ...contract.units import human_bytes
    plan["reasons"] = [] if plan["fits"] else [
        f"the output ({human_bytes(plan['projected_bytes'])}) does not fit the "
        f"{human_bytes(plan['free_bytes'])} free on {plan['disk_path']}"]
    return plan


def _speed(args, pil: Optional[dict]) -> tuple[Optional[float], str]:
    if pil and pil.get("device", "").startswith("cuda") and pil.get("tokens_per_s"):
        return pil["tokens_per_s"], f"measured on a pilot of {pil['tokens']} tokens on {pil['device']}"
    if args.tokens_per_s:
        return args.tokens_per_s, "--tokens-per-s"
    return None, "no GPU here for a pilot; give --tokens-per-s (docs/workers.md has the H200's figures)"


def startup_seconds(args, pil: Optional[dict]) -> tuple[Optional[float], str]:
    """(seconds from a process's start to its first durable shard, where the figure comes
    from): --startup-s, else what the worker measured in an earlier run of this output (its
    progress.json's ``startup_s``: the node, the model and its caches as they are), else the
    pilot's, else None."""
    if args.startup_s is not None:
        return float(args.startup_s), "--startup-s"
    from ...contract.documents import read_progress
    from ..common.progress import progress_path

    out_dir = args.out if args.part is None else os.path.join(args.out, _part_name(args.part))
    path = progress_path(args.progress_file, out_dir)
    try:
        doc = read_progress(path)
    except (OSError, ValueError):
        doc = None
    if doc is not None and doc.startup_s is not None and doc.startup_s >= 0:
        return doc.startup_s, f"measured by the worker's last start ({path})"
    if pil and pil.get("startup_s") is not None:
        return pil["startup_s"], ("measured by the pilot (model load to first durable shard, "
                                  f"{'warm' if pil.get('cache_warm') else 'cold'} start-up cache)")
    return None, "not counted: no measurement (give --startup-s, or run the pilot on the GPU)"


def _part_name(part) -> str:
    from ..common.parts import part_name
    return part_name(part)


def read_data(args, shape: dict) -> tuple[int, int, Optional[dict]]:
    """(samples, tokens, pilot) from the data itself; a line the worker's reader refuses is a
    UsageError naming the file and line."""
    from ..extract.data import DataError
    from .extract_pilot import pilot

    try:
        samples, tokens = count_tokens(args)
        return samples, tokens, pilot(args, shape) if args.pilot_samples > 0 else None
    except DataError as exc:
        raise UsageError(str(exc)) from None


def count_tokens(args) -> tuple[int, int]:
    """(samples, tokens) of the data as the worker will see it: after the chat template,
    ``--part`` and ``--max-seq-len``; streamed, a DataError names the file and line."""
    from ..common.parts import in_part
    from ..extract.data import DataError, Encoder, input_files, iter_lines, record_id
    from ..extract.run import _load_tokenizer, _read_template

    files = input_files(args.data)
    encoder = None
    samples = tokens = 0
    for path, lineno, obj in iter_lines(files):
        if not in_part(record_id(path, lineno, obj), args.part):
            continue
        if "input_ids" in obj:
            n = len(obj["input_ids"]) if isinstance(obj["input_ids"], list) else 0
            if not n:
                raise DataError(f"{path}:{lineno}: 'input_ids' must be a non-empty list of integers")
        else:
            if encoder is None:
                encoder = Encoder(_load_tokenizer(args.model), _read_template(args.chat_template))
            n = encoder.encode(path, lineno, obj).n
        samples += 1
        tokens += min(n, args.max_seq_len) if args.max_seq_len else n
    if not samples:
        raise UsageError(f"--data {args.data}: no samples" + (f" in part {args.part[0]}/{args.part[1]}"
                                                              if args.part else ""))
    return samples, tokens
