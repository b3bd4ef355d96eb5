"""The extraction pipeline: four threads with bounded queues between them.

    reader      streams the input, skips done ids, tokenizes, packs batches by length
       | batches (bounded)
    main        host->device, forward (no LM head), gathers the real tokens of the chosen
                layers, copies them to a pinned host buffer on a side stream (non_blocking)
                and records a CUDA event
       | write jobs (bounded by the pool of pinned buffers)
    writer      waits on the event, streams each sample into the open shard's temp file,
                gives the buffer back
       | closed shards
    finalizer   fsync, rename, index line, done-set, S3 upload

The GPU never waits for the disk unless every pinned buffer is queued; the disk never
waits for the GPU unless the queue is empty. Heavy imports (torch, transformers) happen in
:func:`run_extraction` only.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from gpudeck.agents.workers.atomic import DirLock, atomic_write_json
from gpudeck.agents.workers.extract_data import (Batch, Batcher, Encoder, Prepared, count_records, in_part, input_files,
                                         parse_object_line, record_id)
from gpudeck.agents.workers.extract_perf import FlopModel, RollingRate, disk_projection, human_bytes, peak_flops
from gpudeck.agents.workers.extract_store import (META, ShardWriter, StoreError, header_reserve_for, publish_many,
                                          reconcile, seal)

log = logging.getLogger("gpudeck.extract")

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_DISK, EXIT_AUDIT, EXIT_STOPPED = 0, 1, 2, 3, 4, 143
_ID_PEEK = re.compile(rb'^\s*\{\s*"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)\s*[,}]')


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
    compress: bool = False  # byte planes + zstd (extract_store.PlaneCodec): lossless, ~0.67 of the bytes
    disk_check: str = "exit"  # exit | warn | off
    peak_tflops: Optional[float] = None
    progress_file: Optional[str] = None
    progress_interval_s: float = 2.0
    throttle_ms: float = 0.0  # tests only: sleep after each batch, so a kill lands mid-run
    audit: bool = True


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
    quality: dict = field(default_factory=lambda: {"no_target": 0, "short_target": 0, "truncated": 0,
                                                    "duplicate_id": 0, "errors": 0})
    skipped_done: int = 0


class _Failure:
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


def _put(q: "queue.Queue", item, fail: _Failure) -> bool:
    while True:
        try:
            q.put(item, timeout=0.2)
            return True
        except queue.Full:
            if fail.exc is not None:
                return False


def _get(q: "queue.Queue", fail: _Failure):
    while True:
        try:
            return q.get(timeout=0.2)
        except queue.Empty:
            fail.check()


@dataclass
class WriteJob:
    samples: list[Prepared]
    offsets: list[int]
    host: Any  # torch tensor [>=T, W] on the host (pinned on CUDA)
    host_u8: np.ndarray  # the same memory as uint8 [>=T, W * itemsize]
    event: Any  # torch.cuda.Event or None
    pooled: bool
    tokens: int = 0  # T: the batch's real tokens
    planes: bool = False  # host_u8 holds byte planes (see to_planes), not rows


def to_planes(torch, flat, samples, offsets, n_layers: int):
    """The byte planes of a batch's hidden states ``flat`` [T, L*H], for ``--compress``:
    uint8 ``[itemsize, T*L*H]`` where plane p holds byte p of every value (little-endian: the
    last plane is the most significant byte), each sample's stretch ``[off*W, (off+n)*W)``
    laid out ``[L, n, H]``. One permuting copy per sample, on the device that holds ``flat``."""
    t, w = flat.shape
    itemsize = flat.element_size()
    hidden = w // n_layers
    u8 = flat.view(torch.uint8).view(t, n_layers, hidden, itemsize)
    planes = torch.empty(itemsize, t * w, dtype=torch.uint8, device=flat.device)
    for smp, off in zip(samples, offsets):
        n = smp.n
        planes[:, off * w:(off + n) * w].view(itemsize, n_layers, n, hidden).copy_(
            u8[off:off + n].permute(3, 1, 0, 2))
    return planes


def _prepare_progress_path(opts: ExtractOptions, out_dir: str) -> str:
    return opts.progress_file or os.environ.get("GPUDECK_PROGRESS_FILE") or os.path.join(out_dir, "progress.json")


def run_extraction(opts: ExtractOptions, model=None, tokenizer=None,
                   on_shard_closed: Optional[Callable[[str, dict], None]] = None) -> int:
    """The worker. ``model``/``tokenizer`` may be given (the benchmark builds its model in
    memory); ``on_shard_closed(path, index_entry)`` is called after each shard is durable."""
    out_dir = opts.out
    if opts.part is not None:
        out_dir = os.path.join(opts.out, f"part-{opts.part[0]}-of-{opts.part[1]}")
    if opts.compress:
        from gpudeck.agents.workers.extract_store import plane_codec
        plane_codec()  # a missing zstandard fails now, not after the model has loaded
    os.makedirs(out_dir, exist_ok=True)
    lock = DirLock(out_dir).acquire()
    try:
        return _run_locked(opts, out_dir, model, tokenizer, on_shard_closed)
    finally:
        lock.release()


def _run_locked(opts: ExtractOptions, out_dir: str, model, tokenizer,
                on_shard_closed: Optional[Callable[[str, dict], None]]) -> int:
    import torch

    from gpudeck.agents.workers.extract_model import HiddenStateRunner, load_model, parse_dtype, parse_layers, text_config

    progress_path = _prepare_progress_path(opts, out_dir)
    files = input_files(opts.data)
    dtype = parse_dtype(opts.dtype)

    if opts.audit:
        verdict = run_audit(opts, files, out_dir)
        if verdict is not None and not opts.force:
            log.error("the data audit refuses %s: %s (run `gpudeck audit %s` for the report; --force to extract "
                      "anyway)", opts.data, verdict, files[0])
            atomic_write_json(progress_path, {"done": 0, "state": "refused", "error": verdict,
                                              "updated_at": time.time()}, fsync=False)
            return EXIT_AUDIT
        if verdict is not None:
            log.warning("the data looks degenerate, extracting anyway because of --force: %s", verdict)

    device = opts.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("--device cuda, but torch sees no CUDA device (use --device cpu to run on the CPU)")
    given_model = model is not None
    if model is None:
        log.info("loading %s on %s in %s", opts.model, device, opts.dtype)
        model = load_model(opts.model, device, dtype)
    # a caller that hands over its model object names it freely: look for a tokenizer only in
    # a directory of that name, never on the Hub (an offline node lost ~46 s a run to retries)
    if tokenizer is None and opts.model and (not given_model or os.path.isdir(opts.model)):
        tokenizer = _load_tokenizer(opts.model)
    cfg = text_config(model)
    layers = parse_layers(opts.layers, cfg.num_hidden_layers)
    use_compile = opts.compile if opts.compile is not None else device.startswith("cuda")
    runner = HiddenStateRunner(model, layers, fast=opts.fast, compile=use_compile)
    log.info("forward path: %s%s", runner.path, "" if runner.path.startswith("fast") else f" ({runner.why_not_fast})")
    width = runner.out_width
    st_dtype = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}[runner.dtype]
    meta = {"format": "gpudeck-hidden-states/1", "model": opts.model, "model_type": getattr(cfg, "model_type", None),
            "layers": layers, "hidden_size": cfg.hidden_size, "width": width, "dtype": st_dtype,
            "num_layers": cfg.num_hidden_layers}
    _check_or_write_meta(out_dir, meta)

    # ---- resume (S3 first: a fresh node gets its done-set back before reconciling)
    uploader = None
    min_next = 0
    if opts.s3:
        uploader, min_next = _s3_setup(opts, out_dir)
    res = reconcile(out_dir, min_next_shard=min_next)
    if res.removed_tmp or res.reindexed or res.readded:
        log.info("resume: removed %d temp shard(s), re-indexed %s, %d id(s) added to the done-set",
                 res.removed_tmp, res.reindexed or "none", res.readded)
    if uploader is not None:
        uploader.resume(e["shard"] for e in res.index.entries if os.path.exists(os.path.join(out_dir, e["shard"])))
        uploader.start()
    fail = _Failure()
    stopping = threading.Event()
    _SIGNALLED.clear()
    old_handlers = _install_signals(stopping)
    try:
        return _pipeline(opts, out_dir, progress_path, files, runner, cfg, layers, model, tokenizer, device, res,
                         uploader, on_shard_closed, fail, stopping)
    finally:
        for sig, h in old_handlers.items():
            signal.signal(sig, h)


def _pipeline(opts, out_dir, progress_path, files, runner, cfg, layers, model, tokenizer, device, res, uploader,
              on_shard_closed, fail, stopping) -> int:
    import torch

    width = runner.out_width
    itemsize = torch.empty(0, dtype=runner.dtype).element_size()
    st_dtype = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}[runner.dtype]
    done = res.done
    cnt = Counters()
    cnt.durable_samples = len(done)
    cnt.durable_tokens = sum(sum(e["n_tokens"]) for e in res.index.entries)
    cnt.durable_bytes = sum(int(e.get("bytes", 0)) for e in res.index.entries)
    done_at_start = len(done)

    # ---- total, counted in the background
    total_box: dict = {}

    def count_total():
        try:
            n = count_records(files)
            total_box["total"] = n if opts.part is None else round(n / opts.part[1])
        except OSError as exc:
            log.warning("cannot count the input records: %s", exc)
    threading.Thread(target=count_total, name="count", daemon=True).start()

    # ---- reader
    budget = opts.max_tokens_per_batch
    batches: "queue.Queue[Optional[Batch]]" = queue.Queue(maxsize=4)
    encoder = Encoder(tokenizer, _read_template(opts.chat_template))
    scheduled: set[str] = set()

    def reader():
        try:
            batcher = Batcher(budget)
            for path in files:
                with open(path, "rb") as f:
                    for lineno, raw in enumerate(f, 1):
                        if stopping.is_set() or fail.stop.is_set():
                            return
                        if not raw.strip():
                            continue
                        m = _ID_PEEK.match(raw)
                        if m is not None and done.ids:  # skip done records without parsing them
                            tok = m.group(1)
                            rid = json.loads(tok) if tok.startswith(b'"') else tok.decode()
                            if isinstance(rid, str) and in_part(rid, opts.part) and rid in done:
                                cnt.skipped_done += 1
                                continue
                        obj = parse_object_line(raw, path, lineno)
                        rid = record_id(path, lineno, obj)
                        if not in_part(rid, opts.part):
                            continue
                        if rid in done:
                            cnt.skipped_done += 1
                            continue
                        if rid in scheduled:
                            cnt.quality["duplicate_id"] += 1
                            continue
                        s = encoder.encode(path, lineno, obj)
                        if opts.max_seq_len and s.n > opts.max_seq_len:
                            s.input_ids, s.loss_mask = s.input_ids[:opts.max_seq_len], s.loss_mask[:opts.max_seq_len]
                            cnt.quality["truncated"] += 1
                        target = int(s.loss_mask.sum())
                        if target == 0:
                            cnt.quality["no_target"] += 1
                        elif target <= 8:
                            cnt.quality["short_target"] += 1
                        scheduled.add(rid)
                        with cnt.lock:
                            cnt.prepared_samples += 1
                            cnt.prepared_tokens += s.n
                        for b in batcher.add(s):
                            if not _put(batches, b, fail):
                                return
            for b in batcher.flush():
                if not _put(batches, b, fail):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
            fail.set(exc)
        finally:
            cnt.reader_done = True
            _put(batches, None, fail)

    # ---- writer and finalizer
    STAGE_SECONDS.clear()
    cuda = device.startswith("cuda")
    pool: "queue.Queue" = queue.Queue()
    pool_max = max(2, opts.host_buffers, opts.writers + 2)
    pinned = [0]

    def new_pinned():
        """A pinned host buffer for one batch. All but two are made when first needed: pinning
        gigabytes takes seconds, which the GPU would otherwise spend idle at the start."""
        t = torch.empty(budget, width, dtype=runner.dtype, pin_memory=True)
        pinned[0] += 1
        return t, t.view(torch.uint8).numpy()

    if cuda:
        for _ in range(2):
            pool.put(new_pinned())
    jobs: "queue.Queue[Optional[WriteJob]]" = queue.Queue(maxsize=pool_max)
    # sealed shards waiting for the finalizer: deep, so that a writer never waits for the
    # publish fsyncs of other writers' shards (nothing enters the done-set before its publish)
    closed: "queue.Queue" = queue.Queue(maxsize=max(16, 4 * opts.writers))
    reserve = header_reserve_for(opts.shard_samples)
    shard_meta = {"model": str(opts.model), "dtype": st_dtype}
    next_no = [res.next_shard]

    next_lock = threading.Lock()
    n_writers = max(1, opts.writers)

    codec = None
    if opts.compress:
        from gpudeck.agents.workers.extract_store import plane_codec
        codec = plane_codec()

    def new_shard() -> ShardWriter:
        with next_lock:
            no = next_no[0]
            next_no[0] += 1
        return ShardWriter(out_dir, no, width, st_dtype, layers, reserve, shard_meta, codec)

    def add_sample(shard: ShardWriter, job: WriteJob, s: Prepared, off: int) -> None:
        if not job.planes:
            shard.add(s.id, memoryview(job.host_u8[off:off + s.n].reshape(-1)), s.input_ids, s.loss_mask)
            return
        planes = job.host_u8.reshape(-1)[:itemsize * job.tokens * width].reshape(itemsize, job.tokens * width)
        views = [memoryview(planes[p, off * width:(off + s.n) * width]) for p in range(itemsize)]
        shard.add_planes(s.id, views[:-1], views[-1], s.input_ids, s.loss_mask)

    def writer():
        shard: Optional[ShardWriter] = None
        tm = {"wait_job": 0.0, "wait_copy": 0.0, "write": 0.0, "seal": 0.0, "wait_closed": 0.0}
        try:
            while True:
                t0 = time.perf_counter()
                job = _get(jobs, fail)
                t1 = time.perf_counter()
                tm["wait_job"] += t1 - t0
                if job is None:
                    break
                if job.event is not None:
                    job.event.synchronize()
                tm["wait_copy"] += time.perf_counter() - t1
                for s, off in zip(job.samples, job.offsets):
                    size = s.n * width * itemsize
                    if shard is not None and shard.n and (shard.data_bytes + size > opts.shard_bytes
                                                          or shard.n >= opts.shard_samples or not shard.fits(s.id)):
                        t2 = time.perf_counter()
                        c = shard.close()
                        shard = None
                        seal(c)
                        t3 = time.perf_counter()
                        tm["seal"] += t3 - t2
                        if not _put(closed, c, fail):
                            return
                        tm["wait_closed"] += time.perf_counter() - t3
                    if shard is None:
                        shard = new_shard()
                    t2 = time.perf_counter()
                    add_sample(shard, job, s, off)
                    tm["write"] += time.perf_counter() - t2
                if job.pooled:
                    pool.put((job.host, job.host_u8))
            if shard is not None and shard.n:
                c = shard.close()
                shard = None
                seal(c)
                _put(closed, c, fail)
        except BaseException as exc:  # noqa: BLE001
            fail.set(exc)
        finally:
            if shard is not None:
                shard.abandon()
            with cnt.lock:
                for k, v in tm.items():
                    STAGE_SECONDS[f"writer_{k}"] = STAGE_SECONDS.get(f"writer_{k}", 0.0) + v
            _put(closed, None, fail)

    def finalizer():
        ended = 0
        try:
            while ended < n_writers:
                items = [_get(closed, fail)]
                while True:  # every sealed shard already waiting: published with one set of fsyncs
                    try:
                        items.append(closed.get_nowait())
                    except queue.Empty:
                        break
                ended += sum(1 for it in items if it is None)
                items = [it for it in items if it is not None]
                if not items:
                    continue
                t0 = time.perf_counter()
                publish_many(items, res.index, done)
                with cnt.lock:
                    STAGE_SECONDS["finalizer_publish"] = STAGE_SECONDS.get("finalizer_publish", 0.0) + \
                        time.perf_counter() - t0
                for item in items:
                    e = item.entry
                    with cnt.lock:
                        cnt.durable_samples = len(done)
                        cnt.durable_tokens += sum(e["n_tokens"])
                        cnt.durable_bytes += e["bytes"]
                        if "raw_bytes" in e:
                            cnt.durable_raw_bytes += e["raw_bytes"]
                            cnt.durable_packed_bytes += e["bytes"]
                        cnt.shards_closed += 1
                    if uploader is not None:
                        uploader.submit(e["shard"], e["ids"])
                    if on_shard_closed is not None:
                        t1 = time.perf_counter()
                        on_shard_closed(item.final, e)
                        with cnt.lock:
                            STAGE_SECONDS["finalizer_on_closed"] = STAGE_SECONDS.get("finalizer_on_closed", 0.0) + \
                                time.perf_counter() - t1
        except BaseException as exc:  # noqa: BLE001
            fail.set(exc)

    threads = [threading.Thread(target=fn, name=name, daemon=True)
               for fn, name in [(reader, "reader"), (finalizer, "finalizer")]
               + [(writer, f"writer-{i}") for i in range(n_writers)]]
    for t in threads:
        t.start()

    # ---- progress
    device_name = torch.cuda.get_device_name(torch.device(device)) if cuda else "cpu"
    peak, peak_source = peak_flops(device_name if cuda else None, opts.peak_tflops)
    flop_model = FlopModel.from_config(cfg, runner.layers_run)
    rate = RollingRate(window_s=60.0)
    started = time.monotonic()
    last_progress = [0.0]
    disk_state: dict = {}
    exit_code = [EXIT_OK]

    def progress(state: str = "running", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - last_progress[0] < opts.progress_interval_s:
            return
        last_progress[0] = now
        with cnt.lock:
            rate.add((cnt.computed_tokens, cnt.computed_flops, cnt.durable_bytes), now)
            snap = dict(done=cnt.durable_samples, tokens=cnt.durable_tokens, bytes_written=cnt.durable_bytes,
                        computed_samples=cnt.computed_samples, computed_tokens=cnt.computed_tokens,
                        shards=len(res.index.entries), quality=dict(cnt.quality), skipped_done=cnt.skipped_done,
                        compression=(cnt.durable_raw_bytes / cnt.durable_packed_bytes
                                     if cnt.durable_packed_bytes else None))
        r = rate.rates()
        tps, fps, bps = r if r else (None, None, None)
        total = total_box.get("total")
        per_sample = None
        if cnt.prepared_samples:  # before any shard closed: tokens seen so far, plus the header room
            per_sample = (cnt.prepared_tokens / cnt.prepared_samples * (width * itemsize + 5)
                          + reserve / max(1, min(opts.shard_samples, cnt.prepared_samples)))
        proj = disk_projection(snap["bytes_written"], snap["done"], total, shutil.disk_usage(out_dir).free,
                               est_bytes_per_sample=per_sample)
        disk_state.update(proj)
        doc = {"done": snap["done"], "total": total, "tokens": snap["tokens"], "state": state,
               "tokens_per_s": tps, "tflops": fps / 1e12 if fps else None,
               "mfu": (fps / peak) if (fps and peak) else None, "peak_tflops": peak / 1e12 if peak else None,
               "peak_source": peak_source, "device": device_name, "forward": runner.path,
               "write_bytes_per_s": bps, "compress": opts.compress,
               "compression": round(snap["compression"], 3) if snap["compression"] else None,
               "shards": snap["shards"], "computed_tokens": snap["computed_tokens"],
               "skipped_done": snap["skipped_done"], "quality": snap["quality"], "layers": layers,
               "elapsed_s": round(now - started, 1), "updated_at": time.time(), **proj}
        if opts.part is not None:
            doc["total_is_estimate"] = True
        if uploader is not None:
            doc["s3"] = uploader.status().to_json()
        try:
            atomic_write_json(progress_path, doc, fsync=False)
        except OSError as exc:
            log.warning("cannot write %s: %s", progress_path, exc)

    def disk_verdict(early: bool = False) -> Optional[str]:
        alert = disk_state.get("disk_alert")
        if alert is None or opts.disk_check == "off":
            return None
        # judge on enough samples: 64, all of them, or (before starting) all the reader could queue
        enough = cnt.prepared_samples >= 64 or cnt.reader_done or (early and cnt.prepared_samples > 0)
        return alert if enough else None

    # ---- the GPU loop
    copy_stream = torch.cuda.Stream() if cuda else None
    dev = torch.device(device)
    warned_disk = False
    # before the first forward pass: is there room for the whole output? (the 90 TB surprise)
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline and fail.exc is None and not (
            "total" in total_box and (cnt.prepared_samples >= 64 or cnt.reader_done or batches.full())):
        time.sleep(0.02)
    progress("running", force=True)
    verdict = disk_verdict(early=True)
    if verdict is not None and opts.disk_check == "exit":
        log.error("%s; not starting (--disk-check warn to go on anyway)", verdict)
        exit_code[0] = EXIT_DISK
        stopping.set()
    elif verdict is not None:
        log.warning("%s; going on (--disk-check warn)", verdict)
        warned_disk = True
    try:
        while True:
            t_wait = time.perf_counter()
            batch = _get(batches, fail)
            t_got = time.perf_counter()
            STAGE_SECONDS["main_wait_batch"] = STAGE_SECONDS.get("main_wait_batch", 0.0) + t_got - t_wait
            if batch is None:
                break
            if stopping.is_set():
                continue  # drain what the reader queued; nothing new is computed
            b, s = len(batch.samples), batch.seq
            ids = np.zeros((b, s), dtype=np.int64)
            offsets, t_real = [], 0
            padded = False
            for i, smp in enumerate(batch.samples):
                ids[i, :smp.n] = smp.input_ids
                offsets.append(t_real)
                t_real += smp.n
                if smp.n != s:
                    padded = True
            ids_t = torch.from_numpy(ids)
            if cuda:
                ids_t = ids_t.pin_memory().to(dev, non_blocking=True)
            out = runner(ids_t)
            STAGE_SECONDS["main_launch"] = STAGE_SECONDS.get("main_launch", 0.0) + time.perf_counter() - t_got
            flat = out.view(b * s, width)
            if padded:
                idx = np.concatenate([np.arange(n) + i * s for i, n in enumerate(smp.n for smp in batch.samples)])
                idx_t = torch.from_numpy(idx)
                if cuda:
                    idx_t = idx_t.pin_memory().to(dev, non_blocking=True)
                flat = flat.index_select(0, idx_t)
            if opts.compress:
                # byte planes on the GPU (a permuting copy); copied out as one block
                flat = to_planes(torch, flat, batch.samples, offsets, len(layers)).view(t_real, width * itemsize)
            if cuda:
                if t_real <= budget:
                    t0 = time.perf_counter()
                    try:
                        host, host_u8 = pool.get_nowait()
                    except queue.Empty:
                        host, host_u8 = new_pinned() if pinned[0] < pool_max else _get(pool, fail)
                    STAGE_SECONDS["main_wait_pool"] = STAGE_SECONDS.get("main_wait_pool", 0.0) + \
                        time.perf_counter() - t0
                    pooled = True
                else:  # one sample longer than the budget: a buffer of its own
                    host = torch.empty(t_real, width, dtype=runner.dtype, pin_memory=True)
                    host_u8, pooled = host.view(torch.uint8).numpy(), False
                ready = torch.cuda.Event()
                ready.record()
                with torch.cuda.stream(copy_stream):
                    copy_stream.wait_event(ready)
                    (host.view(torch.uint8) if opts.compress else host)[:t_real].copy_(flat, non_blocking=True)
                    flat.record_stream(copy_stream)
                    copied = torch.cuda.Event()
                    copied.record(copy_stream)
                job = WriteJob(batch.samples, offsets, host, host_u8, copied, pooled, t_real, opts.compress)
            else:
                host = flat.contiguous()
                job = WriteJob(batch.samples, offsets, host, host.view(torch.uint8).numpy(), None, False, t_real,
                               opts.compress)
            if not _put(jobs, job, fail):
                fail.check()
            with cnt.lock:
                cnt.computed_samples += b
                cnt.computed_tokens += t_real
                cnt.computed_flops += sum(flop_model.sample_flops(smp.n) for smp in batch.samples)
            progress()
            verdict = disk_verdict()
            if verdict is not None:
                if opts.disk_check == "exit":
                    log.error("%s; stopping (--disk-check warn to go on anyway)", verdict)
                    exit_code[0] = EXIT_DISK
                    stopping.set()
                elif not warned_disk:
                    log.warning("%s", verdict)
                    warned_disk = True
            if opts.throttle_ms:
                time.sleep(opts.throttle_ms / 1000.0)
        fail.check()
    except BaseException as exc:  # noqa: BLE001
        fail.set(exc)
    finally:
        stopping.set()
        for _ in range(n_writers):
            _put(jobs, None, fail)
        for t in threads[1:]:
            t.join()
        threads[0].join(timeout=5)
        if uploader is not None:
            from gpudeck.agents.workers.s3sync import drain_timeout_s
            if fail.exc is None and not uploader.drain(timeout=drain_timeout_s()):
                st = uploader.status()
                log.error("%d shard(s) or the done-set are not in S3 yet (last error: %s); a relaunch uploads them",
                          st.pending, st.last_error)
                if exit_code[0] == EXIT_OK:
                    exit_code[0] = EXIT_FAIL
            uploader.stop()
        res.index.close()
        done.close()

    state = "failed" if fail.exc is not None else (
        "disk_full_projected" if exit_code[0] == EXIT_DISK else
        "stopped" if _SIGNALLED.is_set() else
        "uploads_pending" if exit_code[0] == EXIT_FAIL else "done")
    progress(state, force=True)
    if fail.exc is not None:
        raise fail.exc
    if _SIGNALLED.is_set() and exit_code[0] == EXIT_OK:
        return EXIT_STOPPED
    log.info("%s: %d samples, %d new this run, %d shards, %s", state, cnt.durable_samples,
             cnt.durable_samples - done_at_start, len(res.index.entries), human_bytes(cnt.durable_bytes))
    return exit_code[0]


_SIGNALLED = threading.Event()
# seconds spent per stage in the last run (summed over the writer threads): what a benchmark
# prints to see where the pipeline waits
STAGE_SECONDS: dict = {}


def _install_signals(stopping: threading.Event) -> dict:
    """SIGTERM/SIGINT close the open shard and stop; returns the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum, frame):
        _SIGNALLED.set()
        stopping.set()
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


