"""The extraction pipeline: four kinds of threads with bounded queues between them.

    reader      streams the input, skips done ids, tokenizes, packs batches by length
       | batches (bounded)
    main        host->device, forward (no LM head), gathers the real tokens of the chosen
                layers, copies them to a pinned host buffer on a side stream (non_blocking)
                and records a CUDA event (forward.py)
       | write jobs (bounded by the pool of pinned buffers)
    writer      waits on the event, streams each sample into the open shard's temp file,
                gives the buffer back (``--writers`` of them, one open shard each)
       | closed shards
    finalizer   fsync, rename, index line, done-set, S3 upload

The GPU never waits for the disk unless every pinned buffer is queued; the disk never
waits for the GPU unless the queue is empty. Every stage shares one :class:`RunContext`
(context.py); the first exception of any thread stops them all and is raised by
:meth:`Pipeline.run`. Heavy imports (torch, transformers) happen in run.py only.
"""

from __future__ import annotations

import json
import logging
import queue
import re
import threading
import time
from typing import Optional

from ..common.parts import in_part
from .context import RunContext
from .data import Batch, Batcher, DataError, Encoder, Prepared, parse_object_line, record_id
from .forward import Forward, HostBuffers, WriteJob
from .options import EXIT_DISK, EXIT_FAIL, EXIT_OK, EXIT_STOPPED
from ...contract.units import human_bytes
from .progress import ExtractProgress
from .store import ShardWriter, publish_many, seal
from . import tuning

log = logging.getLogger("gpudeck.extract")

_ID_PEEK = re.compile(rb'^\s*\{\s*"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)\s*[,}]')


def fenced(ctx: RunContext) -> bool:
    """A newer attempt holds the output (common/fence.py): stop, send nothing more. An S3
    fence is read by the uploader's thread; a directory's here, every fence_interval_s."""
    from ..common.fence import Fenced
    fence = ctx.fence
    if fence is None:
        return False
    if ctx.uploader is None:
        try:
            fence.check_due()
        except Fenced:
            pass
    if fence.fenced is None:
        return False
    if not ctx.stopping.is_set():
        log.error("%s", fence.fenced)
        ctx.stopping.set()
    return True


