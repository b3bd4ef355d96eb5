"""What the stages of one extraction run share (:class:`RunContext`): the options, the
model's shape, the resumed output, the counters, the stop and failure signals, the time
spent per stage. One object per run, handed to every stage; no module state.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..common.progress import EXTRACT_QUALITY, quality_counters
from .options import EXIT_OK, ExtractOptions
from .store import Resumed, header_reserve_for


@dataclass
class Counters:
    lock: threading.Lock = field(default_factory=threading.Lock)
    computed_samples: int = 0
    computed_tokens: int = 0
    computed_flops: float = 0.0
    prepared_samples: int = 0
    prepared_tokens: int = 0
    reader_done: bool = False
    durable_samples: int = 0  # in closed shards, this run and before
    durable_tokens: int = 0
    durable_bytes: int = 0
    durable_raw_bytes: int = 0  # hidden states before compression (--compress), in shards closed this run
    durable_packed_bytes: int = 0  # the bytes of those shards
    shards_closed: int = 0
    quality: dict = field(default_factory=lambda: quality_counters(EXTRACT_QUALITY))
    skipped_done: int = 0


class Failure:
    """The first exception of any thread; every loop checks it and stops."""

    def __init__(self) -> None:
        self.exc: Optional[BaseException] = None
        self.stop = threading.Event()

    def set(self, exc: BaseException) -> None:
        if self.exc is None:
            self.exc = exc
        self.stop.set()

    def check(self) -> None:
        if self.exc is not None:
            raise self.exc

    def put(self, q: "queue.Queue", item) -> bool:
        """``q.put(item)``, waiting as long as no thread failed; False once one did."""
        while True:
            try:
                q.put(item, timeout=0.2)
                return True
            except queue.Full:
                if self.exc is not None:
                    return False

    def get(self, q: "queue.Queue"):
        """``q.get()``, raising the first failure of any thread while it waits."""
        while True:
            try:
                return q.get(timeout=0.2)
            except queue.Empty:
                self.check()


class StageClock:
    """Seconds spent per stage, summed over the threads of a stage: what a benchmark prints
    to see where the pipeline waits (bench/extract_gpu.py)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = {}

    def add(self, stage: str, seconds: float) -> None:
        with self._lock:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds

    def since(self, stage: str, t0: float) -> float:
        """Add the time since ``t0`` (a ``time.perf_counter()``); returns the time now."""
        now = time.perf_counter()
        self.add(stage, now - t0)
        return now


def sample_limit(context: Optional[int], opts: ExtractOptions) -> tuple[int, str]:
    """(the most tokens one sample may have, what sets it): the model's context, the batch
    budget (--max-tokens-per-batch), --max-seq-len, whichever is least."""
    limits = [(opts.max_tokens_per_batch, f"the batch budget (--max-tokens-per-batch {opts.max_tokens_per_batch})")]
    if context is not None:
        limits.append((context, f"the model's context ({context} positions)"))
    if opts.max_seq_len:
        limits.append((opts.max_seq_len, f"--max-seq-len {opts.max_seq_len}"))
    return min(limits, key=lambda x: x[0])


@dataclass
class RunContext:
    opts: ExtractOptions
    out_dir: str
    progress_path: str
    files: list[str]
    runner: Any  # model.HiddenStateRunner
    cfg: Any  # the model's text config
    layers: list[int]
    tokenizer: Any
    res: Resumed
    uploader: Any = None  # common.s3sync.ShardUploader, with --s3
    fence: Any = None  # common.fence.Fence: a newer attempt found there stops the run (EXIT_FENCED)
    on_shard_closed: Optional[Callable[[str, dict], None]] = None
    stages: StageClock = field(default_factory=StageClock)
    cnt: Counters = field(default_factory=Counters)
    fail: Failure = field(default_factory=Failure)
    stopping: threading.Event = field(default_factory=threading.Event)  # stop computing, close shards
    signalled: threading.Event = field(default_factory=threading.Event)  # SIGTERM/SIGINT came
    exit_code: int = EXIT_OK
    startup: Any = None  # startup.StartupClock: the start-up's phases and the first durable shard
    compile_cache: Any = None  # compile_cache.CacheDirs, or None (--cache-dir off, or nothing compiles)
    # the shape of the output, set from the runner
    width: int = field(init=False)
    itemsize: int = field(init=False)
    st_dtype: str = field(init=False)
    reserve: int = field(init=False)
    # the longest sample that goes to the model (context, batch budget, --max-seq-len) and why
    max_len: int = field(init=False)
    max_len_why: str = field(init=False)
    vocab: Optional[int] = field(init=False)

    def __post_init__(self) -> None:
        import torch

        from .model import context_length, vocab_rows

        self.width = self.runner.out_width
        self.itemsize = torch.empty(0, dtype=self.runner.dtype).element_size()
        self.st_dtype = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}[self.runner.dtype]
        self.reserve = header_reserve_for(self.opts.shard_samples)
        self.max_len, self.max_len_why = sample_limit(context_length(self.cfg), self.opts)
        self.vocab = vocab_rows(self.runner.model)

    @property
    def device(self) -> str:
        return self.opts.device

    @property
    def cuda(self) -> bool:
        return self.opts.device.startswith("cuda")

    @property
    def budget(self) -> int:
        return self.opts.max_tokens_per_batch

    @property
    def done(self):
        return self.res.done

    @property
    def n_writers(self) -> int:
        return max(1, self.opts.writers)