def _s3_setup(opts: ExtractOptions, out_dir: str):
    """Restore the done-set from S3 on a fresh node; return (uploader, first free shard number)."""
    from gpudeck.agents.workers import s3sync
    from gpudeck.agents.workers.extract_store import DONESET, read_header

    loc = s3sync.S3Location.parse(opts.s3)
    if opts.part is not None:
        loc = s3sync.S3Location(loc.bucket, loc.key(f"part-{opts.part[0]}-of-{opts.part[1]}"))
    client = s3sync.make_client(opts.s3_endpoint)

    def ids_of_file(path: str):
        meta, _ = read_header(path)
        return json.loads(meta["ids"])

    if not os.path.exists(os.path.join(out_dir, DONESET)):
        restored = s3sync.restore_done_set(client, loc, out_dir, DONESET, ids_of_file)
        if restored is not None:
            log.info("restored the done-set from %s: %d ids, %d shards", loc.url(), restored.ids, restored.shards)
    numbers = s3sync.list_shard_numbers(client, loc)
    uploader = s3sync.ShardUploader(out_dir, loc, ids_of=lambda name: ids_of_file(os.path.join(out_dir, name)),
                                    endpoint_url=opts.s3_endpoint)
    return uploader, (max(numbers) + 1) if numbers else 0


