"""The extraction's progress document (common/progress.py says where it goes and how) and
the disk check it feeds: every ``progress_interval_s``, what is durable, the rates over the
last minute (tokens/s, TFLOP/s and MFU against the device's peak, bytes/s written), the
quality counters, the start-up's phase (startup.py), and the projection of the output's size
against the free disk. The total is counted in a background thread while the work starts.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from typing import Optional

from ...contract.documents import ProgressDoc
from ...contract.wire import Uploads
from ..common.progress import write_progress
from .context import RunContext
from .data import count_records
from .options import EXIT_DISK
from .perf import RollingRate, disk_projection, peak_flops

log = logging.getLogger("gpudeck.extract")


class ExtractProgress:
    def __init__(self, ctx: RunContext) -> None:
        import torch

        self.ctx = ctx
        self.device_name = torch.cuda.get_device_name(torch.device(ctx.device)) if ctx.cuda else "cpu"
        self.peak, self.peak_source = peak_flops(self.device_name if ctx.cuda else None, ctx.opts.peak_tflops)
        self.rate = RollingRate(window_s=60.0)
        self.started = time.monotonic()
        self.total: Optional[int] = None  # set by the counting thread
        self._last = 0.0
        self._disk: dict = {}
        self._warned_disk = False

    # ------------------------------------------------------------ the total

    def count_total_in_background(self) -> None:
        threading.Thread(target=self._count_total, name="count", daemon=True).start()

    def _count_total(self) -> None:
        part = self.ctx.opts.part
        try:
            n = count_records(self.ctx.files)
            self.total = n if part is None else round(n / part[1])
        except OSError as exc:
            log.warning("cannot count the input records: %s", exc)

    def wait_for_estimate(self, batches_full, timeout_s: float = 30.0) -> None:
        """Before the first forward pass: wait (up to ``timeout_s``) for the total and enough
        samples to project the output's size (the 90 TB surprise)."""
        cnt, fail = self.ctx.cnt, self.ctx.fail
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and fail.exc is None and not (
                self.total is not None and (cnt.prepared_samples >= 64 or cnt.reader_done or batches_full())):
            time.sleep(0.02)

    # ------------------------------------------------------------ the document

    def _snapshot(self, now: float) -> dict:
        ctx, cnt = self.ctx, self.ctx.cnt
        with cnt.lock:
            self.rate.add((cnt.computed_tokens, cnt.computed_flops, cnt.durable_bytes), now)
            return dict(done=cnt.durable_samples, tokens=cnt.durable_tokens, bytes_written=cnt.durable_bytes,
                        computed_samples=cnt.computed_samples, computed_tokens=cnt.computed_tokens,
                        shards=len(ctx.res.index.entries), quality=dict(cnt.quality), skipped_done=cnt.skipped_done,
                        compression=(cnt.durable_raw_bytes / cnt.durable_packed_bytes
                                     if cnt.durable_packed_bytes else None))

    def _projection(self, snap: dict) -> dict:
        ctx, cnt = self.ctx, self.ctx.cnt
        per_sample = None
        if cnt.prepared_samples:  # before any shard closed: tokens seen so far, plus the header room
            per_sample = (cnt.prepared_tokens / cnt.prepared_samples * (ctx.width * ctx.itemsize + 5)
                          + ctx.reserve / max(1, min(ctx.opts.shard_samples, cnt.prepared_samples)))
        proj = disk_projection(snap["bytes_written"], snap["done"], self.total, shutil.disk_usage(ctx.out_dir).free,
                               est_bytes_per_sample=per_sample)
        self._disk.update(proj)
        return proj

    def write(self, state: str = "running", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.ctx.opts.progress_interval_s:
            return
        self._last = now
        ctx, opts = self.ctx, self.ctx.opts
        snap = self._snapshot(now)
        r = self.rate.rates()
        tps, fps, bps = r if r else (None, None, None)
        proj = self._projection(snap)
        peak = self.peak
        startup = ctx.startup.fields() if ctx.startup is not None else {}
        doc = ProgressDoc(done=snap["done"], total=self.total, tokens=snap["tokens"], tokens_per_s=tps,
                          updated_at=time.time(), quality=snap["quality"],
                          s3=Uploads(**ctx.uploader.status().to_json()) if ctx.uploader is not None else None,
                          **startup)
        extra = {"state": state, "tflops": fps / 1e12 if fps else None,
               "mfu": (fps / peak) if (fps and peak) else None, "peak_tflops": peak / 1e12 if peak else None,
               "peak_source": self.peak_source, "device": self.device_name, "forward": ctx.runner.path,
               "write_bytes_per_s": bps, "compress": opts.compress,
               "compression": round(snap["compression"], 3) if snap["compression"] else None,
               "shards": snap["shards"], "computed_tokens": snap["computed_tokens"],
               "skipped_done": snap["skipped_done"], "layers": ctx.layers,
               "elapsed_s": round(now - self.started, 1), **proj}
        if ctx.startup is not None:
            extra.update(ctx.startup.extra())  # seconds per start-up phase, once the first shard is durable
        if ctx.compile_cache is not None:
            extra["compile_cache"] = ctx.compile_cache.to_json()
        if opts.part is not None:
            extra["total_is_estimate"] = True
        write_progress(ctx.progress_path, doc, log, **extra)

    # ------------------------------------------------------------ the disk check

    def disk_verdict(self, early: bool = False) -> Optional[str]:
        alert = self._disk.get("disk_alert")
        cnt = self.ctx.cnt
        if alert is None or self.ctx.opts.disk_check == "off":
            return None
        # judge on enough samples: 64, all of them, or (before starting) all the reader could queue
        enough = cnt.prepared_samples >= 64 or cnt.reader_done or (early and cnt.prepared_samples > 0)
        return alert if enough else None

    def check_disk(self, early: bool = False) -> None:
        """``--disk-check exit``: stop (EXIT_DISK) when the output will not fit; ``warn``: say it once."""
        verdict = self.disk_verdict(early)
        if verdict is None:
            return
        if self.ctx.opts.disk_check == "exit":
            log.error("%s; %s (--disk-check warn to go on anyway)", verdict, "not starting" if early else "stopping")
            self.ctx.exit_code = EXIT_DISK
            self.ctx.stopping.set()
        elif early:
            log.warning("%s; going on (--disk-check warn)", verdict)
            self._warned_disk = True
        elif not self._warned_disk:
            log.warning("%s", verdict)
            self._warned_disk = True