class Reader:
    """The reader thread: records not done yet, tokenized, in batches."""

    def __init__(self, ctx: RunContext, batches: "queue.Queue[Optional[Batch]]", encoder: Encoder) -> None:
        self.ctx, self.batches, self.encoder = ctx, batches, encoder
        self.scheduled: set[str] = set()

    def run(self) -> None:
        ctx = self.ctx
        try:
            batcher = Batcher(ctx.budget)
            for path in ctx.files:
                if not self._read_file(path, batcher):
                    return
            for b in batcher.flush():
                if not ctx.fail.put(self.batches, b):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
            ctx.fail.set(exc)
        finally:
            ctx.cnt.reader_done = True
            ctx.fail.put(self.batches, None)

    def _fenced(self) -> bool:
        return fenced(self.ctx)

    def _read_file(self, path: str, batcher: Batcher) -> bool:
        """Every record of one file into the batcher; False when the run stops."""
        ctx = self.ctx
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                if ctx.stopping.is_set() or ctx.fail.stop.is_set() or self._fenced():
                    return False
                if not raw.strip():
                    continue
                s = self._prepare(path, lineno, raw)
                if s is None:
                    continue
                for b in batcher.add(s):
                    if not ctx.fail.put(self.batches, b):
                        return False
        return True

    def _is_done(self, raw: bytes) -> bool:
        """Skip done records without parsing them, when the line starts with its id."""
        ctx = self.ctx
        m = _ID_PEEK.match(raw)
        if m is None or not ctx.done.ids:
            return False
        tok = m.group(1)
        rid = json.loads(tok) if tok.startswith(b'"') else tok.decode()
        return isinstance(rid, str) and in_part(rid, ctx.opts.part) and rid in ctx.done

    def _prepare(self, path: str, lineno: int, raw: bytes) -> Optional[Prepared]:
        """The sample of one line, or None for a record done, of another part, or seen twice."""
        ctx, cnt, opts = self.ctx, self.ctx.cnt, self.ctx.opts
        if self._is_done(raw):
            cnt.skipped_done += 1
            return None
        obj = parse_object_line(raw, path, lineno)
        rid = record_id(path, lineno, obj)
        if not in_part(rid, opts.part):
            return None
        if rid in ctx.done:
            cnt.skipped_done += 1
            return None
        if rid in self.scheduled:
            cnt.quality["duplicate_id"] += 1
            return None
        s = self._fit(self.encoder.encode(path, lineno, obj, ctx.max_len))
        target = int(s.loss_mask.sum())
        if target == 0:
            cnt.quality["no_target"] += 1
        elif target <= 8:
            cnt.quality["short_target"] += 1
        self.scheduled.add(rid)
        with cnt.lock:
            cnt.prepared_samples += 1
            cnt.prepared_tokens += s.n
        return s


    def _fit(self, s: Prepared) -> Prepared:
        """The sample cut to --max-seq-len, or refused when it is longer than the model's
        context or the batch budget (a forward over it could take all the host's memory);
        a token id beyond the model's vocabulary is refused too."""
        ctx = self.ctx
        if s.n > ctx.max_len:
            if not ctx.opts.max_seq_len:
                n = str(s.full_n or s.n) if not s.partial or s.full_n else f"more than {s.n - 1}"
                raise DataError(f"{s.where}: sample {s.id!r} has {n} tokens, more than {ctx.max_len_why} allows; "
                                f"pass --max-seq-len N to truncate such samples")
            s.input_ids, s.loss_mask = s.input_ids[:ctx.max_len], s.loss_mask[:ctx.max_len]
            s.partial = False
            ctx.cnt.quality["truncated"] += 1
        if ctx.vocab is not None and s.n and int(s.input_ids.max()) >= ctx.vocab:
            bad = int(s.input_ids.max())
            raise DataError(f"{s.where}: sample {s.id!r} has token id {bad} at position "
                            f"{int((s.input_ids == bad).argmax())}, beyond the model's vocabulary "
                            f"({ctx.vocab} ids: 0..{ctx.vocab - 1})")
        return s


class ShardNumbers:
    """The next shard number, shared by the writers."""

    def __init__(self, first: int) -> None:
        self._next = first
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            no = self._next
            self._next += 1
            return no


class Writer:
    """One writer thread: write jobs into its open shard; full shards sealed and queued for
    the finalizer."""

    STAGES = ("wait_job", "wait_copy", "write", "seal", "wait_closed")

    def __init__(self, ctx: RunContext, jobs: "queue.Queue", closed: "queue.Queue", buffers: HostBuffers,
                 numbers: ShardNumbers, codec) -> None:
        self.ctx, self.jobs, self.closed, self.buffers, self.numbers, self.codec = \
            ctx, jobs, closed, buffers, numbers, codec
        self.shard: Optional[ShardWriter] = None
        self.meta = {"model": str(ctx.opts.model), "dtype": ctx.st_dtype}
        self.tm = dict.fromkeys(self.STAGES, 0.0)

    def run(self) -> None:
        ctx = self.ctx
        try:
            while True:
                t0 = time.perf_counter()
                job = ctx.fail.get(self.jobs)
                t1 = time.perf_counter()
                self.tm["wait_job"] += t1 - t0
                if job is None:
                    break
                if job.event is not None:
                    job.event.synchronize()
                self.tm["wait_copy"] += time.perf_counter() - t1
                if not self._write(job):
                    return
            if self.shard is not None and self.shard.n:
                c = self.shard.close()
                self.shard = None
                seal(c)
                ctx.fail.put(self.closed, c)
        except BaseException as exc:  # noqa: BLE001
            ctx.fail.set(exc)
        finally:
            if self.shard is not None:
                self.shard.abandon()
            for k, v in self.tm.items():
                ctx.stages.add(f"writer_{k}", v)
            ctx.fail.put(self.closed, None)

    def _full(self, s: Prepared) -> bool:
        shard, opts = self.shard, self.ctx.opts
        size = s.n * self.ctx.width * self.ctx.itemsize
        return shard is not None and shard.n > 0 and (shard.data_bytes + size > opts.shard_bytes
                                                      or shard.n >= opts.shard_samples or not shard.fits(s.id))

    def _write(self, job: WriteJob) -> bool:
        """The job's samples into shards; False when the run stops."""
        ctx = self.ctx
        for s, off in zip(job.samples, job.offsets):
            full = self.shard
            if full is not None and self._full(s):
                t2 = time.perf_counter()
                c = full.close()
                self.shard = None
                seal(c)
                t3 = time.perf_counter()
                self.tm["seal"] += t3 - t2
                if not ctx.fail.put(self.closed, c):
                    return False
                self.tm["wait_closed"] += time.perf_counter() - t3
            if self.shard is None:
                self.shard = ShardWriter(ctx.out_dir, self.numbers.take(), ctx.width, ctx.st_dtype, ctx.layers,
                                         ctx.reserve, self.meta, self.codec)
            t2 = time.perf_counter()
            self._add(self.shard, job, s, off)
            self.tm["write"] += time.perf_counter() - t2
        if job.pooled:
            self.buffers.give_back(job.host, job.host_u8)
        return True

    def _add(self, shard: ShardWriter, job: WriteJob, s: Prepared, off: int) -> None:
        width, itemsize = self.ctx.width, self.ctx.itemsize
        if not job.planes:
            shard.add(s.id, memoryview(job.host_u8[off:off + s.n].reshape(-1)), s.input_ids, s.loss_mask)
            return
        planes = job.host_u8.reshape(-1)[:itemsize * job.tokens * width].reshape(itemsize, job.tokens * width)
        views = [memoryview(planes[p, off * width:(off + s.n) * width]) for p in range(itemsize)]
        shard.add_planes(s.id, views[:-1], views[-1], s.input_ids, s.loss_mask)


