"""Hidden-state extraction on one GPU: the gpudeck worker against a naive loop, same process.

Workload (issue 4): a Qwen3-shaped model with random weights, ~1.7B parameters (hidden 2048,
28 layers, 16 heads, 8 KV heads, head dim 128, intermediate 6144, vocab 151936); samples of
2,048 tokens; layers 1,7,14,21,27 kept (5 x 2048 bf16 = 20 KiB per token); output written
to local disk.

- naive: batch 1, the full model with its LM head and output_hidden_states, a synchronous
  .cpu(), one torch.save per sample (no fsync).
- worker: agents.workers.extract.run.Extraction, the real pipeline (tokenized JSONL
  in, packed batches, fast path compiled, pinned buffers + CUDA events, writer and
  finalizer threads, safetensors shards fsynced and renamed, index, done-set). Its shards
  are deleted once durable (as an upload-and-delete would), so that the 64 GiB disk holds
  the run; the bytes still go to the disk through fsync.
- compute only: the same forward with nothing copied out, to separate the GPU from the disk.

MFU is printed two ways: against the FLOPs the extraction needs (agents/workers/extract/perf:
27 decoder layers' matmuls + causal attention, no embedding, no LM head), and in the
convention the issue's anchors use (2 x all 2.03B parameters + attention per token:
28k tok/s -> 12%, 105k tok/s -> 46%). The tokens/s ratio does not depend on either.

    PYTHONPATH=. python3 bench/extract_gpu.py [--samples 600] [--budget 32768] [--out /tmp/xbench]

Start-up (issue 25): ``--startup hybrid27b,dense27b --steady hybrid27b,dense27b`` runs, for
each shape, a cold start (a fresh ``--cache-root/SHAPE``, a new process) and a warm one (the
same cache, a new process), each measured from the process's start to the first durable
shard (the worker's own ``startup_s``, split by phase), then the steady ``--shape`` run in a
new process on the warm cache, against the floor (2 x body parameters at 790 TFLOP/s) and
beside the naive loop (``bash bench/device_run.sh extract-startup``).

Measured on lent H200s (torch 2.11, transformers 5.17), 2026-11-30; the logs and a table are in
bench/results/extract_gpu/. With ``--skip attn,compute --samples 1200 --writers 8 --compress
--variants 8:2:1`` (MFU in the anchor convention):

    naive (batch 1, LM head, .cpu(), torch.save)         25,606 tok/s  11.1%
    compute only, fast path compiled, batch 16          190,176 tok/s  82.6%   (another machine)
    worker, --compress, to /dev/shm, end to end         174,046 tok/s  75.6%
    worker, --compress, local disk (fsync), end to end  147,780 tok/s  64.2%   5.77x naive
    worker, plain, local disk (fsync), end to end       117,172 tok/s  50.9%   (disk at 2.4 GB/s)

The local disk is the limit whenever the states go to disk, and the lent machines' disks
differ: on two others (write + fsync probes 1.95 and 2.07 GB/s at best) the same worker gave
102-125k tok/s (44-54%) with --compress and 77-96k (34-42%) plain. --compress writes 0.67
of the bytes (byte planes, top plane through zstd; lossless), so it was 1.26-1.62x faster
than plain in the same run (1.06x once, when the disk itself slowed during the compressed
part). A fourth machine's disk fell under 1 GB/s under load: 60k tok/s with --compress.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

LAYERS = [1, 7, 14, 21, 27]
SEQ = 2048


def log(msg: str) -> None:
    print(msg, flush=True)


def build_model(torch, dtype):
    from transformers import AutoModelForCausalLM, Qwen3Config

    cfg = Qwen3Config(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                      tie_word_embeddings=True, rope_theta=1000000.0)
    torch.manual_seed(0)
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
        except TypeError:
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype, attn_implementation="sdpa")
    model.eval().requires_grad_(False)
    return model, cfg


def disk_write_speed(directory: str, threads: int = 1, gib_each: int = 1, early_writeback: bool = False,
                     direct: bool = False) -> float:
    """Bytes/s of sequential writes + fsync to ``directory``'s disk, ``threads`` files at once;
    ``direct``: O_DIRECT from a page-aligned buffer (as the worker writes hidden states)."""
    import mmap
    import threading

    raw = mmap.mmap(-1, 64 << 20)  # page-aligned
    buf = np.frombuffer(raw, dtype=np.uint8)
    buf[:] = np.random.default_rng(0).integers(0, 255, size=64 << 20, dtype=np.uint8)

    def one(i: int) -> None:
        path = os.path.join(directory, f"ddtest{i}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0), 0o644)
        off = 0
        for _ in range(gib_each * 16):
            n = os.pwrite(fd, memoryview(buf), off)
            if early_writeback and not direct:
                os.posix_fadvise(fd, off, n, os.POSIX_FADV_DONTNEED)
            off += n
        os.fsync(fd)
        os.close(fd)

    t = time.perf_counter()
    ths = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    dt = time.perf_counter() - t
    for i in range(threads):
        os.unlink(os.path.join(directory, f"ddtest{i}"))
    return threads * gib_each * (1 << 30) / dt


def write_data(path: str, n: int, vocab: int) -> None:
    rng = np.random.default_rng(1)
    mask = [0] * 548 + [1] * (SEQ - 548)
    mask_s = json.dumps(mask)
    with open(path, "w") as f:
        for i in range(n):
            ids = rng.integers(0, vocab, size=SEQ).tolist()
            f.write(f'{{"id": "b{i}", "input_ids": {json.dumps(ids)}, "loss_mask": {mask_s}}}\n')


def naive(torch, model, n: int, out_dir: str, vocab: int) -> float:
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(2)
    mask = torch.tensor([0] * 548 + [1] * (SEQ - 548))
    times = []
    for i in range(n + 3):
        ids = torch.from_numpy(rng.integers(0, vocab, size=(1, SEQ))).cuda()
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True)
        hs = torch.cat([out.hidden_states[layer] for layer in LAYERS], dim=-1)[0].cpu()
        torch.save({"input_ids": ids[0].cpu(), "loss_mask": mask, "hidden_states": hs},
                   os.path.join(out_dir, f"{i}.pt"))
        if i >= 3:  # the first ones warm up
            times.append(time.perf_counter() - t)
    shutil.rmtree(out_dir)
    return n * SEQ / sum(times)


def compute_only(torch, runner, batch: int, iters: int = 15) -> float:
    ids = torch.randint(0, runner.cfg.vocab_size, (batch, SEQ), device="cuda")
    for _ in range(3):
        runner(ids)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        runner(ids)
    b.record()
    torch.cuda.synchronize()
    return iters * batch * SEQ / (a.elapsed_time(b) / 1000)


def attention_backends(torch) -> dict:
    """Causal SDPA at the workload's shape, per backend (ms)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(16, 16, SEQ, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(16, 8, SEQ, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    res = {}
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                for _ in range(3):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(20):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                b.record()
                torch.cuda.synchronize()
                ms = a.elapsed_time(b) / 20
                flops = 2 * 2 * 16 * 16 * SEQ * SEQ * 128 / 2
                res[name] = f"{ms:.2f} ms ({flops / ms / 1e9:.0f} TFLOP/s)"
        except RuntimeError as exc:
            res[name] = f"unavailable: {str(exc).splitlines()[0][:80]}"
    return res


