"""`gpudeck doctor`: the node checked before a run, each check one line (ok, warn or fail)
with what was found and the one thing to do about it.

One module per check (as circus's ``commands/``): python.py, torch_cuda.py, sglang_version.py,
nvml.py, model.py (its fits in fit.py, gguf_fit.py and sizing.py), engine.py, disk.py, s3.py,
clock.py, containment.py, limits.py; base.py holds what they share and runner.py runs them.
This module answers the op: it picks the checks the node's jobs call for and runs them.

The agent answers ``ops.Doctor`` here, in a thread of its own (the op is not ``on_loop``), so
ticks go on meanwhile. Each check runs in a thread of its own with its own timeout: a check
that hangs (a stat on a dead NFS mount, an S3 endpoint that never answers) becomes a failed
line that says so, and the others are still reported. The imports (torch, then SGLang) run in
subprocesses of the interpreter the jobs will use, one after the other and each killed at its
timeout, so that one import's time is not inflated by the other's.

The checks are against the jobs the fleet file declares for this node (the supervisor's
``declared`` specs, sent by the console's ``configure``). What the verdicts mean:

- *NVML* absent is a fail when a job of the node needs a GPU (it lists ``gpus``, or it is an
  extract job on CUDA or an SGLang server), and a warning otherwise: a node of generate jobs
  (HTTP clients of servers elsewhere), or the operator's laptop, runs without one.
- *torch* absent is a fail when a job needs it (extract, sglang-server), else a warning; an
  import slower than ``import_warn_s`` is a warning with its time (a venv on a network file
  system: every start and restart pays it).
- *model*: the weights (the safetensors index's ``total_size``, else the files' sizes) and the
  KV cache (from config.json) against the GPUs' memory: rough, and the line says what it
  assumed (SGLang's memory fraction, the KV cache's dtype, the context length). A hybrid
  model (``layer_types`` or ``full_attention_interval``: Qwen3-Next, Qwen3.5/3.6) holds KV
  only in its attention layers, and a recurrent state per running request in its linear ones;
  the fit takes SGLang's state pool (its ``--mamba-*`` and ``--max-running-requests`` flags,
  else its own split) out of the room before the KV cache. A llama-server job's GGUF
  (gguf_fit.py): its tensors and the KV cache of its ``slots`` x ``context``, read with the
  ``gguf`` package where the agent's python has it. A model a ``stage`` puts in place at launch
  is read at the stage's local source; one staged from S3 is said to be, and not read.
- *sglang*: the import, and the version against the flags the jobs pass that SGLang has
  only since a release (``SGLANG_FLAG_SINCE``).
- *engine*: a ``llama-server`` job's program runs (its ``--version``) and its GGUF is a file (or a
  stage's copy, made at launch).
- *disk*: the free space of the output's file system against the plan's projected bytes
  (``OUT/plan.json``), else the free space alone; an output directory that cannot be made or
  written is a fail.
- *s3*: credentials found (never printed) and a HEAD of the bucket.
- *clock*: this node's clock against the console's time in the op (transit included).
"""


from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from ...contract import ops
from ...contract.jobs import JobKind, JobSpec
from ...contract.ops import Check
from ...jobs.envs import EnvMissing, check_env, resolve as env_resolve
from ...jobs.backend import GpuReader, JobBackend
from ...jobs.contain import cgroup2_mount
from ...staging.copies import check_staged
from .base import FAIL, GIB, OK, WARN, Thresholds, model_of, needs_gpu, needs_torch
from .clock import check_clock
from .containment import check_containment
from .disk import check_disk
from .engine import check_program
from .gguf_fit import check_gguf, gguf_fit, gguf_kv, read_gguf
from .imports import SLOW_FIX, timed_import
from .limits import check_limits
from .model import check_model, read_config, weight_bytes
from .nvml import nvml_verdict, probe_nvml
from .python import check_python
from .runner import Task, run_checks
from .s3 import check_s3
from .sglang_version import SGLANG_FLAG_SINCE, check_sglang, sglang_verdict
from .sizing import (DEFAULT_LLAMA_SLOTS, RecurrentState, StatePool, kv_bytes_per_token, layer_layout,
                     llama_server_state_pool, recurrent_state, sglang_ssm_dtype, sglang_state_pool)
from .torch_cuda import _TORCH, torch_verdict

__all__ = ["DEFAULT_LLAMA_SLOTS", "FAIL", "GIB", "OK", "RecurrentState", "SGLANG_FLAG_SINCE", "SLOW_FIX",
           "StatePool", "Task", "Thresholds", "WARN", "check_clock", "check_containment", "check_disk",
           "check_gguf", "check_limits", "check_model", "check_program", "check_python", "check_s3",
           "check_sglang", "examine", "gguf_fit", "gguf_kv", "kv_bytes_per_token", "layer_layout",
           "llama_server_state_pool", "model_of", "needs_gpu", "needs_torch", "nvml_verdict", "probe_nvml",
           "read_config", "read_gguf", "recurrent_state", "run_checks", "sglang_ssm_dtype",
           "sglang_state_pool", "sglang_verdict", "timed_import", "torch_verdict", "weight_bytes"]


def _python_of(home: Path, python: str) -> Callable[[JobSpec], str]:
    """A job's interpreter: its python_env's python (agents/jobs/envs.py), else its own or the agent's."""
    def py_of(s: JobSpec) -> str:
        try:
            return env_resolve(s, home, python)[0]
        except EnvMissing:
            return python  # its own `env` line fails, saying so
    return py_of


