"""The GPU stage of the pipeline (the main thread): host->device, forward (no LM head),
gather the real tokens of the chosen layers, copy them to a pinned host buffer on a side
stream (non_blocking) and record a CUDA event; the write job goes to the writers, which
wait on the event. The GPU never waits for the disk unless every pinned buffer is queued.
"""

from __future__ import annotations

import logging
import queue
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .context import RunContext
from .data import Batch, Prepared
from .progress import ExtractProgress

log = logging.getLogger("gpudeck.extract")


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


class HostBuffers:
    """The pool of pinned host buffers, one batch each. All but two are made when first
    needed: pinning gigabytes takes seconds, which the GPU would otherwise spend idle at the
    start. Its size bounds the write jobs in flight."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.pool: "queue.Queue" = queue.Queue()
        self.size = max(2, ctx.opts.host_buffers, ctx.opts.writers + 2)
        self.made = 0
        if ctx.cuda:
            for _ in range(2):
                self.pool.put(self._new())

    def _new(self):
        import torch
        t = torch.empty(self.ctx.budget, self.ctx.width, dtype=self.ctx.runner.dtype, pin_memory=True)
        self.made += 1
        return t, t.view(torch.uint8).numpy()

    def take(self):
        try:
            return self.pool.get_nowait()
        except queue.Empty:
            return self._new() if self.made < self.size else self.ctx.fail.get(self.pool)

    def give_back(self, host, host_u8) -> None:
        self.pool.put((host, host_u8))


class Forward:
    """The main thread's loop over the batches the reader queues."""

    def __init__(self, ctx: RunContext, batches: "queue.Queue", jobs: "queue.Queue", buffers: HostBuffers,
                 progress: ExtractProgress) -> None:
        import torch

        self.ctx, self.batches, self.jobs, self.buffers, self.progress = ctx, batches, jobs, buffers, progress
        self.flop_model = ctx.runner.flop_model()
        self.copy_stream = torch.cuda.Stream() if ctx.cuda else None
        self.dev = torch.device(ctx.device)

    def run(self) -> None:
        ctx = self.ctx
        while True:
            t_wait = time.perf_counter()
            batch = ctx.fail.get(self.batches)
            t_got = ctx.stages.since("main_wait_batch", t_wait)
            if batch is None:
                break
            if ctx.stopping.is_set():
                continue  # drain what the reader queued; nothing new is computed
            job = self._compute(batch, t_got)
            first = ctx.startup is not None and ctx.startup.phase != "running"
            if first:  # the first batch came through the compiled layers: the start-up is over
                ctx.startup.enter("running", write=False)
            if not ctx.fail.put(self.jobs, job):
                ctx.fail.check()
            with ctx.cnt.lock:
                ctx.cnt.computed_samples += len(batch.samples)
                ctx.cnt.computed_tokens += job.tokens
                ctx.cnt.computed_flops += sum(self.flop_model.sample_flops(smp.n) for smp in batch.samples)
            self.progress.write(force=first)
            self.progress.check_disk()
            if ctx.opts.throttle_ms:
                time.sleep(ctx.opts.throttle_ms / 1000.0)
        ctx.fail.check()

    def _compute(self, batch: Batch, t_got: float) -> WriteJob:
        """The forward pass of one batch, its real tokens gathered (as byte planes with
        ``--compress``), and the copy to the host under way."""
        import torch

        ctx = self.ctx
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
        if ctx.cuda:
            ids_t = ids_t.pin_memory().to(self.dev, non_blocking=True)
        out = ctx.runner(ids_t)
        ctx.stages.since("main_launch", t_got)
        flat = out.view(b * s, ctx.width)
        if padded:
            idx = np.concatenate([np.arange(n) + i * s for i, n in enumerate(smp.n for smp in batch.samples)])
            idx_t = torch.from_numpy(idx)
            if ctx.cuda:
                idx_t = idx_t.pin_memory().to(self.dev, non_blocking=True)
            flat = flat.index_select(0, idx_t)
        if ctx.opts.compress:
            # byte planes on the GPU (a permuting copy); copied out as one block
            flat = to_planes(torch, flat, batch.samples, offsets, len(ctx.layers)).view(t_real,
                                                                                        ctx.width * ctx.itemsize)
        if ctx.cuda:
            return self._copy_out(flat, batch, offsets, t_real)
        host = flat.contiguous()
        return WriteJob(batch.samples, offsets, host, host.view(torch.uint8).numpy(), None, False, t_real,
                        ctx.opts.compress)

    def _copy_out(self, flat, batch: Batch, offsets: list[int], t_real: int) -> WriteJob:
        """Start the device->host copy on the side stream; the job's event says when it is done."""
        import torch

        ctx = self.ctx
        if t_real <= ctx.budget:
            t0 = time.perf_counter()
            host, host_u8 = self.buffers.take()
            ctx.stages.since("main_wait_pool", t0)
            pooled = True
        else:  # one sample longer than the budget: a buffer of its own
            host = torch.empty(t_real, ctx.width, dtype=ctx.runner.dtype, pin_memory=True)
            host_u8, pooled = host.view(torch.uint8).numpy(), False
        ready = torch.cuda.Event()
        ready.record()
        stream = self.copy_stream
        assert stream is not None, "on CUDA, with its copy stream"
        with torch.cuda.stream(stream):
            stream.wait_event(ready)
            (host.view(torch.uint8) if ctx.opts.compress else host)[:t_real].copy_(flat, non_blocking=True)
            flat.record_stream(stream)
            copied = torch.cuda.Event()
            copied.record(stream)
        return WriteJob(batch.samples, offsets, host, host_u8, copied, pooled, t_real, ctx.opts.compress)