class DiskSampler:
    """Bytes written to the block devices, from /proc/diskstats every 0.25 s: what the disk
    did over a run (the start, the steady middle and the tail)."""

    def __init__(self) -> None:
        import threading
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def written() -> int:
        total = 0
        try:
            with open("/proc/diskstats") as f:
                for line in f:
                    p = line.split()
                    if len(p) > 9 and os.path.exists(f"/sys/block/{p[2]}") \
                            and not p[2].startswith(("loop", "zram", "ram", "dm-", "md")):  # whole disks
                        total += int(p[9]) * 512
        except OSError:
            pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), self.written()))
            self._stop.wait(0.25)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.perf_counter(), self.written()))

    def rates(self, t0: float) -> list[tuple[float, float]]:
        s = self.samples
        return [((t1 - t0), (b1 - b0) / (t1 - ta)) for (ta, b0), (t1, b1) in zip(s, s[1:]) if t1 > ta]

    def median_rate(self) -> float:
        busy = sorted(r for _, r in self.rates(0.0) if r > 50e6)
        return busy[len(busy) // 2] if busy else 0.0

    def summary(self, t0: float) -> str:
        s = self.samples
        rates = self.rates(t0)
        busy = [r for _, r in rates if r > 50e6]
        if not busy:
            return "disk: no writes seen in /proc/diskstats"
        first = next(t for t, r in rates if r > 50e6)
        busy.sort()
        return (f"disk over the run: first write at {first:.1f} s, median {busy[len(busy) // 2] / 1e9:.2f} GB/s, "
                f"p90 {busy[int(len(busy) * 0.9)] / 1e9:.2f} GB/s while writing, "
                f"{(s[-1][1] - s[0][1]) / 1e9:.1f} GB in all")


def run_worker(torch, model, data: str, out: str, n_budget: int, compile_: bool, progress: str, writers: int,
               shard_gib: float = 2, compress: bool = False, layers: list = LAYERS):
    from gpudeck.agents.workers.extract.options import ExtractOptions
    from gpudeck.agents.workers.extract.run import Extraction

    import queue
    import threading

    shutil.rmtree(out, ignore_errors=True)
    marks: list[tuple[float, int]] = []
    written: list[int] = []
    doomed: "queue.Queue" = queue.Queue()

    def deleter():
        while (p := doomed.get()) is not None:
            os.unlink(p)

    # deleted off the finalizer thread, as the S3 uploader deletes after its upload
    del_thread = threading.Thread(target=deleter, daemon=True)
    del_thread.start()

    def on_closed(path, entry):
        marks.append((time.perf_counter(), sum(entry["n_tokens"])))
        written.append(entry["bytes"])
        doomed.put(path)  # as an upload-and-delete would; the bytes were fsynced first

    opts = ExtractOptions(model="random-init", data=data, out=out, layers=layers,
                          max_tokens_per_batch=n_budget, device="cuda", dtype="bfloat16", compile=compile_,
                          shard_bytes=int(shard_gib * 2**30), disk_check="warn", audit=False, progress_file=progress,
                          host_buffers=max(4, writers + 2), writers=writers, compress=compress)
    t = time.perf_counter()
    with DiskSampler() as disk:
        extraction = Extraction(opts, model=model, tokenizer=None, on_shard_closed=on_closed)
        rc = extraction.run()
        t_end = time.perf_counter()
    log("  " + disk.summary(t))
    if marks:
        log(f"  first durable shard {marks[0][0] - t:.1f} s after the worker started "
            f"({shard_gib:g} GiB shards; model already loaded)")
    doomed.put(None)
    del_thread.join()
    stages = extraction.stage_seconds
    log(f"  stages (s, writers summed): {json.dumps({k: round(v, 1) for k, v in sorted(stages.items())})}"
        f"; wall {t_end - t:.1f} s; {sum(written) / 1e9:.1f} GB written, {sum(written) / (t_end - t) / 1e9:.2f} GB/s"
        + (f"; compression {sum(n for _, n in marks) * len(layers) * 2048 * 2 / max(1, sum(written)):.3f}x"
           if compress else ""))
    total = sum(n for _, n in marks)
    return rc, total / (t_end - t), disk.median_rate(), len(marks)


def run_variants(torch, model, data, args, progress, results) -> None:
    for v in filter(None, args.variants.split(",")):
        parts = v.split(":")
        w, gib, early = (int(x) for x in parts[:3])
        compress = parts[3:] == ["z"]
        os.environ["GPUDECK_EARLY_WRITEBACK"] = str(early)
        _, e2e_v, disk_v, _ = run_worker(torch, model, data, os.path.join(args.out, "wv"), args.budget, True,
                                           progress, w, gib, compress)
        os.environ["GPUDECK_EARLY_WRITEBACK"] = "1"
        key = (f"variant {w} writers, {gib} GiB shards, early writeback {early}"
               + (", --compress" if compress else ""))
        results[key] = (e2e_v, disk_v)
        log(f"worker, local disk, {key[8:]}: end to end {e2e_v:,.0f} tok/s, disk {disk_v / 1e9:.2f} GB/s (median)")


# 27B-class shapes (Qwen3.6-27B's dimensions): "dense" makes every layer full attention
# (Qwen3-shaped), "hybrid" is qwen3_5_text with three of four layers Gated DeltaNet.
BIG = dict(vocab_size=151936, hidden_size=5120, intermediate_size=17408, num_hidden_layers=64,
           num_attention_heads=24, num_key_value_heads=4, head_dim=256, max_position_embeddings=40960,
           tie_word_embeddings=False)
if os.environ.get("GPUDECK_BENCH_TINY"):  # a smoke run of the same code in seconds
    BIG.update(vocab_size=4096, hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
               head_dim=64)
SHAPES = {"dense27b": "qwen3", "hybrid27b": "qwen3_5_text"}
BIG_LAYERS = [1, 16, 32, 48, 63]


def build_big(torch, shape: str, device: str = "cuda"):
    from transformers import AutoModelForCausalLM, Qwen3Config

    if SHAPES[shape] == "qwen3":
        cfg = Qwen3Config(rope_theta=1000000.0, **BIG)
    else:
        from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
        tiny = bool(os.environ.get("GPUDECK_BENCH_TINY"))
        cfg = Qwen3_5TextConfig(linear_num_key_heads=2 if tiny else 16, linear_num_value_heads=4 if tiny else 48,
                                linear_key_head_dim=64 if tiny else 128, linear_value_head_dim=64 if tiny else 128, linear_conv_kernel_dim=4,
                                layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 16, **BIG)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval().requires_grad_(False)
    return model, cfg


def floor_tps(body_params: int) -> float:
    """The floor of issue 25: 2 x body parameters FLOPs per token at 790 TFLOP/s (the H200's
    bf16 matmul rate as lent here), in tokens/s."""
    return FLOOR_FLOPS / (2.0 * body_params)


FLOOR_FLOPS = 790e12


def use_bench_cache(torch, model, cache_dir: str) -> None:
    """The worker's start-up caches (compile_cache.py) for a runner built outside the worker."""
    from gpudeck.agents.workers.extract import compile_cache

    dev = torch.device("cuda")
    key = compile_cache.key_for(model.config, "bfloat16", torch.cuda.get_device_name(dev),
                                "{}.{}".format(*torch.cuda.get_device_capability(dev)))
    d = compile_cache.use(cache_dir, key)
    log(f"start-up cache {d.root if d else 'off'} ({'warm' if d and d.warm else 'cold'})")


# ---------------------------------------------------------------- start-up: process start to first durable shard

def startup_child(args) -> int:
    """One new process's start, as a restarted job's: imports, the model built (random
    weights, so no disk read), the worker on ``2 x batch`` samples with ``--cache-dir``, to
    the first durable shard. Prints one ``STARTUP {json}`` line."""
    t_imports = time.time()
    import torch

    from gpudeck.agents.workers.extract import tuning
    from gpudeck.agents.workers.extract.options import ExtractOptions
    from gpudeck.agents.workers.extract.run import Extraction
    from gpudeck.agents.workers.extract.startup import process_started_at

    started = process_started_at()
    t_torch = time.time()
    cuda = args.device == "cuda"
    model, cfg = build_big(torch, args.shape, args.device)
    if cuda:
        torch.cuda.synchronize()
    t_built = time.time()
    work = os.path.join(args.out, f"startup-{args.shape}-{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    batch = max(1, args.budget // SEQ)
    data = os.path.join(work, "data.jsonl")
    write_data(data, 2 * batch, cfg.vocab_size)
    out = "/dev/shm/xstart" if cuda and os.path.isdir("/dev/shm") else os.path.join(work, "out")
    shutil.rmtree(out, ignore_errors=True)
    progress = os.path.join(work, "progress.json")
    first: list[float] = []
    opts = ExtractOptions(model="random-init", data=data, out=out, layers=BIG_LAYERS, max_tokens_per_batch=args.budget,
                          device=args.device, dtype="bfloat16", compile=cuda, shard_bytes=int(0.5 * 2**30),
                          disk_check="warn", audit=False, progress_file=progress, writers=args.writers,
                          cache_dir=args.cache_dir)
    ext = Extraction(opts, model=model, on_shard_closed=lambda path, entry: first.append(time.time()))
    rc = ext.run()
    t_end = time.time()
    with open(progress) as f:
        prog = json.load(f)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    res = {"shape": args.shape, "rc": rc, "startup_s": prog.get("startup_s"), "phases": prog.get("startup"),
           "cache": prog.get("compile_cache"), "before_script_s": round(t_imports - started, 2),
           "import_torch_s": round(t_torch - t_imports, 2), "build_model_s": round(t_built - t_torch, 2),
           "first_shard_s_bench": round(first[0] - started, 2) if first else None,
           "whole_run_s": round(t_end - started, 2), "samples": 2 * batch, "kernel_tuning": tuning.state()}
    print("STARTUP " + json.dumps(res), flush=True)
    return rc


def _child(argv: list[str], env: dict, log_path: Optional[str]) -> tuple[int, list[str]]:
    """Run this script again in a new process; its output is echoed (and kept)."""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-u", __file__, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        log("  | " + line.rstrip("\n"))
    return proc.wait(), lines


def startup_kinds(shape: str) -> tuple[str, ...]:
    """The starts measured for a shape: the hybrid's kernels autotune (``autotuned``: the kernel
    table off) unless a table pins them (``cold``: the table shipped for this GPU, else the one
    the autotuned run recorded); ``warm``: the cold run's caches, a new process."""
    return ("autotuned", "cold", "warm") if "hybrid" in shape else ("cold", "warm")


def startup_bench(args) -> int:
    """For each shape: a cold start (a fresh cache directory, a new process), a warm one (the
    same directory, a new process), then the steady figures (the usual --shape run, in a
    new process on the warm caches); against the floor (2 x body parameters at 790 TFLOP/s)
    and beside the naive loop."""
    from gpudeck.agents.workers.extract import tuning

    shapes = [x for x in args.startup.split(",") if x]
    gpu = "cpu"
    if args.device == "cuda":
        import torch
        gpu = torch.cuda.get_device_name(0)
    env = dict(os.environ)
    for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        env.pop(var, None)  # each child gets the worker's own (--cache-dir)
    common = ["--budget", str(args.budget), "--writers", str(args.writers), "--out", args.out, "--device", args.device]
    results: dict = {}
    for shape in shapes:
        cache = os.path.join(args.cache_root, shape)
        tuned = os.path.join(args.cache_root, shape + "-autotuned")
        for d in (cache, tuned):
            shutil.rmtree(d, ignore_errors=True)
        for kind in startup_kinds(shape):
            child_env, where = dict(env), cache
            if kind == "autotuned":  # a fresh node without a kernel table: every candidate compiled and timed
                child_env[tuning.ENV], where = "off", tuned
            elif "hybrid" in shape and not tuning.load_table(gpu)[0]:
                recorded = sorted(Path(tuned).glob(f"*/{tuning.RECORD_NAME}"))  # what the autotuned run chose
                if recorded:
                    child_env[tuning.ENV] = str(recorded[0])
            log(f"=== {shape}: {kind} start (cache {where}, a new process, kernel table "
                f"{child_env.get(tuning.ENV) or 'shipped'})")
            t = time.time()
            rc, lines = _child(["--shape", shape, "--startup-child", "--cache-dir", where, *common], child_env, None)
            got = [json.loads(x[len("STARTUP "):]) for x in lines if x.startswith("STARTUP ")]
            results[(shape, kind)] = got[0] if got else {"rc": rc, "startup_s": None}
            log(f"=== {shape} {kind}: rc {rc}, process start to first durable shard "
                f"{results[(shape, kind)].get('startup_s')} s (child's wall {time.time() - t:.0f} s)")
        for table in sorted(Path(tuned).glob(f"*/{tuning.RECORD_NAME}")):
            log(f"=== {shape}: what the autotuned run's kernels chose: {table}")
            if os.environ.get("OUT"):
                shutil.copy(table, os.path.join(os.environ["OUT"], f"{tuning.RECORD_NAME[:-5]}-{shape}.json"))
    steady_shapes = [x for x in (args.steady or "").split(",") if x]
    for shape in steady_shapes:
        log(f"=== {shape}: steady (a new process on the warm cache)")
        argv = ["--shape", shape, "--samples", str(args.samples), "--naive-samples", str(args.naive_samples),
                "--cache-dir", os.path.join(args.cache_root, shape), *common] + (["--profile"] if args.profile else [])
        rc, lines = _child(argv, env, None)
        summary = [x for x in lines if "STEADY " in x]
        results[(shape, "steady")] = json.loads(summary[-1].split("STEADY ", 1)[1]) if summary else {"rc": rc}
    log("")
    log(f"=== start-up and steady, {time.strftime('%Y-%m-%d')}: process start to the first durable shard "
        f"(0.5 GiB shards, random weights built on the GPU, so no weights read from disk)")
    for shape in shapes:
        for kind in startup_kinds(shape):
            r = results[(shape, kind)]
            log(f"{shape:<10} {kind:<5} {r.get('startup_s')!s:>7} s  phases {json.dumps(r.get('phases'))}; "
                f"imports {r.get('import_torch_s')} s, model built {r.get('build_model_s')} s; "
                f"cache {json.dumps(r.get('cache'))}")
    for shape in steady_shapes:
        r = results[(shape, "steady")]
        if "worker" in r:
            naive = r.get("naive") or float("nan")
            log(f"{shape:<10} steady: worker {r['worker']:,.0f} tok/s = {r['worker_floor']:.1%} of the floor "
                f"({r['floor']:,.0f} tok/s = 790 TFLOP/s / (2 x {r['body'] / 1e9:.1f}B)); forward alone "
                f"{r['compute']:,.0f} ({r['compute_floor']:.1%}); naive {naive:,.0f} tok/s "
                f"({naive / r['floor']:.1%}); worker / naive {r['worker'] / naive:.2f}x; "
                f"{r['worker_limit']:.1%} of the measured matmul limit ({r['matmul_limit_tflops']:.0f} TFLOP/s)")
        else:
            log(f"{shape:<10} steady: failed ({json.dumps(r)})")
    print("RESULTS " + json.dumps({f"{a}:{b}": v for (a, b), v in results.items()}), flush=True)
    return 0


def matmul_limit(torch, model, tokens: int) -> tuple[float, str]:
    """The bf16 matmul limit for this model: the FLOP/s of one decoder layer's own linears
    (each kind of layer, weighted by how many there are) run back to back on ``tokens`` rows,
    with nothing else; and a plain 8192^3 GEMM for reference."""
    import torch.nn.functional as F

    def timed(fn, reps: int = 20) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        torch.cuda.synchronize()
        return a.elapsed_time(b) / 1000 / reps

    x = torch.randn(tokens, model.config.hidden_size, device="cuda", dtype=torch.bfloat16)
    flops = seconds = 0.0
    kinds: dict = {}
    for layer in model.model.layers:
        key = tuple(tuple(m.weight.shape) for m in layer.modules() if isinstance(m, torch.nn.Linear))
        kinds[key] = kinds.get(key, 0) + 1
    for key, count in kinds.items():
        ins = {k: torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16) for _, k in key}
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for n, k in key]
        t = timed(lambda: [F.linear(ins[w.shape[1]], w) for w in ws])
        flops += count * sum(2.0 * tokens * n * k for n, k in key)
        seconds += count * t
    del x
    sq = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t_sq = timed(lambda: sq @ sq)
    return flops / seconds, f"the layers' own linears at {tokens} rows; a plain 8192^3 GEMM gives " \
                            f"{2 * 8192 ** 3 / t_sq / 1e12:.0f} TFLOP/s"


