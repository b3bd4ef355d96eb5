"""One extraction run, from options to exit status: the directory lock, the data audit,
the start-up caches (compile_cache.py), the model, the output's metadata, the resume (S3
first: a fresh node gets its done-set back before reconciling), the signals, then the
pipeline (pipeline.py). Each start-up phase is said in progress.json as it begins
(startup.py). Heavy imports (torch, transformers) happen here, in :meth:`Extraction.run`, only.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from typing import Callable, Optional

from ..common import success
from ..common.dirlock import DirLock
from ...contract.atomic import atomic_write_json
from ..common.audit_gate import AUDIT_SAMPLE, audit_verdict
from ..common.parts import part_name
from ..common.progress import progress_path
from .context import RunContext, StageClock
from .data import Encoder, input_files
from .layout import DONESET, FORMAT, META, NAMES, StoreError, read_header
from .options import EXIT_AUDIT, EXIT_OK, ExtractOptions
from .startup import StartupClock
from .store import reconcile

log = logging.getLogger("gpudeck.extract")


class Extraction:
    """The worker. ``model``/``tokenizer`` may be given (the benchmark builds its model in
    memory); ``on_shard_closed(path, index_entry)`` is called after each shard is durable.
    After :meth:`run`, :attr:`stage_seconds` says where the pipeline spent its time."""

    def __init__(self, opts: ExtractOptions, model=None, tokenizer=None,
                 on_shard_closed: Optional[Callable[[str, dict], None]] = None) -> None:
        self.opts, self.model, self.tokenizer, self.on_shard_closed = opts, model, tokenizer, on_shard_closed
        self.out_dir = opts.out
        if opts.part is not None:
            self.out_dir = os.path.join(opts.out, part_name(opts.part))
        self.stages = StageClock()
        self.startup = StartupClock()  # the process's start: the worker's own, or its caller's
        self.cache_dirs = None  # compile_cache.CacheDirs once the model's key is known
        self.fence = None  # common.fence.Fence, claimed by _resume

    @property
    def stage_seconds(self) -> dict[str, float]:
        """Seconds spent per stage in the run (summed over the writer threads)."""
        return dict(self.stages.seconds)

    def run(self) -> int:
        if self.opts.compress:
            from .codec import plane_codec
            plane_codec()  # a missing zstandard fails now, not after the model has loaded
        os.makedirs(self.out_dir, exist_ok=True)
        lock = DirLock(self.out_dir).acquire()  # the markers go with the fence's claim (_resume)
        try:
            return self._run_locked()
        finally:
            lock.release()

    def _run_locked(self) -> int:
        opts = self.opts
        from .model import parse_dtype

        progress = progress_path(opts.progress_file, self.out_dir)
        self.startup.progress_path = progress
        self.startup.enter("starting")
        files = input_files(opts.data)
        dtype = parse_dtype(opts.dtype)
        if opts.audit:
            verdict = run_audit(opts, files, self.out_dir)
            if verdict is not None and not opts.force:
                log.error("the data audit refuses %s: %s (run `gpudeck audit %s` for the report; --force to "
                          "extract anyway)", opts.data, verdict, files[0])
                atomic_write_json(progress, {"done": 0, "state": "refused", "error": verdict,
                                             "updated_at": time.time()}, fsync=False)
                return EXIT_AUDIT
            if verdict is not None:
                log.warning("the data looks degenerate, extracting anyway because of --force: %s", verdict)
        check_ids(opts, files, self.out_dir)
        # the fence first: its claim removes the last run's completion markers, so nothing after
        # (the model's load takes minutes, and writes the output's metadata) runs under a marker
        # that says the output is complete
        uploader, res = self._resume()
        try:
            runner, cfg, layers = self._load_model(dtype)
        except BaseException:
            if uploader is not None:
                uploader.stop()
            raise
        ctx = RunContext(opts=opts, out_dir=self.out_dir, progress_path=progress, files=files, runner=runner,
                         cfg=cfg, layers=layers, tokenizer=self.tokenizer, res=res, uploader=uploader,
                         on_shard_closed=self.on_shard_closed, stages=self.stages, startup=self.startup,
                         compile_cache=self.cache_dirs, fence=self.fence)
        old_handlers = _install_signals(ctx)
        try:
            return self._pipeline(ctx)
        finally:
            for sig, h in old_handlers.items():
                signal.signal(sig, h)

    def _pipeline(self, ctx: RunContext) -> int:
        from .pipeline import Pipeline

        codec = None
        if self.opts.compress:
            from .codec import plane_codec
            codec = plane_codec()
        encoder = Encoder(ctx.tokenizer, _read_template(self.opts.chat_template))
        code = Pipeline(ctx, encoder, codec).run()
        if code == EXIT_OK and not ctx.signalled.is_set():  # last, at a clean end: what a job `after` this waits for
            loc = None
            if self.opts.s3:
                from ..common.s3sync.remote import S3Location
                loc = S3Location.parse(self.opts.s3)
                if self.opts.part is not None:
                    loc = S3Location(loc.bucket, loc.key(part_name(self.opts.part)))
            success.write(self.out_dir, {"samples": ctx.cnt.durable_samples, "bytes": ctx.cnt.durable_bytes,
                                         "shards": len(ctx.res.index.entries)}, loc, self.opts.s3_endpoint)
        return code

    def _load_model(self, dtype):
        """The runner of the chosen layers, the model's config, the layers; writes or checks
        the output's metadata."""
        import torch

        from .model import HiddenStateRunner, load_model, parse_layers, text_config

        opts, device = self.opts, self.opts.device
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError("--device cuda, but torch sees no CUDA device (use --device cpu to run on the CPU)")
        given_model = self.model is not None
        use_compile = opts.compile if opts.compile is not None else device.startswith("cuda")
        builds_kernels = use_compile or device.startswith("cuda")  # torch.compile, or Triton kernels (hybrid)
        if builds_kernels and self.cache_dirs is None:
            self.cache_dirs = self.prepare_cache(device)
        if self.model is None:
            self.startup.enter("loading")
            log.info("loading %s on %s in %s", opts.model, device, opts.dtype)
            self.model = load_model(opts.model, device, dtype)
        self.startup.enter("compiling" if builds_kernels else "preparing")
        # a caller that hands over its model object names it freely: look for a tokenizer only in
        # a directory of that name, never on the Hub (an offline node lost ~46 s a run to retries)
        if self.tokenizer is None and opts.model and (not given_model or os.path.isdir(opts.model)):
            self.tokenizer = _load_tokenizer(opts.model)
        cfg = text_config(self.model)
        layers = parse_layers(opts.layers, cfg.num_hidden_layers)
        runner = HiddenStateRunner(self.model, layers, fast=not opts.generic_forward, compile=use_compile)
        log.info("forward path: %s%s", runner.path,
                 "" if runner.path.startswith("fast") else f" ({runner.why_not_fast})")
        st_dtype = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}[runner.dtype]
        meta = {"format": FORMAT, "model": opts.model,
                "model_type": getattr(cfg, "model_type", None), "layers": layers, "hidden_size": cfg.hidden_size,
                "width": runner.out_width, "dtype": st_dtype, "num_layers": cfg.num_hidden_layers}
        _check_or_write_meta(self.out_dir, meta)
        return runner, cfg, layers

    def prepare_cache(self, device: str):
        """The start-up caches of this model, dtype, torch, Triton and GPU (compile_cache.py),
        set up before the model loads (loading imports the kernel packages) and anything
        compiles; None with --cache-dir off or when the model's config cannot be read. A
        caller that loads the model itself calls it first (the plan's pilot)."""
        import torch

        from . import compile_cache

        config = self.model.config if self.model is not None else _read_config(self.opts.model)
        if config is None:
            log.warning("start-up cache: no config.json in %s; torch's own cache places", self.opts.model)
            return None
        gpu = cap = None
        if device.startswith("cuda"):
            dev = torch.device(device)
            gpu = torch.cuda.get_device_name(dev)
            cap = "{}.{}".format(*torch.cuda.get_device_capability(dev))
        key = compile_cache.key_for(config, self.opts.dtype, gpu or "cpu", cap)
        try:
            return compile_cache.use(self.opts.cache_dir, key)
        except OSError as exc:  # a full or read-only home: compile as if there were no cache
            log.warning("start-up cache: %s; torch's own cache places", exc)
            return None

    def _resume(self):
        """(uploader or None, reconcile's result); S3 first: a fresh node gets its done-set
        back before reconciling."""
        from ...contract.fencing import attempt_from_env
        from ..common.fence import Fence, FileStore

        uploader = None
        min_next = 0
        attempt_id, given = attempt_from_env()
        if self.opts.s3:  # the fence in S3, claimed before the restore (common/fence.py)
            uploader, min_next, self.fence = _s3_setup(self.opts, self.out_dir, attempt_id, given)
        else:
            self.fence = Fence(FileStore(self.out_dir), attempt_id, self.opts.fence_interval_s, given=given,
                               on_claim=lambda: success.clear(self.out_dir))
            self.fence.claim()
        res = reconcile(self.out_dir, min_next_shard=min_next)
        if res.removed_tmp or res.reindexed or res.readded:
            log.info("resume: removed %d temp shard(s), re-indexed %s, %d id(s) added to the done-set",
                     res.removed_tmp, res.reindexed or "none", res.readded)
        if uploader is not None:
            uploader.resume(e["shard"] for e in res.index.entries
                            if os.path.exists(os.path.join(self.out_dir, e["shard"])))
            uploader.start()
        return uploader, res