class Finalizer:
    """The finalizer thread: sealed shards made visible (store.publish_many: rename, index
    line, done-set, in that order), counted, handed to the uploader."""

    def __init__(self, ctx: RunContext, closed: "queue.Queue") -> None:
        self.ctx, self.closed = ctx, closed

    def run(self) -> None:
        ctx = self.ctx
        ended = 0
        try:
            while ended < ctx.n_writers:
                items = [ctx.fail.get(self.closed)]
                while True:  # every sealed shard already waiting: published with one set of fsyncs
                    try:
                        items.append(self.closed.get_nowait())
                    except queue.Empty:
                        break
                ended += sum(1 for it in items if it is None)
                items = [it for it in items if it is not None]
                if items:
                    self._publish(items)
        except BaseException as exc:  # noqa: BLE001
            ctx.fail.set(exc)

    def _publish(self, items: list) -> None:
        ctx, cnt = self.ctx, self.ctx.cnt
        t0 = time.perf_counter()
        publish_many(items, ctx.res.index, ctx.done)
        ctx.stages.since("finalizer_publish", t0)
        if ctx.startup is not None and ctx.startup.shard_durable():  # the first: the start-up's end (startup_s)
            if ctx.compile_cache is not None and not ctx.compile_cache.warm:
                tuning.record_learned(ctx.compile_cache.root)  # what a cold start's kernels chose
        for item in items:
            e = item.entry
            with cnt.lock:
                cnt.durable_samples = len(ctx.done)
                cnt.durable_tokens += sum(e["n_tokens"])
                cnt.durable_bytes += e["bytes"]
                if "raw_bytes" in e:
                    cnt.durable_raw_bytes += e["raw_bytes"]
                    cnt.durable_packed_bytes += e["bytes"]
                cnt.shards_closed += 1
            if ctx.uploader is not None:
                ctx.uploader.submit(e["shard"], e["ids"])
            if ctx.on_shard_closed is not None:
                t1 = time.perf_counter()
                ctx.on_shard_closed(item.final, e)
                ctx.stages.since("finalizer_on_closed", t1)