def profile_batch(torch, runner, batch: int, vocab: int) -> None:
    """Where one batch's GPU time goes: the top CUDA kernels."""
    from torch.profiler import ProfilerActivity, profile

    ids = torch.randint(0, vocab, (batch, SEQ), device="cuda")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        runner(ids)
        torch.cuda.synchronize()
    log(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=70))


def big_shape(args) -> int:
    """A 27B-class model: the worker's forward alone and end to end (to /dev/shm, or --out),
    against the bf16 matmul limit of the model's own linears, and the naive loop."""
    import torch
    import transformers

    from gpudeck.agents.workers.extract import hybrid
    from gpudeck.agents.workers.extract.model import HiddenStateRunner

    name = torch.cuda.get_device_name()
    log(f"device {name}; torch {torch.__version__}; transformers {transformers.__version__}; "
        f"kernels {hybrid.kernels()}")
    t = time.perf_counter()
    model, cfg = build_big(torch, args.shape)
    torch.cuda.synchronize()
    body = sum(p.numel() for n, p in model.named_parameters() if ".layers." in n)
    log(f"{args.shape}: {cfg.model_type}, body {body / 1e9:.1f}B parameters, built in {time.perf_counter() - t:.0f} s")
    if args.cache_dir:
        use_bench_cache(torch, model, args.cache_dir)
    batch = max(1, args.budget // SEQ)
    limit, how = matmul_limit(torch, model, batch * SEQ)
    log(f"bf16 matmul limit {limit / 1e12:.0f} TFLOP/s ({how})")
    compile_ = True
    t = time.perf_counter()
    runner = HiddenStateRunner(model, BIG_LAYERS, compile=compile_)
    log(f"runner: path {runner.path} ({runner.why_not_fast}); set up in {time.perf_counter() - t:.0f} s")
    need = runner.flop_model().sample_flops(SEQ) / SEQ

    def share(tps: float) -> str:
        return f"{tps * need / 1e12:.0f} TFLOP/s, {tps * need / limit:.1%} of the matmul limit"

    log(f"needed {need / 1e9:.1f} GFLOP/token (layers 1..{max(BIG_LAYERS)}, attention included)")
    results = {}
    t = time.perf_counter()
    runner(torch.randint(0, cfg.vocab_size, (batch, SEQ), device="cuda"))
    torch.cuda.synchronize()
    log(f"first batch (compile included): {time.perf_counter() - t:.0f} s")
    results["compute"] = compute_only(torch, runner, batch, iters=8)
    log(f"compute only, {runner.path}, batch {batch}: {results['compute']:,.0f} tok/s, {share(results['compute'])}")
    if args.profile:
        profile_batch(torch, runner, batch, cfg.vocab_size)
    if "naive" not in args.skip:
        global LAYERS
        saved, LAYERS = LAYERS, BIG_LAYERS
        results["naive"] = naive(torch, model, args.naive_samples, os.path.join(args.out, "naive"), cfg.vocab_size)
        LAYERS = saved
        log(f"naive: {results['naive']:,.0f} tok/s, {share(results['naive'])}")
    out = "/dev/shm/xbench" if os.path.isdir("/dev/shm") and shutil.disk_usage("/dev/shm").free > 40 << 30 \
        else os.path.join(args.out, "w")
    os.makedirs(args.out, exist_ok=True)
    data = os.path.join(args.out, "data.jsonl")
    write_data(data, args.samples, cfg.vocab_size)
    progress = os.path.join(args.out, "progress.json")
    # the worker's first run in a process: what an operator waits for (its runner's set-up, and a
    # compile of any shape the forward-alone batches did not have), on a short dataset
    warm = os.path.join(args.out, "warm.jsonl")
    write_data(warm, 2 * batch, cfg.vocab_size)
    log("worker, first run in this process (cold):")
    run_worker(torch, model, warm, out, args.budget, compile_, progress, args.writers, shard_gib=0.5,
               compress=args.compress, layers=BIG_LAYERS)
    log("worker, measured run:")
    rc, e2e, _, shards = run_worker(torch, model, data, out, args.budget, compile_, progress, args.writers,
                                    shard_gib=0.5, compress=args.compress, layers=BIG_LAYERS)
    shutil.rmtree(out, ignore_errors=True)
    results["worker"] = e2e
    log(f"worker to {out}: rc {rc}, {shards} shards, end to end {e2e:,.0f} tok/s, {share(e2e)}")
    floor = floor_tps(body)
    log("STEADY " + json.dumps({"worker": e2e, "compute": results["compute"], "naive": results.get("naive"),
                                 "floor": floor, "body": body, "worker_floor": e2e / floor,
                                 "compute_floor": results["compute"] / floor, "matmul_limit_tflops": limit / 1e12,
                                 "worker_limit": e2e * need / limit}))
    log("")
    log(f"=== {args.shape} on {name}: worker {e2e:,.0f} tok/s end to end = {e2e / floor:.1%} of the floor "
        f"(2 x {body / 1e9:.1f}B at 790 TFLOP/s = {floor:,.0f} tok/s); {e2e * need / limit:.1%} of the "
        f"matmul limit (forward alone {results['compute'] * need / limit:.1%})"
        + (f"; ratio worker / naive {e2e / results['naive']:.2f}x" if "naive" in results else ""))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=600, help="samples of 2,048 tokens for the measured worker run")
    ap.add_argument("--naive-samples", type=int, default=80)
    ap.add_argument("--budget", type=int, default=32768)
    ap.add_argument("--out", default="/tmp/xbench")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--disk-only", default="", help="THREADSxGIB[,...]: sustained disk probes (early writeback), "
                                                   "then only local-disk worker runs for each --writers-list entry")
    ap.add_argument("--writers-list", default="")
    ap.add_argument("--variants", default="", help="WRITERS:SHARD_GIB:EARLY_WRITEBACK[:z][,...]: more local-disk "
                                                  "worker runs, e.g. 4:4:1,2:1:0,8:1:1:z (z: --compress)")
    ap.add_argument("--compress", action="store_true", help="the main worker runs (disk and /dev/shm) with --compress")
    ap.add_argument("--skip", default="", help="comma list of: disk,naive,attn,compute,shm")
    ap.add_argument("--profile", action="store_true", help="with --shape: the top CUDA kernels of one batch")
    ap.add_argument("--shape", choices=sorted(SHAPES), help="instead: a 27B-class model of that shape against the "
                                                            "bf16 matmul limit (see big_shape)")
    ap.add_argument("--startup", default="", metavar="SHAPES",
                    help="comma list of shapes: for each, a cold start (fresh --cache-root/SHAPE, a new process) and "
                         "a warm one (the same cache, a new process), process start to the first durable shard")
    ap.add_argument("--steady", default="", metavar="SHAPES",
                    help="with --startup: then the steady --shape run of these shapes, each in a new process on "
                         "its warm cache")
    ap.add_argument("--cache-root", default="/tmp/xcache", help="with --startup: the caches' parent directory")
    ap.add_argument("--cache-dir", default="", help="with --shape: the worker's --cache-dir")
    ap.add_argument("--startup-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cuda", help="cuda; cpu only for a smoke run of --startup-child")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if args.startup:
        return startup_bench(args)
    if args.startup_child:
        return startup_child(args)
    if args.shape:
        return big_shape(args)

    import torch
    import transformers

    from gpudeck.agents.workers.extract.model import HiddenStateRunner
    from gpudeck.agents.workers.extract.perf import FlopModel, peak_flops

    os.makedirs(args.out, exist_ok=True)
    name = torch.cuda.get_device_name()
    peak, source = peak_flops(name)
    try:
        import safetensors
        st_version = safetensors.__version__
    except ImportError:
        st_version = "MISSING"
    log(f"device {name}; torch {torch.__version__}; transformers {transformers.__version__}; "
        f"safetensors {st_version}; cpus {os.cpu_count()}; free disk {shutil.disk_usage(args.out).free / 2**30:.0f} GiB")
    log(f"peak {peak / 1e12:.1f} TFLOP/s ({source})")
    disk_bps = 0.0
    if "disk" not in skip:
        for threads, early, direct in ((1, False, False), (1, True, False), (4, False, False), (4, True, False),
                                       (1, False, True), (4, False, True)):
            try:
                bps = disk_write_speed(args.out, threads, 1, early, direct)
            except OSError as exc:
                log(f"disk: {threads} file(s), O_DIRECT {direct}: {exc}")
                continue
            disk_bps = max(disk_bps, bps)
            log(f"disk: {threads} file(s) at once, early writeback {early}, O_DIRECT {direct}: write + fsync "
                f"{bps / 1e9:.2f} GB/s "
                f"(= {bps / (len(LAYERS) * 2048 * 2) / 1e3:.0f}k tok/s of 5-layer hidden states)")

    if args.disk_only:
        for spec in args.disk_only.split(","):
            th, gib = (int(x) for x in spec.rstrip("d").split("x"))
            direct = spec.endswith("d")
            bps = disk_write_speed(args.out, th, gib, not direct, direct)
            log(f"disk, sustained: {th} file(s) x {gib} GiB, {'O_DIRECT' if direct else 'early writeback'}: "
                f"{bps / 1e9:.2f} GB/s "
                f"(= {bps / (len(LAYERS) * 2048 * 2) / 1e3:.0f}k tok/s)")
    model, cfg = build_model(torch, torch.bfloat16)
    if args.writers_list:
        data = os.path.join(args.out, "data.jsonl")
        write_data(data, args.samples, cfg.vocab_size)
        progress = os.path.join(args.out, "progress.json")
        for w in (int(x) for x in args.writers_list.split(",")):
            rc, e2e, disk_w, shards = run_worker(torch, model, data, os.path.join(args.out, f"w{w}"), args.budget,
                                                 True, progress, w)
            log(f"worker, local disk, {w} writer(s): rc {rc}, {shards} shards, end to end {e2e:,.0f} tok/s "
                f"({e2e * len(LAYERS) * 2048 * 2 / 1e9:.2f} GB/s raw), disk {disk_w / 1e9:.2f} GB/s (median)")
        run_variants(torch, model, data, args, progress, {})
        shutil.rmtree(args.out, ignore_errors=True)
        return 0
    n_params = sum(p.numel() for p in model.parameters())
    untied = n_params + (cfg.vocab_size * cfg.hidden_size if cfg.tie_word_embeddings else 0)
    need = FlopModel.from_config(cfg, max(LAYERS)).sample_flops(SEQ) / SEQ
    anchor = 2 * untied + 2 * SEQ * cfg.num_attention_heads * cfg.head_dim * cfg.num_hidden_layers
    log(f"model: {n_params / 1e9:.2f}B parameters ({untied / 1e9:.2f}B counting the LM head apart); "
        f"needed {need / 1e9:.3f} GFLOP/token; anchor convention {anchor / 1e9:.3f} GFLOP/token")

    def mfu(tps: float) -> str:
        return f"MFU {tps * need / peak:.1%} (anchor convention {tps * anchor / peak:.1%})"

    results: dict = {}
    if "attn" not in skip:
        log(f"attention [16x2048, 16 heads / 8 kv, causal]: {attention_backends(torch)}")
    if "naive" not in skip:
        tps = naive(torch, model, args.naive_samples, os.path.join(args.out, "naive"), cfg.vocab_size)
        results["naive"] = tps
        log(f"naive: {tps:,.0f} tok/s, {mfu(tps)}")

    batch = args.budget // SEQ
    if "compute" not in skip:
        r_eager = HiddenStateRunner(model, LAYERS, compile=False)
        for backend in ("flash", "cudnn"):
            os.environ["GPUDECK_SDPA"] = backend
            tps = compute_only(torch, r_eager, batch)
            log(f"compute only, fast path eager, {backend} attention, batch {batch}: {tps:,.0f} tok/s, {mfu(tps)}")
        os.environ.pop("GPUDECK_SDPA")
        t = time.perf_counter()
        r_comp = HiddenStateRunner(model, LAYERS, compile=True)
        r_comp(torch.randint(0, cfg.vocab_size, (batch, SEQ), device="cuda"))
        torch.cuda.synchronize()
        log(f"compile: {time.perf_counter() - t:.0f} s; path {r_comp.path}")
        for b in sorted({batch, batch * 2}):
            tps = compute_only(torch, r_comp, b)
            results[f"compute_b{b}"] = tps
            log(f"compute only, fast path compiled, batch {b}: {tps:,.0f} tok/s, {mfu(tps)}")

    data = os.path.join(args.out, "data.jsonl")
    write_data(data, args.samples, cfg.vocab_size)
    warm = os.path.join(args.out, "warm.jsonl")
    write_data(warm, 3 * batch, cfg.vocab_size)
    progress = os.path.join(args.out, "progress.json")
    run_worker(torch, model, warm, os.path.join(args.out, "w0"), args.budget, True, progress, args.writers,
               compress=args.compress)
    rc, e2e, disk_main, shards = run_worker(torch, model, data, os.path.join(args.out, "w1"), args.budget, True,
                                         progress, args.writers, compress=args.compress)
    with open(progress) as f:
        prog = json.load(f)
    log(f"worker progress.json: tokens/s {prog.get('tokens_per_s') or 0:,.0f}, tflops {prog.get('tflops') or 0:.0f}, "
        f"mfu {prog.get('mfu') or 0:.1%}, bytes {prog.get('bytes_written', 0) / 1e9:.1f} GB, forward {prog.get('forward')}")
    results["worker"] = e2e
    how = f"{args.writers} writers" + (", --compress" if args.compress else "")
    log(f"worker, local disk (compiled, {how}, fsynced): rc {rc}, {shards} shards, "
        f"end to end {e2e:,.0f} tok/s; disk {disk_main / 1e9:.2f} GB/s (median)")
    run_variants(torch, model, data, args, progress, results)
    shm = None
    if "shm" not in skip and os.path.isdir("/dev/shm") and shutil.disk_usage("/dev/shm").free > 12 << 30:
        shm = os.path.join("/dev/shm", "xbench")
        try:
            rc3, e2e3, _, _ = run_worker(torch, model, data, shm, args.budget, True, progress, args.writers,
                                               compress=args.compress)
            results["worker_shm"] = e2e3
            log(f"worker, /dev/shm (RAM; the same pipeline without the disk's limit): end to end {e2e3:,.0f} "
                f"tok/s")
        except Exception as exc:  # a small /dev/shm: report it, keep the other numbers
            log(f"worker, /dev/shm: failed: {type(exc).__name__}: {exc}")
        shutil.rmtree(shm, ignore_errors=True)
    else:
        log("worker, /dev/shm: skipped (absent or under 12 GiB free)")
    shutil.rmtree(args.out, ignore_errors=True)

    log("")
    log("=== extraction on " + name)
    if "naive" in results:
        log(f"naive   (batch 1, LM head, .cpu(), torch.save): {results['naive']:>9,.0f} tok/s  {mfu(results['naive'])}")
    for k in sorted(x for x in results if x.startswith("compute_b")):
        log(f"{k:<47} {results[k]:>9,.0f} tok/s  {mfu(results[k])}")
    if disk_bps:
        log(f"disk ceiling (best write + fsync {disk_bps / 1e9:.2f} GB/s):       "
            f"{disk_bps / (len(LAYERS) * 2048 * 2):>9,.0f} tok/s  {mfu(disk_bps / (len(LAYERS) * 2048 * 2))}")
    if "worker_shm" in results:
        log(f"worker  (to /dev/shm, end to end):              {results['worker_shm']:>9,.0f} tok/s  "
            f"{mfu(results['worker_shm'])}")
    log(f"worker  (local disk, end to end, fsynced{', --compress' if args.compress else ''}): {e2e:>9,.0f} tok/s  "
        f"{mfu(e2e)}")
    for k, (e, st_) in ((k, v) for k, v in results.items() if k.startswith("variant")):
        log(f"  {k}: {e:,.0f} tok/s end to end ({mfu(e)}), disk {st_ / 1e9:.2f} GB/s (median)")
    if "naive" in results:
        log(f"worker ({how}), local disk, end to end: {e2e:,.0f} tok/s, {mfu(e2e)}")
        log(f"ratio worker / naive: {e2e / results['naive']:.2f}x local disk end to end"
            + (f", {results['worker_shm'] / results['naive']:.2f}x to /dev/shm" if "worker_shm" in results else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