def run_extraction(opts: ExtractOptions, model=None, tokenizer=None,
                   on_shard_closed: Optional[Callable[[str, dict], None]] = None) -> int:
    """:class:`Extraction` ``(...).run()``: the exit status."""
    return Extraction(opts, model, tokenizer, on_shard_closed).run()


def _install_signals(ctx: RunContext) -> dict:
    """SIGTERM/SIGINT close the open shard and stop; returns the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum, frame):
        ctx.signalled.set()
        ctx.stopping.set()
        log.warning("signal %d: closing the open shard and stopping", signum)

    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return old


def _load_tokenizer(path: str):
    from transformers import AutoTokenizer
    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # no tokenizer files: fine for tokenized input
        log.info("no tokenizer loaded from %s (%s): only tokenized input can be read", path, exc)
        return None


def _read_config(model_dir: str) -> Optional[dict]:
    """The model's config.json as a dict (no transformers), or None."""
    try:
        with open(os.path.join(os.path.expanduser(model_dir), "config.json")) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _read_template(value: Optional[str]) -> Optional[str]:
    if value and os.path.exists(value):
        with open(value) as f:
            return f.read()
    return value


def _check_or_write_meta(out_dir: str, meta: dict) -> None:
    path = os.path.join(out_dir, META)
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        for key in ("layers", "width", "dtype", "hidden_size"):
            if old.get(key) != meta.get(key):
                raise StoreError(f"{out_dir} holds an extraction with {key}={old.get(key)!r}, this run has "
                                 f"{meta.get(key)!r}: choose another --out")
        return
    atomic_write_json(path, meta)