def _imports_task(specs: list[JobSpec], python: str, py_of: Callable[[JobSpec], str], th: Thresholds) -> Task:
    """torch once per interpreter the jobs need it from (the agent's when none does), then
    SGLang once per interpreter of the sglang-server jobs: one task, one import at a time."""
    torch_by: dict[str, list[str]] = {}  # interpreter -> the jobs that need torch from it
    for s in specs:
        if needs_torch(s):
            torch_by.setdefault(py_of(s), []).append(s.name)
    cuda_jobs = {s.name for s in specs if needs_gpu(s) and needs_torch(s)}
    sglang_by: dict[str, list[JobSpec]] = {}
    for s in specs:
        if s.kind is JobKind.SGLANG_SERVER and not s.command:
            sglang_by.setdefault(py_of(s), []).append(s)

    def imports() -> list[Check]:
        out = []
        for py, jobs in (torch_by or {python: []}).items():
            said, why = timed_import(py, _TORCH, th.timeout_s)
            out.append(torch_verdict(py, said, why, jobs, [j for j in jobs if j in cuda_jobs], th))
        for py, sglang_jobs in sglang_by.items():
            out.append(check_sglang(py, sglang_jobs, th))
        return out

    return "imports", th.timeout_s * (len(torch_by or [1]) + len(sglang_by)) + 5.0, imports


def _gpu_readers(specs: list[JobSpec], gpu: GpuReader) -> tuple[Callable[[], list[Check]],
                                                                 Callable[[], list[tuple[str, float]]]]:
    """The nvml check, and the GPUs' totals for the model's fit: the agent's poll's, else NVML's
    (probed once, by whichever asks first)."""
    simulated = gpu.simulated
    probed: dict[str, Any] = {}

    def nvml() -> list[Check]:
        if simulated:
            return [nvml_verdict(None, "", "", [], simulated=True)]
        found, why, fix = probe_nvml()
        probed["found"] = found
        return [nvml_verdict(found, why, fix, [s.name for s in specs if needs_gpu(s)],
                             polling_off=found is not None and not gpu.totals and bool(gpu.error))]

    def totals() -> list[tuple[str, float]]:
        if gpu.totals:
            return list(gpu.totals)
        found = probed.get("found") or (None if simulated else probe_nvml()[0])
        return list(found["totals"]) if found else []

    return nvml, totals


def _job_tasks(specs: list[JobSpec], jobs: JobBackend, home: Path, totals: Callable[[], list[tuple[str, float]]],
               th: Thresholds) -> list[Task]:
    """The checks of each job, by check: model, engine, disk, s3, then each python_env once."""
    quick = th.quick_timeout_s

    # each check of one job (or one python_env), run when its task comes: the GPUs' totals then
    def model(s: JobSpec) -> Callable[[], list[Check]]:
        return lambda: [check_model(s, jobs.workdir, totals(), th)]

    def engine(s: JobSpec) -> Callable[[], list[Check]]:
        return lambda: [check_program(s, jobs.workdir, quick)]

    def disk(s: JobSpec) -> Callable[[], list[Check]]:
        return lambda: [check_disk(s, jobs.workdir, th)]

    def s3(s: JobSpec) -> Callable[[], list[Check]]:
        return lambda: [check_s3(s)]

    def env_of(env: str, users: list[str]) -> Callable[[], list[Check]]:
        return lambda: [check_env(home, env, users, quick)]

    tasks: list[Task] = []
    for s in specs:
        if model_of(s):
            tasks.append(("model", quick, model(s)))
    for s in specs:
        if s.kind is JobKind.LLAMA_SERVER and not s.command:
            tasks.append(("engine", quick, engine(s)))
    for s in specs:
        if s.worker is not None and s.worker.out:
            tasks.append(("disk", quick, disk(s)))
    for s in specs:
        if s.worker is not None and s.worker.s3:
            tasks.append(("s3", quick, s3(s)))
    by_env: dict[str, list[str]] = {}  # python_env -> its jobs (agents/jobs/envs.py)
    for s in specs:
        if s.python_env:
            by_env.setdefault(s.python_env, []).append(s.name)
    for env, users in by_env.items():
        tasks.append(("env", th.timeout_s, env_of(env, users)))
    return tasks


def _node_checks(op: ops.Doctor, jobs: JobBackend, home: Path, received: float, th: Thresholds) -> list[Check]:
    """The node's own lines, quick enough to run in place: clock, containment, limits, staged copies."""
    checks = []
    if op.console_time is not None:
        checks.append(check_clock(op.console_time, received, th))
    contained = jobs.containment()  # None: a scheduler contains the jobs (their nodes' own)
    if contained is not None:
        checks.append(check_containment(contained.mode, contained.parent,
                                        os.environ.get("GPUDECK_CONTAINMENT") == "token", cgroup2_mount()))
    checks += check_limits(th=th)
    checks.append(check_staged(home))  # the copies stages made here (agents/staging/copies.py)
    return checks


def examine(op: ops.Doctor, jobs: JobBackend, gpu: GpuReader, node: str, home: Path) -> ops.DoctorReport:
    """The ``doctor`` op: every check of the node against its declared jobs."""
    received = time.time()  # first: the clock is compared against the console's at once
    th = Thresholds(import_warn_s=op.import_warn_s, timeout_s=op.timeout_s,
                    quick_timeout_s=min(op.timeout_s, Thresholds.quick_timeout_s))
    specs = sorted(jobs.declared().values(), key=lambda s: s.name)
    python = jobs.python
    quick = th.quick_timeout_s
    nvml, totals = _gpu_readers(specs, gpu)
    tasks: list[Task] = [("python", quick, lambda: [check_python(op.venv, python, quick)]),
                         _imports_task(specs, python, _python_of(home, python), th),
                         ("nvml", quick, nvml)]
    checks = run_checks(tasks + _job_tasks(specs, jobs, home, totals, th))
    checks += _node_checks(op, jobs, home, received, th)
    return ops.DoctorReport(node=node, checks=checks, at=time.time())