AUDIT_SAMPLE = 20000  # lines read by the audit before a start, spread over the whole input
AUDIT_FILE = "audit.json"


def run_audit(opts: ExtractOptions, files: list[str], out_dir: str) -> Optional[str]:
    """The data audit (agents/workers/audit.py, ``training`` mode) over a sample of the input
    spread across all its files: None when the data looks usable, else the audit's reasons
    in plain sentences. The verdict is cached in OUT/audit.json, keyed by the files' names,
    sizes and mtimes, so a relaunch does not read them again."""
    import hashlib

    from gpudeck.agents.workers.audit import audit_file, audit_records

    h = hashlib.blake2b(digest_size=16)
    for path in files:
        st = os.stat(path)
        h.update(f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    key = h.hexdigest()
    cache = os.path.join(out_dir, AUDIT_FILE)
    try:
        with open(cache) as f:
            doc = json.load(f)
        if doc.get("key") == key:
            return " ".join(doc["reasons"]) if doc.get("degenerate") else None
    except (OSError, ValueError, KeyError):
        pass
    if len(files) == 1:
        report = audit_file(files[0], mode="training", sample=AUDIT_SAMPLE)
    else:
        report = audit_records(list(_spread_sample(files, AUDIT_SAMPLE)), mode="training", name=opts.data)
    log.info("audit of %s:\n%s", opts.data, report.render())
    try:
        atomic_write_json(cache, {"key": key, "degenerate": report.degenerate, "reasons": report.reasons,
                                  "samples": report.samples, "summary": report.render()}, fsync=False)
    except OSError as exc:
        log.warning("cannot cache the audit in %s: %s", cache, exc.strerror or exc)
    return " ".join(report.reasons) if report.degenerate else None


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