def _s3_setup(opts: ExtractOptions, out_dir: str, attempt_id: str, given: bool = True):
    """Claim the fence, restore the done-set from S3 on a fresh node; return (uploader, first
    free shard number, fence)."""
    from ..common.s3sync.remote import S3Location
    from ..common.s3sync.start import start_s3

    assert opts.s3 is not None, "called with --s3 only"
    loc = S3Location.parse(opts.s3)
    if opts.part is not None:
        loc = S3Location(loc.bucket, loc.key(part_name(opts.part)))
    s3 = start_s3(out_dir, loc, endpoint_url=opts.s3_endpoint, done_name=DONESET, names=NAMES,
                  ids_of_file=_ids_of_shard, attempt_id=attempt_id, fence_interval_s=opts.fence_interval_s,
                  given=given)
    return s3.uploader, s3.next_number, s3.fence


def _ids_of_shard(path: str) -> list[str]:
    meta, _ = read_header(path)
    return json.loads(meta["ids"])


def run_audit(opts: ExtractOptions, files: list[str], out_dir: str) -> Optional[str]:
    """The data audit (agents/workers/audit.py, ``training`` mode, through common/audit_gate.py)
    over a sample of the input spread across all its files: None when the data looks usable,
    else the audit's reasons in plain sentences. The verdict is cached in OUT/audit.json,
    keyed by the files' names, sizes and mtimes, so a relaunch does not read them again."""
    import hashlib

    from ..audit import audit_file, audit_records

    h = hashlib.blake2b(digest_size=16)
    for path in files:
        st = os.stat(path)
        h.update(f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())

    def audit():
        if len(files) == 1:
            return audit_file(files[0], mode="training", sample=AUDIT_SAMPLE)
        return audit_records(list(_spread_sample(files, AUDIT_SAMPLE)), mode="training", name=opts.data)

    return audit_verdict(out_dir, h.hexdigest(), audit, opts.data, log)


def check_ids(opts: ExtractOptions, files: list[str], out_dir: str) -> None:
    """Records that repeat an earlier record's id would be skipped as done: refuse the input
    (DataError, exit 2), or with --dedupe first say how many are dropped (the reader keeps
    the first of each id). The scan is cached in OUT/ids.json, keyed like the audit."""
    from ..common.idscan import cached_scan, duplicate_message, scan_ids
    from .data import DataError, parse_object_line, record_id

    def fallback(path: str, lineno: int, raw: bytes) -> Optional[str]:
        try:
            return record_id(path, lineno, parse_object_line(raw, path, lineno))
        except DataError:
            return None  # the reader stops on it, naming the file and line

    key = [[os.path.abspath(p), os.stat(p).st_size, os.stat(p).st_mtime_ns] for p in files]
    t0 = time.monotonic()
    scan = cached_scan(out_dir, key, lambda: scan_ids(files, fallback))
    log.info("ids of %s: %d record(s) repeat an earlier id (checked in %.2f s)", opts.data, scan.duplicates,
             time.monotonic() - t0)
    if not scan.duplicates:
        return
    if opts.dedupe != "first":
        raise DataError(duplicate_message(scan, opts.data))
    log.warning("--dedupe first: %d record(s) repeat an earlier id and are dropped (the first: %s)",
                scan.duplicates, scan.first)


def _spread_sample(files: list[str], n: int):
    """About ``n`` records read at evenly spaced offsets over all the files, in order."""
    sizes = [os.path.getsize(f) for f in files]
    total = sum(sizes) or 1
    for path, size in zip(files, sizes):
        k = max(1, round(n * size / total))
        with open(path, "rb") as f:
            step = size / k
            last = -1
            for i in range(k):
                pos = int(i * step)
                if pos <= last:
                    continue
                f.seek(pos)
                if pos:
                    f.readline()  # the rest of a line cut by the seek
                raw = f.readline()
                if not raw:
                    break
                last = f.tell()
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue  # the extraction itself stops on it, naming the file and line
                if isinstance(obj, dict):
                    yield obj
