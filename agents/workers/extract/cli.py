"""The ``extract`` command (``gpudeck extract``, ``python -m gpudeck.agents.workers.extract``)
and the command line of the fleet's ``extract`` job kind; the package docstring says what
it does."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional

from ...contract.jobs import JobKind, JobSpec, SpecError
from .options import EXIT_FAIL, EXIT_USAGE, ExtractOptions


def _size(text: str) -> int:
    """``2G``, ``512MiB``, ``1000000`` -> bytes (binary multiples)."""
    import re
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size like 2G, 512M or 1000000")
    return int(float(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2)])


def _part(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected I/N, like 0/4") from None
    if not (n >= 1 and 0 <= i < n):
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= I < N")
    return i, n


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model directory (transformers format)")
    p.add_argument("--data", required=True,
                   help="tokenized JSONL (input_ids, loss_mask) or chat JSONL, or a directory of the "
                        "generation worker's shard-*.jsonl")
    p.add_argument("--out", required=True, help="output directory (shards, index.jsonl, done.txt)")
    p.add_argument("--layers", required=True,
                   help="layers to keep, counted like output_hidden_states: 0 = embeddings, "
                        "L = output of decoder layer L (e.g. 1,7,14,21,27)")
    p.add_argument("--max-tokens-per-batch", type=int, default=32768,
                   help="token budget of one forward pass (batch size x padded length); default 32768")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    p.add_argument("--dtype", default="bfloat16", help="bfloat16 (default), float16 or float32")
    p.add_argument("--s3", help="s3://bucket/prefix: upload closed shards and the done-set; restore on a fresh node")
    p.add_argument("--s3-endpoint", help="S3-compatible endpoint URL")
    p.add_argument("--force", action="store_true", help="extract even when the data audit refuses the data")
    p.add_argument("--no-audit", dest="audit", action="store_false", help="skip the data audit")
    p.add_argument("--chat-template", help="a jinja chat template (file or text) instead of the tokenizer's")
    p.add_argument("--part", type=_part, help="I/N: take only the ids of part I of N (one job per GPU); "
                                              "output goes to OUT/part-I-of-N")
    p.add_argument("--shard-bytes", type=_size, default=2 << 30, help="close a shard at this size (default 2G)")
    p.add_argument("--shard-samples", type=int, default=1000, help="close a shard at this many samples (default 1000)")
    p.add_argument("--max-seq-len", type=int,
                   help="truncate longer samples (counted as 'truncated'); also caps the model's context and "
                        "--max-tokens-per-batch for one sample (without it, a longer sample is refused)")
    p.add_argument("--dedupe", choices=("first",), default=None,
                   help="records that repeat an earlier id: keep the first (default: refuse the input)")
    p.add_argument("--compile", dest="compile", action="store_true", default=None,
                   help="torch.compile the decoder layers (default: on for CUDA)")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="run the decoder layers uncompiled")
    p.add_argument("--generic-forward", dest="fast", action="store_false",
                   help="use the model's own forward (all layers) instead of the fast path")
    p.add_argument("--host-buffers", type=int, default=4, help="pinned host buffers in flight (default 4)")
    p.add_argument("--writers", type=int, default=8,
                   help="shards written and fsynced at once (default 8: on the H200 node 8 kept its disk busier "
                        "than 4 or 1)")
    p.add_argument("--compress", action="store_true",
                   help="store hidden states losslessly compressed (byte planes + zstd): about 0.67 of the "
                        "bytes; open_extract reads them back bit for bit, other safetensors readers do not")
    p.add_argument("--disk-check", choices=("exit", "warn", "off"), default="exit",
                   help="when the projected output does not fit the free disk: exit (default, status 3), warn, off")
    p.add_argument("--peak-tflops", type=float, help="the device's dense bf16 peak, for MFU, when not in the table")
    p.add_argument("--progress-file", help="where to write progress.json (default $GPUDECK_PROGRESS_FILE, else OUT)")
    p.add_argument("--throttle-ms", type=float, default=0.0, help=argparse.SUPPRESS)  # tests only


def options_from_args(args: argparse.Namespace) -> ExtractOptions:
    return ExtractOptions(model=args.model, data=args.data, out=args.out, layers=args.layers,
                          max_tokens_per_batch=args.max_tokens_per_batch, device=args.device, dtype=args.dtype,
                          s3=args.s3, s3_endpoint=args.s3_endpoint, force=args.force,
                          chat_template=args.chat_template, part=args.part, shard_bytes=args.shard_bytes,
                          shard_samples=args.shard_samples, max_seq_len=args.max_seq_len, compile=args.compile,
                          fast=args.fast, host_buffers=args.host_buffers, writers=args.writers,
                          compress=args.compress,
                          disk_check=args.disk_check,
                          peak_tflops=args.peak_tflops, progress_file=args.progress_file,
                          throttle_ms=args.throttle_ms, audit=args.audit, dedupe=args.dedupe)


def run_from_args(args: argparse.Namespace) -> int:
    """Run the worker; errors the operator can act on become one line on stderr."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s extract %(levelname)s %(message)s",
                        stream=sys.stderr)
    problem = missing_extras(args) or model_path_problem(args.model)
    if problem:
        print(f"extract: {problem}", file=sys.stderr)
        return EXIT_USAGE
    from ..common.dirlock import DirectoryBusy
    from .data import DataError
    from .layout import StoreError
    from .run import run_extraction

    try:
        from .model import ModelError
        return run_extraction(options_from_args(args))
    except (DataError, ModelError, StoreError, DirectoryBusy) as exc:
        print(f"extract: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, (DataError, ModelError)) else EXIT_FAIL
    except (RuntimeError, OSError) as exc:
        print(f"extract: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAIL


EXTRA_MODULES = ("torch", "numpy", "transformers", "safetensors")


def missing_extras(args: argparse.Namespace) -> Optional[str]:
    """What the worker needs that this python lacks, with the line that installs it."""
    import importlib.util

    wanted = EXTRA_MODULES + (("zstandard",) if getattr(args, "compress", False) else ())
    def absent(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is None
        except (ImportError, ValueError):
            return True

    missing = [m for m in wanted if absent(m)]
    if not missing:
        return None
    return (f"extraction needs {', '.join(missing)}, not installed for {sys.executable}: "
            f"pip install 'gpudeck[extract]' (torch's CUDA build; for a CPU build first: "
            f"pip install torch --index-url https://download.pytorch.org/whl/cpu)")


def model_path_problem(model: str) -> Optional[str]:
    """--model is a directory in transformers format: say so when it is not there."""
    import os

    path = os.path.expanduser(model)
    if os.path.isdir(path):
        return None if os.path.isfile(os.path.join(path, "config.json")) else \
            f"--model {model}: {os.path.abspath(path)} has no config.json (a transformers model directory)"
    what = "is a file, not a directory" if os.path.exists(path) else "does not exist"
    return f"--model {model}: {os.path.abspath(path)} {what} (expected a transformers model directory)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gpudeck.agents.workers.extract",
                                description="Extract hidden states of chosen layers into safetensors shards.")
    add_arguments(p)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    return run_from_args(build_parser().parse_args(argv))


def build_argv(spec: JobSpec, python: str) -> list[str]:
    """The command line of an ``extract`` job of the fleet file."""
    o = spec.options
    for key in ("data", "out", "layers"):
        if key not in o:
            raise SpecError(f"job {spec.name!r}: kind 'extract' needs {key!r}")
    if not spec.model:
        raise SpecError(f"job {spec.name!r}: kind 'extract' needs 'model'")
    layers = o["layers"]
    if isinstance(layers, (list, tuple)):
        if not all(isinstance(x, int) for x in layers):
            raise SpecError(f"job {spec.name!r}: 'layers' must be integers, like [1, 7, 14]")
        layers = ",".join(map(str, layers))
    argv = [python, "-m", JobKind.EXTRACT.worker_module, "--model", str(spec.model), "--data", str(o["data"]),
            "--out", str(o["out"]), "--layers", str(layers)]
    for key in ("max_tokens_per_batch", "device", "dtype", "s3", "s3_endpoint", "chat_template", "part", "writers"):
        if o.get(key) is not None:
            argv += [f"--{key.replace('_', '-')}", str(o[key])]
    for key in ("force", "compress"):
        if o.get(key):
            argv.append(f"--{key}")
    if spec.progress:
        argv += ["--progress-file", spec.progress]
    return argv + list(spec.args)