class Pipeline:
    """One run of the threads over a prepared :class:`RunContext`; :meth:`run` returns the
    exit status (or raises the first failure of any thread)."""

    def __init__(self, ctx: RunContext, encoder: Encoder, codec=None) -> None:
        self.ctx = ctx
        cnt, res = ctx.cnt, ctx.res
        cnt.durable_samples = len(ctx.done)
        cnt.durable_tokens = sum(sum(e["n_tokens"]) for e in res.index.entries)
        cnt.durable_bytes = sum(int(e.get("bytes", 0)) for e in res.index.entries)
        self.done_at_start = len(ctx.done)
        self.batches: "queue.Queue[Optional[Batch]]" = queue.Queue(maxsize=4)
        self.reader = Reader(ctx, self.batches, encoder)
        self.buffers = HostBuffers(ctx)
        self.jobs: "queue.Queue[Optional[WriteJob]]" = queue.Queue(maxsize=self.buffers.size)
        # sealed shards waiting for the finalizer: deep, so that a writer never waits for the
        # publish fsyncs of other writers' shards (nothing enters the done-set before its publish)
        self.closed: "queue.Queue" = queue.Queue(maxsize=max(16, 4 * ctx.opts.writers))
        numbers = ShardNumbers(res.next_shard)
        self.writers = [Writer(ctx, self.jobs, self.closed, self.buffers, numbers, codec)
                        for _ in range(ctx.n_writers)]
        self.finalizer = Finalizer(ctx, self.closed)
        self.progress: ExtractProgress  # made by run()

    def run(self) -> int:
        ctx = self.ctx
        self.progress = ExtractProgress(ctx)
        self.progress.count_total_in_background()
        threads = [threading.Thread(target=self.reader.run, name="reader", daemon=True),
                   threading.Thread(target=self.finalizer.run, name="finalizer", daemon=True)] + \
                  [threading.Thread(target=w.run, name=f"writer-{i}", daemon=True) for i, w in enumerate(self.writers)]
        for t in threads:
            t.start()
        try:
            forward = Forward(ctx, self.batches, self.jobs, self.buffers, self.progress)
            self.progress.wait_for_estimate(self.batches.full)
            self.progress.write("running", force=True)
            self.progress.check_disk(early=True)
            forward.run()
        except BaseException as exc:  # noqa: BLE001
            ctx.fail.set(exc)
        finally:
            self._shut_down(threads)
        return self._result()

    def _shut_down(self, threads: list[threading.Thread]) -> None:
        ctx = self.ctx
        ctx.stopping.set()
        for _ in range(ctx.n_writers):
            ctx.fail.put(self.jobs, None)
        for t in threads[1:]:
            t.join()
        threads[0].join(timeout=5)
        if ctx.uploader is not None:
            from ..common.s3sync.remote import drain_timeout_s
            if ctx.fail.exc is None and not fenced(ctx) and not ctx.uploader.drain(timeout=drain_timeout_s()):
                st = ctx.uploader.status()
                log.error("%d shard(s) or the done-set are not in S3 yet (last error: %s); a relaunch uploads them",
                          st.pending, st.last_error)
                if ctx.exit_code == EXIT_OK:
                    ctx.exit_code = EXIT_FAIL
            ctx.uploader.stop()
        ctx.res.index.close()
        ctx.done.close()

    def _result(self) -> int:
        ctx, cnt = self.ctx, self.ctx.cnt
        if ctx.fail.exc is None and fenced(ctx):
            from ...contract.fencing import EXIT_FENCED
            self.progress.write("fenced", force=True)
            log.error("stopped: %s", ctx.fence.fenced)
            return EXIT_FENCED
        state = "failed" if ctx.fail.exc is not None else (
            "disk_full_projected" if ctx.exit_code == EXIT_DISK else
            "stopped" if ctx.signalled.is_set() else
            "uploads_pending" if ctx.exit_code == EXIT_FAIL else "done")
        self.progress.write(state, force=True)
        if ctx.fail.exc is not None:
            raise ctx.fail.exc
        if ctx.signalled.is_set() and ctx.exit_code == EXIT_OK:
            return EXIT_STOPPED
        log.info("%s: %d samples, %d new this run, %d shards, %s", state, cnt.durable_samples,
                 cnt.durable_samples - self.done_at_start, len(ctx.res.index.entries), human_bytes(cnt.durable_bytes))
        return ctx.exit_code
