"""The extraction's on-disk vocabulary: file names, the shard format's name and codec name,
the value types' sizes, and the safetensors header reader every other module uses.

    OUT/shard-NNNNNN.safetensors     closed shards (common/shards.py SAFETENSORS names)
    OUT/.shard-NNNNNN.safetensors.tmp   a shard being written (deleted on restart)
    OUT/index.jsonl                  one line per closed shard
    OUT/done.txt                     the done-set
    OUT/extract.json                 the run's model, layers, width and dtype
"""

from __future__ import annotations

import json
import struct

from ..common.shards import SAFETENSORS as NAMES

FORMAT = "gpudeck-hidden-states/1"
CODEC_PLANES_ZSTD = "byteplanes-zstd/1"
SHARD_RE = NAMES.final_re
INDEX = "index.jsonl"
DONESET = "done.txt"
META = "extract.json"
DTYPE_SIZES = {"BF16": 2, "F16": 2, "F32": 4}  # bytes per value, by safetensors dtype name


class StoreError(RuntimeError):
    """The output directory is in a state the worker will not touch; the message says why."""


def read_header(path: str) -> tuple[dict, dict]:
    """(metadata, tensor table) of a safetensors file, reading only its header."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise StoreError(f"{path}: too short for a safetensors file")
        (n,) = struct.unpack("<Q", raw)
        if n > 1 << 30:
            raise StoreError(f"{path}: header length {n} is not plausible")
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {}) or {}
    return meta, header
