"""The extraction's options and exit codes (no numpy, no torch: the command line and the
agent import them cheaply)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_DISK, EXIT_AUDIT, EXIT_STOPPED = 0, 1, 2, 3, 4, 143


@dataclass
class ExtractOptions:
    model: str
    data: str
    out: str
    layers: Any  # "1,7,14" or a list
    max_tokens_per_batch: int = 32768
    device: str = "cuda"
    dtype: str = "bfloat16"
    s3: Optional[str] = None
    s3_endpoint: Optional[str] = None
    force: bool = False
    chat_template: Optional[str] = None  # a file holding a jinja template, or the template itself
    part: Optional[tuple[int, int]] = None
    shard_bytes: int = 2 << 30
    shard_samples: int = 1000
    max_seq_len: Optional[int] = None
    compile: Optional[bool] = None  # None: on for CUDA, off for CPU
    fast: bool = True
    host_buffers: int = 4
    writers: int = 8  # shards written (and fsynced) at once
    compress: bool = False  # byte planes + zstd (codec.PlaneCodec): lossless, ~0.67 of the bytes
    disk_check: str = "exit"  # exit | warn | off
    peak_tflops: Optional[float] = None
    progress_file: Optional[str] = None
    progress_interval_s: float = 2.0
    throttle_ms: float = 0.0  # tests only: sleep after each batch, so a kill lands mid-run
    audit: bool = True
    dedupe: Optional[str] = None  # None: refuse input with duplicate ids; "first": keep the first of each
