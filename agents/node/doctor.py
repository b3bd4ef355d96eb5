"""`gpudeck doctor`: the node checked before a run, each check one line (ok, warn or fail)
with what was found and the one thing to do about it.

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
  else its own split) out of the room before the KV cache.
- *sglang*: the import, and the version against the flags the jobs pass that SGLang has
  only since a release (``SGLANG_FLAG_SINCE``).
- *engine*: a ``llama-server`` job's program runs (its ``--version``) and its GGUF is a file.
- *disk*: the free space of the output's file system against the plan's projected bytes
  (``OUT/plan.json``), else the free space alone; an output directory that cannot be made or
  written is a fail.
- *s3*: credentials found (never printed) and a HEAD of the bucket.
- *clock*: this node's clock against the console's time in the op (transit included).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import urlsplit, urlunsplit

from ..jobs.contain import cgroup2_mount
from ..contract import VERSION, ops
from ..contract.documents import PLAN_FILE, PlanDoc, MAX_PLAN_BYTES, read_document
from ..contract.jobs import JobKind, JobSpec
from ..contract.needs import Need, fix_line, program_path, program_problem
from ..contract.ops import Check
from ..contract.units import human_bytes
from ..contract.vocab import Verdict
from ..jobs.backend import GpuReader, JobBackend
from ..envs import EnvMissing, check_env, resolve as env_resolve
from ..staging.copies import check_staged

log = logging.getLogger("agents")

OK, WARN, FAIL = Verdict.OK, Verdict.WARN, Verdict.FAIL
GIB = 2**30


@dataclass(frozen=True)
class Thresholds:
    """Where a figure turns a line into a warning or a failure."""

    import_warn_s: float = 20.0
    timeout_s: float = 120.0  # the imports' (a subprocess each)
    quick_timeout_s: float = 30.0  # the other checks': a stat, a HEAD, a config file
    skew_warn_s: float = 2.0  # event times and "since" drift apart
    skew_fail_s: float = 300.0  # minutes off: deadlines and ETAs lie; at 15 min S3 refuses signed requests
    nofile_warn: int = 65536  # SGLang, a generate job with many connections, shards open at once
    nofile_fail: int = 1024
    nproc_warn: int = 4096  # threads count against it: torch and SGLang start hundreds
    nproc_fail: int = 256
    disk_warn_bytes: int = GIB  # with no plan: under this much free is a warning
    mem_fraction: float = 0.88  # SGLang's --mem-fraction-static when a job does not set it (it picks its own)


# ---------------------------------------------------------------- what the jobs need


def needs_torch(spec: JobSpec) -> bool:
    return not spec.command and spec.kind in (JobKind.EXTRACT, JobKind.SGLANG_SERVER)


def needs_gpu(spec: JobSpec) -> bool:
    if spec.gpus:
        return True
    if not needs_torch(spec):
        return False
    return spec.kind is JobKind.SGLANG_SERVER or str(getattr(spec.options, "device", "cuda")).startswith("cuda")


def model_of(spec: JobSpec) -> Optional[str]:
    if spec.kind is JobKind.EXTRACT:
        return getattr(spec.options, "model", None) or spec.model
    if spec.kind is JobKind.SGLANG_SERVER and not spec.command:
        return spec.model
    return None


def _job_path(path: str, spec: JobSpec, job_dir: Callable[[str], Path]) -> str:
    """A path of the job's as the job sees it: relative ones from its cwd (else its state directory)."""
    path = os.path.expanduser(path)
    if not os.path.isabs(path):
        path = os.path.join(os.path.expanduser(spec.cwd) if spec.cwd else str(job_dir(spec.name)), path)
    return path


def _who(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names)


# ---------------------------------------------------------------- python and the venv


def check_python(venv: str, agent_python: str, timeout_s: float) -> Check:
    me = f"{agent_python} (Python {platform.python_version()})"
    if sys.version_info < (3, 10):
        return Check("python", FAIL, f"the agent runs {me}; gpudeck needs Python 3.10 or newer",
                     "set python = \"/path/to/python3.10+\" on the node, then gpudeck deploy")
    if not venv:
        return Check("python", OK, f"the agent runs {me}, gpudeck {VERSION}")
    vpy = Path(os.path.expanduser(venv)) / "bin" / "python"
    if not vpy.exists():
        return Check("python", WARN, f"no gpudeck venv at {venv} ({vpy} is absent); the agent runs {me}",
                     "gpudeck deploy (it makes the venv and installs this version and what the jobs need)")
    script = "import platform, json\nfrom gpudeck.agents.contract import VERSION\n" \
             "print(json.dumps([platform.python_version(), VERSION]))"
    try:
        r = subprocess.run([str(vpy), "-c", script], capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Check("python", FAIL, f"{vpy} did not answer within {timeout_s:g} s",
                     f"look at the file system of {venv} (a dead mount?), then gpudeck deploy")
    except OSError as exc:
        return Check("python", FAIL, f"{vpy} does not run: {exc.strerror or exc}",
                     f"remove {venv} and run gpudeck deploy (a venv made by another python, since removed?)")
    said = _last_json(r.stdout)
    if r.returncode != 0 or not isinstance(said, list):
        why = (r.stderr or r.stdout).strip().splitlines()
        return Check("python", FAIL, f"{vpy} cannot import gpudeck" + (f": {why[-1]}" if why else ""),
                     "gpudeck deploy (it installs this version into the venv)")
    pyv, version = said
    if version != VERSION:
        return Check("python", WARN, f"venv {venv}: Python {pyv}, gpudeck {version}, not this console's {VERSION}",
                     "gpudeck deploy")
    runs = "the agent runs from it" if os.path.realpath(agent_python).startswith(
        os.path.realpath(os.path.expanduser(venv))) else f"the agent runs {agent_python}"
    return Check("python", OK, f"venv {venv}: Python {pyv}, gpudeck {version}; {runs}")


def _last_json(text: str) -> Any:
    """The last line of ``text`` that is JSON (what a module prints on import comes before)."""
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


# ---------------------------------------------------------------- torch, CUDA, SGLang

_TORCH = r"""
import json, sys, time
out = {}
t = time.perf_counter()
try:
    import torch
except BaseException as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
    out["missing"] = isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "torch"
    print(json.dumps(out))
    sys.exit(0)
out["import_s"] = time.perf_counter() - t
out["version"] = str(getattr(torch, "__version__", "?"))
out["cuda_build"] = getattr(getattr(torch, "version", None), "cuda", None)
t = time.perf_counter()
try:
    out["cuda"] = bool(torch.cuda.is_available())
    if out["cuda"]:
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        out["devices"] = torch.cuda.device_count()
        out["device"] = torch.cuda.get_device_name(0)
except BaseException as exc:
    out["cuda"] = False
    out["cuda_error"] = f"{type(exc).__name__}: {exc}"
out["cuda_s"] = time.perf_counter() - t
print(json.dumps(out))
"""

_SGLANG = r"""
import json, sys, time
t = time.perf_counter()
try:
    import sglang
except BaseException as exc:
    missing = isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "sglang"
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}", "missing": missing}))
    sys.exit(0)
print(json.dumps({"import_s": time.perf_counter() - t, "version": str(getattr(sglang, "__version__", "?"))}))
"""

SLOW_FIX = ("every start and restart pays this; a venv on a network file system is the usual cause: "
            "put it on local disk (gpudeck deploy with the node's venv = \"/local/path\"), or see "
            "{python} -X importtime -c 'import {module}'")


def timed_import(python: str, script: str, timeout_s: float) -> tuple[Optional[dict], str]:
    """What ``script`` printed (a JSON object), or None and why it printed none."""
    try:
        r = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"did not finish within {timeout_s:g} s"
    except OSError as exc:
        return None, f"{python} does not run: {exc.strerror or exc}"
    said = _last_json(r.stdout)
    if not isinstance(said, dict):
        tail = (r.stderr or r.stdout).strip().splitlines()
        return None, f"{python} exited with {r.returncode}" + (f": {tail[-1]}" if tail else "")
    return said, ""


def torch_verdict(python: str, said: Optional[dict], why: str, needed_by: list[str], cuda_by: list[str],
                  th: Thresholds) -> Check:
    """The torch line from what the subprocess said (``said``) or why it said nothing (``why``)."""
    needed = f"needed by {_who(needed_by)}" if needed_by else "no job of this node needs it"
    bad = FAIL if needed_by else OK  # what no job needs is a note, never a warning
    if said is None:
        timed_out = why.startswith("did not finish")
        return Check("torch", bad, f"{python}: import torch {why} ({needed})",
                     SLOW_FIX.format(python=python, module="torch") if timed_out else
                     "set python = \"/path/to/bin/python\" on the job, or gpudeck deploy")
    if "error" in said:
        fix = fix_line(Need("torch", False, "torch"), python) if said.get("missing") else \
            f"{python} -c 'import torch' shows the whole error; reinstall torch there (gpudeck deploy)"
        return Check("torch", bad, f"{python}: import torch failed: {said['error']} ({needed})", fix)
    took, cuda_s = float(said.get("import_s", 0.0)), float(said.get("cuda_s", 0.0))
    head = f"{python}: torch {said.get('version')} imported in {took:.1f} s"
    if said.get("cuda"):
        head += f"; CUDA ready in {cuda_s:.1f} s ({said.get('devices')} GPU(s), {said.get('device')})"
    elif said.get("cuda_error"):
        head += f"; CUDA failed to start: {said['cuda_error']}"
    else:
        build = said.get("cuda_build")
        head += "; CUDA not available" + (f" (torch built for CUDA {build})" if build else " (a CPU build of torch)")
    if not said.get("cuda") and cuda_by:
        cpu = not said.get("cuda_build")
        return Check("torch", FAIL, f"{head}; CUDA needed by {_who(cuda_by)}",
                     f"{python} -m pip install torch from a CUDA index (https://pytorch.org/get-started)" if cpu
                     else "the driver: see the nvml line (nvidia-smi must work)")
    if took > th.import_warn_s or cuda_s > th.import_warn_s:
        which = "import" if took > th.import_warn_s else "CUDA start"
        return Check("torch", WARN if needed_by else OK, f"{head}: the {which} is slow (over {th.import_warn_s:g} s)"
                     + ("" if needed_by else f" ({needed})"),
                     SLOW_FIX.format(python=python, module="torch"))
    if not said.get("cuda") and not cuda_by:
        return Check("torch", WARN if needed_by else OK, f"{head} ({needed})",
                     "nothing to do unless a GPU job will run here")
    return Check("torch", OK, head)


# The first SGLang release whose argument parser has each flag that sizes a hybrid model's state
# pool (read from the sglang wheels on PyPI: server_args.py of 0.5.1 has none of them, 0.5.2 the
# first two, 0.5.4 the third). An older SGLang refuses the job's command line at its start.
SGLANG_FLAG_SINCE: dict[str, tuple[int, ...]] = {
    "--max-mamba-cache-size": (0, 5, 2),
    "--mamba-ssm-dtype": (0, 5, 2),
    "--mamba-full-memory-ratio": (0, 5, 4),
}


def _release(version: str) -> Optional[tuple[int, ...]]:
    """``"0.5.1.post3"`` -> ``(0, 5, 1)``; None for a version that does not start with one."""
    m = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(x) for x in m.group(0).split(".")) if m else None


def _flags(args: list[str]) -> list[str]:
    """The flags of an argv, ``--flag=value`` as ``--flag``, in order, once each."""
    return list(dict.fromkeys(a.split("=", 1)[0] for a in args if a.startswith("--")))


def sglang_verdict(python: str, jobs: list[str], said: Optional[dict], why: str, th: Thresholds,
                   args: Optional[dict[str, list[str]]] = None) -> Check:
    """The sglang line from what the import said (``said``) or why it said nothing (``why``);
    ``args``: each job's SGLang arguments, whose flags are checked against the version."""
    job = jobs[0] if len(jobs) == 1 else None
    if said is None:
        fix = SLOW_FIX.format(python=python, module="sglang") if why.startswith("did not finish") else \
            "set python = \"/path/to/bin/python\" on the job, the interpreter that has SGLang"
        return Check("sglang", FAIL, f"{python}: import sglang {why} (for {_who(jobs)})", fix, job=job)
    if "error" in said:
        fix = fix_line(Need("sglang", True, "SGLang"), python) if said.get("missing") else \
            f"{python} -c 'import sglang' shows the whole error"
        return Check("sglang", FAIL, f"{python}: import sglang failed: {said['error']} (for {_who(jobs)})", fix,
                     job=job)
    took = float(said.get("import_s", 0.0))
    version = str(said.get("version"))
    head = f"{python}: sglang {version} imported in {took:.1f} s (for {_who(jobs)})"
    have = _release(version)
    used = [(name, flag, SGLANG_FLAG_SINCE[flag]) for name in jobs for flag in _flags((args or {}).get(name, []))
            if flag in SGLANG_FLAG_SINCE]
    too_new = [(name, flag, since) for name, flag, since in used if have is not None and have < since]
    if too_new:
        dotted = ".".join
        need = dotted(map(str, max(since for _, _, since in too_new)))
        return Check("sglang", FAIL, head + "; " + "; ".join(
            f"{name!r} uses {flag}, which SGLang has since {dotted(map(str, since))}" for name, flag, since in too_new),
                     f"{python} -m pip install 'sglang>={need}' (gpudeck never installs an engine), or set python = "
                     f"\"/path/to/bin/python\" on the job to an interpreter with a newer SGLang", job=job)
    if used and have is None:
        head += f"; its version says no release number: the flags {', '.join(sorted({f for _, f, _ in used}))} " \
                f"are not checked against it"
    if took > th.import_warn_s:
        return Check("sglang", WARN, f"{head}: slow (over {th.import_warn_s:g} s)",
                     SLOW_FIX.format(python=python, module="sglang"), job=job)
    return Check("sglang", OK, head, job=job)


def check_sglang(python: str, specs: list[JobSpec], th: Thresholds) -> Check:
    """A timed ``import sglang`` in a subprocess of ``python``, the interpreter of ``specs`` (its
    sglang-server jobs), and its verdict."""
    said, why = timed_import(python, _SGLANG, th.timeout_s)
    return sglang_verdict(python, [s.name for s in specs], said, why, th, {s.name: list(s.args) for s in specs})


# ---------------------------------------------------------------- the driver and NVML


def probe_nvml() -> tuple[Optional[dict], str, str]:
    """(what NVML says, or None; why not; the fix)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed for the agent's python", "gpudeck deploy (a base dependency)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        text = str(exc)
        module = os.path.exists("/proc/driver/nvidia/version")
        if "Library Not Found" in text or "not found" in text.lower():
            why = "libnvidia-ml.so not found: no NVIDIA driver here" + (
                " (yet the kernel module is loaded: its user-space library is missing)" if module else "")
            return None, why, "install the NVIDIA driver (the distribution's nvidia-driver-NNN, or the CUDA " \
                              "repository's cuda-drivers) and reboot; nvidia-smi must work"
        if "Driver Not Loaded" in text:
            return None, "the NVIDIA kernel module is not loaded", "sudo modprobe nvidia, or reboot after the " \
                                                                   "driver's install"
        if "Mismatch" in text:
            return None, f"NVML: {text} (the library was upgraded, the kernel module was not)", "reboot"
        return None, f"NVML: {text}", "nvidia-smi says more; reinstall the driver if it fails too"
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        except pynvml.NVMLError:
            cuda = None
        count = pynvml.nvmlDeviceGetCount()
        totals = []
        for i in range(count):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            totals.append((name.decode() if isinstance(name, bytes) else str(name),
                           pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**20))
    except pynvml.NVMLError as exc:
        return None, f"NVML started but cannot read the GPUs: {exc}", "nvidia-smi says more"
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return {"driver": driver.decode() if isinstance(driver, bytes) else str(driver),
            "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None, "totals": totals}, "", ""


def nvml_verdict(found: Optional[dict], why: str, fix: str, needed_by: list[str], simulated: bool = False,
                 polling_off: bool = False) -> Check:
    if simulated:
        return Check("nvml", WARN, "the GPUs are simulated (--simulate-gpus): NVML and the driver are not used",
                     "nothing to do in a demo; a real node runs without --simulate-gpus")
    if found is None:
        needed = f"needed by {_who(needed_by)}" if needed_by else "no job of this node needs a GPU"
        return Check("nvml", FAIL if needed_by else OK, f"{why} ({needed})", fix)  # a note where no job needs it
    totals = found["totals"]
    if not totals:
        return Check("nvml", FAIL if needed_by else WARN, f"driver {found['driver']}: NVML sees no GPU",
                     "nvidia-smi -L; a GPU lost from the bus needs a reboot (dmesg shows Xid 79)")
    kinds = sorted({name for name, _ in totals})
    detail = (f"driver {found['driver']}" + (f" (CUDA {found['cuda']})" if found.get("cuda") else "")
              + f", {len(totals)} GPU(s): {', '.join(kinds)}")
    if polling_off:
        return Check("nvml", WARN, detail + "; but the agent does not poll them (nvml = false for this node)",
                     "set nvml = true on the node (or leave it off on purpose: no GPU figures in the console)")
    return Check("nvml", OK, detail)


# ---------------------------------------------------------------- the model and the GPUs

_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8_e4m3fn": 1,
                "float8": 1, "fp8": 1, "int8": 1}
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def read_config(model_dir: Path) -> dict:
    """config.json, with a multimodal model's ``text_config`` over its top level."""
    cfg = json.loads((model_dir / "config.json").read_text())
    if not isinstance(cfg, dict):
        raise ValueError("config.json is not a JSON object")
    text = cfg.get("text_config")
    return {**cfg, **text} if isinstance(text, dict) else cfg


def weight_bytes(model_dir: Path) -> tuple[Optional[int], str]:
    """The weights' bytes on disk, and where the figure comes from."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        try:
            total = json.loads(index.read_text())["metadata"]["total_size"]
            return int(total), "the safetensors index's total_size"
        except (ValueError, KeyError, TypeError):
            pass
    for pattern in ("*.safetensors", "pytorch_model*.bin"):
        files = list(model_dir.glob(pattern))
        if files:
            return sum(f.stat().st_size for f in files), f"the sizes of its {pattern} files"
    return None, ""


def _arg(args: list[str], *flags: str) -> Optional[str]:
    for i, a in enumerate(args):
        for flag in flags:
            if a == flag and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(flag + "="):
                return a.split("=", 1)[1]
    return None


def _nth(n: int) -> str:
    return {1: "layer", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def layer_layout(cfg: dict) -> Optional[tuple[list[str], str]]:
    """Each layer's type (transformers' names: ``full_attention``, ``linear_attention``, ...) and
    where the list comes from, for a model whose config says it: ``layer_types``, else
    ``full_attention_interval`` (every Nth layer full attention, the others linear, as
    transformers' Qwen3-Next and Qwen3.5 configs build ``layer_types`` from it). None for a
    model that says neither: every layer is attention."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types and all(isinstance(t, str) for t in types):
        return list(types), "layer_types"
    layers = int(cfg.get("num_hidden_layers") or 0)
    interval = cfg.get("full_attention_interval")
    said = f"every {_nth(int(interval))}: full_attention_interval" if isinstance(interval, int) and interval > 0 \
        else ""
    if not said and cfg.get("linear_num_value_heads"):  # linear layers, and no word of where: transformers' default
        interval, said = 4, "every 4th assumed: transformers' default full_attention_interval"
    if not said or not layers:
        return None
    return ["full_attention" if (i + 1) % int(interval) == 0 else "linear_attention" for i in range(layers)], said


def _holds_kv(layer_type: str) -> bool:
    """An attention layer (full, sliding, chunked) holds a KV cache; a linear-attention, mamba or
    conv layer holds a state of fixed size instead."""
    return "attention" in layer_type and "linear" not in layer_type


def kv_bytes_per_token(cfg: dict, kv_dtype_bytes: int) -> tuple[int, str]:
    """The KV cache's bytes per token over the layers that hold one (every layer, or the
    attention layers of a hybrid: :func:`layer_layout`), and the formula said in words."""
    layout = layer_layout(cfg)
    if layout:
        types, source = layout
        kv_types = [t for t in types if _holds_kv(t)]
        which = "full-attention" if set(kv_types) <= {"full_attention"} else "attention"
        layers = len(kv_types)
        counted = f"{layers} {which} layers of {len(types)} ({source})"
    else:
        layers = int(cfg.get("num_hidden_layers") or 0)
        counted = f"{layers} layers"
    if cfg.get("kv_lora_rank"):  # MLA (DeepSeek): one compressed latent per layer, the same on every GPU
        width = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)
        return layers * width * kv_dtype_bytes, f"MLA: {counted} x {width} x {kv_dtype_bytes} B"
    heads = int(cfg.get("num_attention_heads") or 1)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or int(cfg.get("hidden_size") or 0) // heads)
    return (2 * layers * kv_heads * head_dim * kv_dtype_bytes,
            f"2 x {counted} x {kv_heads} KV heads x {head_dim} x {kv_dtype_bytes} B")


@dataclass(frozen=True)
class RecurrentState:
    """What one request holds in a hybrid model's linear-attention layers, whatever its length."""

    per_request: int  # bytes over every linear layer, before tensor parallelism splits its heads
    formula: str  # said in words
    uncounted: str = ""  # layers that hold no KV cache and whose state is not counted, said in words


def recurrent_state(cfg: dict, ssm_bytes: int, conv_bytes: int) -> Optional[RecurrentState]:
    """A request's state in the Gated DeltaNet layers (``linear_attention``; the config's
    ``linear_*`` keys, as transformers' Qwen3-Next and Qwen3.5 configs name them): per layer the
    SSM state, value heads x key head dim x value head dim in ``ssm_bytes``, and the causal
    conv's, (2 x key heads x key head dim + value heads x value head dim) x (kernel - 1) in
    ``conv_bytes``. None for a model without linear layers."""
    layout = layer_layout(cfg)
    if not layout:
        return None
    types = [t for t in layout[0] if not _holds_kv(t)]
    if not types:
        return None
    linear = types.count("linear_attention")
    keys = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
            "linear_conv_kernel_dim")
    shape = [cfg.get(k) for k in keys]
    others = sorted(set(types) - {"linear_attention"})
    uncounted = [f"{types.count(t)} {t} layers" for t in others]
    if linear and not all(isinstance(v, int) and v > 0 for v in shape):
        uncounted.insert(0, f"{linear} linear_attention layers (no {', '.join(keys)} in the config)")
        linear = 0
    note = f"the state of {' and '.join(uncounted)} is not counted" if uncounted else ""
    if not linear:
        return RecurrentState(0, "", note)
    key_heads, value_heads, key_dim, value_dim, kernel = (int(v) for v in shape)  # type: ignore[arg-type]
    ssm = value_heads * key_dim * value_dim * ssm_bytes
    conv_dim = 2 * key_heads * key_dim + value_heads * value_dim
    conv = conv_dim * (kernel - 1) * conv_bytes
    return RecurrentState(
        linear * (ssm + conv),
        f"{linear} linear-attention layers x (SSM {value_heads} x {key_dim} x {value_dim} x {ssm_bytes} B = "
        f"{human_bytes(ssm, binary=True)} + conv {conv_dim} x {kernel - 1} x {conv_bytes} B = "
        f"{human_bytes(conv, binary=True)})", note)


def sglang_ssm_dtype(args: list[str], env: dict[str, str], cfg: dict) -> tuple[str, str]:
    """The SSM state's dtype as SGLang picks it, and where from: ``--mamba-ssm-dtype`` (which
    sets SGLANG_MAMBA_SSM_DTYPE), the job's SGLANG_MAMBA_SSM_DTYPE, the config's
    ``mamba_ssm_dtype``, else float32 (sglang/srt/configs/mamba_utils.py)."""
    for value, said in ((_arg(args, "--mamba-ssm-dtype"), "--mamba-ssm-dtype"),
                        (env.get("SGLANG_MAMBA_SSM_DTYPE"), "the job's SGLANG_MAMBA_SSM_DTYPE"),
                        (cfg.get("mamba_ssm_dtype"), "the config's mamba_ssm_dtype")):
        if value in ("float32", "bfloat16", "float16"):
            return str(value), said
    return "float32", "SGLang's default; --mamba-ssm-dtype sets it"


@dataclass(frozen=True)
class StatePool:
    """The recurrent states an engine holds for a hybrid model, and the requests they let run."""

    states: int  # each the state of one request (or of a prefix kept for reuse)
    running: int  # requests that can run at once
    said: str  # both, and where they come from, in words


# SGLang keeps about 3 states a running request when its radix cache is on (the request's own,
# and the prefixes it caches and tracks): MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO, the same
# from 0.5.4 to 0.5.23. With --disable-radix-cache, one.
SGLANG_STATES_PER_REQUEST = 3
SGLANG_MAMBA_FULL_MEMORY_RATIO = 0.9  # --mamba-full-memory-ratio's default


def sglang_state_pool(args: list[str], room: float, per_state: float) -> StatePool:
    """How SGLang sizes its state pool (``--max-mamba-cache-size``; else, with
    --disable-radix-cache, ``--max-running-requests``; else ``--mamba-full-memory-ratio`` of
    what the weights leave, ``room``, the KV cache the rest) and the running requests it allows:
    the pool over the states a request takes, at most ``--max-running-requests``."""
    size = _arg(args, "--max-mamba-cache-size")
    most = _arg(args, "--max-running-requests")
    single = "--disable-radix-cache" in args
    per_request = 1 if single else SGLANG_STATES_PER_REQUEST
    why = "a state each" if single else f"{per_request} states a request with SGLang's radix cache"
    if size:
        states, source = int(size), f"--max-mamba-cache-size {size}"
    elif single and most:
        return StatePool(int(most), int(most), f"{most} requests running at once (--max-running-requests {most} "
                                               f"with --disable-radix-cache: a state each)")
    else:
        ratio_arg = _arg(args, "--mamba-full-memory-ratio")
        r = float(ratio_arg) if ratio_arg else SGLANG_MAMBA_FULL_MEMORY_RATIO
        states = int(room * r / (1 + r) // per_state) if per_state > 0 else 0
        source = f"{r:g}/{1 + r:g} of what the weights leave: --mamba-full-memory-ratio {r:g}" + (
            "" if ratio_arg else " assumed, SGLang's default")
    running = states // per_request
    if most and int(most) <= running:
        running, why = int(most), f"--max-running-requests {most}"
    elif most:
        why += f": fewer than --max-running-requests {most}"
    return StatePool(states, running, f"{states} states ({source}), {running} requests running at once ({why})")


DEFAULT_LLAMA_SLOTS = 4  # llama-server's --parallel -1 (auto): its start says "n_slots = 4"


def llama_server_state_pool(slots: Optional[int]) -> StatePool:
    """The state pool of a llama-server job (its ``slots``, the server's --parallel), for that
    kind's fit: llama.cpp holds one recurrent state per slot, and a slot runs one request."""
    if slots:
        return StatePool(slots, slots, f"{slots} slots: {slots} requests running at once, a state each")
    n = DEFAULT_LLAMA_SLOTS
    return StatePool(n, n, f"{n} slots assumed (llama-server's --parallel when not given): {n} requests running "
                           f"at once, a state each")


def check_model(spec: JobSpec, job_dir: Callable[[str], Path], gpu_totals: list[tuple[str, float]],
                th: Thresholds = Thresholds()) -> Check:
    """The model's path, then its weights and KV cache against the GPUs the job will use."""
    raw = model_of(spec) or ""
    path = Path(_job_path(raw, spec, job_dir))
    if not path.exists():
        if not raw.startswith(("/", ".", "~")) and _HUB_ID.fullmatch(raw):
            return Check("model", WARN, f"{raw!r} is no directory here: taken as a Hugging Face Hub id, "
                                        f"downloaded at the start (its fit is not checked)",
                         f"download it first (huggingface-cli download {raw} --local-dir DIR) and set "
                         f"model = \"DIR\"", job=spec.name)
        return Check("model", FAIL, f"the model path {path} does not exist",
                     f"copy the model to {path} on the node, or correct model in the fleet file", job=spec.name)
    if not (path / "config.json").is_file():
        return Check("model", FAIL, f"{path} has no config.json: not a model directory (transformers format)",
                     "point model at the directory that holds config.json and the weights", job=spec.name)
    try:
        cfg = read_config(path)
        weights, source = weight_bytes(path)
    except (OSError, ValueError) as exc:
        return Check("model", FAIL, f"{path}: cannot read its config or weights: {exc}",
                     "check the files' permissions and that the copy is complete", job=spec.name)
    if weights is None:
        return Check("model", FAIL, f"{path}: no weights (no *.safetensors, no pytorch_model*.bin)",
                     "finish copying the model", job=spec.name)
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "")
    assumed = []
    if dtype not in _DTYPE_BYTES:
        assumed.append(f"dtype {dtype or 'not given'}: 2 bytes assumed")
    model_b = _DTYPE_BYTES.get(dtype, 2)
    quantized = "quantization_config" in cfg
    if spec.kind is JobKind.EXTRACT:
        return _extract_fit(spec, path, weights, source, model_b, quantized, gpu_totals, assumed)
    return _sglang_fit(spec, path, cfg, weights, source, model_b, gpu_totals, assumed, th)


def _gpus_of(spec: JobSpec, count: int, totals: list[tuple[str, float]]) -> list[float]:
    """The total MiB of the GPUs the job will use: its ``gpus``, else the first ``count``."""
    idx = list(spec.gpus) or list(range(count))
    return [totals[i][1] for i in idx if i < len(totals)]


def _extract_fit(spec, path, weights, source, file_b, quantized, totals, assumed) -> Check:
    opts = spec.options
    want = getattr(opts, "dtype", "bfloat16")
    mem = weights if quantized or want not in _DTYPE_BYTES else weights // file_b * _DTYPE_BYTES[want]
    head = f"{path}: weights {human_bytes(mem, binary=True)} in {want} (from {source}"
    head += (", quantized: as stored" if quantized else "") + ")"
    if "; ".join(assumed):
        head += "; " + "; ".join(assumed)
    if not str(getattr(opts, "device", "cuda")).startswith("cuda"):
        return Check("model", OK, f"{head}; device {opts.device}: no GPU memory used", job=spec.name)
    gpus = _gpus_of(spec, 1, totals)
    if not gpus:
        return Check("model", WARN, f"{head}; the GPUs' memory is unknown here (no NVML): the fit is not checked",
                     "see the nvml line", job=spec.name)
    total = min(gpus) * 2**20
    rest = total - mem
    detail = f"{head}; one GPU of {human_bytes(total, binary=True)}: " \
             f"{human_bytes(max(rest, 0), binary=True)} left for batches of {opts.max_tokens_per_batch} tokens"
    if mem > 0.95 * total:
        return Check("model", FAIL, detail + " (the weights alone do not fit)",
                     "a GPU with more memory, or dtype = \"float16\"/\"bfloat16\" if it is float32", job=spec.name)
    if mem > 0.85 * total:
        return Check("model", WARN, detail + " (tight: a batch's hidden states may not fit)",
                     "lower max_tokens_per_batch", job=spec.name)
    return Check("model", OK, detail, job=spec.name)


def _sglang_fit(spec, path, cfg, weights, source, model_b, totals, assumed, th) -> Check:
    args = list(spec.args)
    tp = spec.tp or int(_arg(args, "--tp-size", "--tp") or 1)
    dp = spec.dp or int(_arg(args, "--dp-size", "--dp") or 1)
    frac_arg = _arg(args, "--mem-fraction-static")
    frac = float(frac_arg) if frac_arg else th.mem_fraction
    if not frac_arg:
        assumed.append(f"memory fraction {frac:g} assumed (SGLang picks its own by GPU size)")
    kv_arg = _arg(args, "--kv-cache-dtype") or "auto"
    kv_b = 1 if kv_arg.startswith("fp8") else (2 if "quantization_config" in cfg else model_b)
    per_token, formula = kv_bytes_per_token(cfg, kv_b)
    ctx = int(_arg(args, "--context-length") or cfg.get("max_position_embeddings") or 0)
    shards = 1 if cfg.get("kv_lora_rank") else max(1, min(tp, int(cfg.get("num_key_value_heads")
                                                                   or cfg.get("num_attention_heads") or 1)))
    per_gpu_token = per_token / shards
    head = (f"{path}: weights {human_bytes(weights, binary=True)} (from {source}), tp {tp}, dp {dp}; "
            f"KV {per_token / 1024:.0f} KiB per token ({formula}, kv dtype {kv_arg})")
    ssm_dtype, ssm_said = sglang_ssm_dtype(args, spec.env, cfg)
    state = recurrent_state(cfg, _DTYPE_BYTES[ssm_dtype], model_b)
    per_state = state.per_request / tp if state else 0.0  # the linear layers' heads split over the tp GPUs
    if state and state.per_request:
        head += f"; recurrent state {human_bytes(state.per_request, binary=True)} per request ({state.formula})"
        if tp > 1:
            head += f", {human_bytes(per_state, binary=True)} on each of tp {tp} GPUs"
        head += f", SSM in {ssm_dtype} ({ssm_said}), conv in the model's dtype"
    if state and state.uncounted:
        head += f"; {state.uncounted}"
    if assumed:
        head += "; " + "; ".join(assumed)
    gpus = _gpus_of(spec, tp * dp, totals)
    if not totals:
        return Check("model", WARN, f"{head}; the GPUs' memory is unknown here (no NVML): the fit is not checked",
                     "see the nvml line", job=spec.name)
    if len(gpus) < tp * dp:
        return Check("model", FAIL, f"{head}; tp x dp = {tp * dp} GPUs, the node has {len(gpus)} for it",
                     "lower tp or dp, or list the job's gpus", job=spec.name)
    budget = min(gpus) * 2**20 * frac
    per_gpu = weights / tp
    room = budget - per_gpu
    detail = (f"{head}; per GPU: {human_bytes(per_gpu, binary=True)} of weights in "
              f"{human_bytes(budget, binary=True)} ({frac:g} of {human_bytes(min(gpus) * 2**20, binary=True)})")
    if room <= 0:
        return Check("model", FAIL, detail + ": the weights do not fit",
                     "raise tp (more GPUs per replica), or a quantized model", job=spec.name)
    kv_room = room
    less = "raise --mem-fraction-static or tp, or lower --context-length"
    if per_state:
        pool = sglang_state_pool(args, room, per_state)
        held = pool.states * per_state
        kv_room = room - held
        detail += (f", {human_bytes(room, binary=True)} left: {pool.said}; their states take "
                   f"{human_bytes(held, binary=True)}")
        fewer = "lower --max-mamba-cache-size or --max-running-requests, halve the SSM state with " \
                "--mamba-ssm-dtype bfloat16, or raise tp"
        if kv_room <= 0:
            return Check("model", FAIL, detail + ": the recurrent states do not fit", fewer, job=spec.name)
        if pool.running < 1:
            return Check("model", FAIL, detail + ": no request can run: SGLang refuses to start",
                         "raise --max-mamba-cache-size or --mem-fraction-static, or halve the SSM state with "
                         "--mamba-ssm-dtype bfloat16", job=spec.name)
        less += ", or give the states less (--mamba-full-memory-ratio, --max-mamba-cache-size)"
    tokens = int(kv_room / per_gpu_token) if per_gpu_token else 0
    detail += f", {human_bytes(kv_room, binary=True)} left for the KV cache: about {tokens:,} tokens"
    if ctx:
        detail += f" ({tokens / ctx:.1f} contexts of {ctx:,})"
    detail += "; rough: activations and CUDA graphs come out of the rest"
    if ctx and tokens < ctx:
        return Check("model", WARN, detail + ": less than one full context", less, job=spec.name)
    return Check("model", OK, detail, job=spec.name)


# ---------------------------------------------------------------- an engine's own program


def check_program(spec: JobSpec, job_dir: Callable[[str], Path], timeout_s: float) -> Check:
    """A ``llama-server`` job: its program is there and runs (``--version``, its build said),
    and its GGUF model is a file."""
    problem = program_problem(spec, str(job_dir(spec.name)))
    if problem:
        return Check("engine", FAIL, problem.split(": ", 1)[1], "set binary = and model = on the job to what the "
                     "node has (docs/workers.md: llama-server)", job=spec.name)
    binary = shutil.which(program_path(spec, str(job_dir(spec.name))))
    try:
        r = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("engine", FAIL, f"{binary} --version did not run: {exc}",
                     "a llama-server built for this machine (its CPU and CUDA)", job=spec.name)
    said = [ln.strip() for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    build = "; ".join(ln for ln in said if ln.startswith(("version:", "built with"))) or (said[-1] if said else "")
    if r.returncode != 0:
        return Check("engine", FAIL, f"{binary} --version exited {r.returncode}: {said[-1] if said else ''}",
                     "a llama-server built for this machine (a missing shared library shows here)", job=spec.name)
    return Check("engine", OK, f"llama-server {binary} ({build}); model {spec.model}", job=spec.name)


# ---------------------------------------------------------------- disk


def check_disk(spec: JobSpec, job_dir: Callable[[str], Path], th: Thresholds = Thresholds()) -> Check:
    out = _job_path(str(getattr(spec.options, "out", "")), spec, job_dir)
    probe = out
    while not os.path.exists(probe):  # the directory the run will make it in
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return Check("disk", FAIL, f"the output directory {out} cannot be made: {probe} is a file",
                     "choose another out, or move that file away", job=spec.name)
    try:
        fd, name = tempfile.mkstemp(prefix=".gpudeck-doctor-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        return Check("disk", FAIL, f"cannot write in {probe}" + ("" if probe == out else f" (to make {out})")
                     + f": {exc.strerror or exc}", f"make {probe} writable for this user, or choose another out",
                     job=spec.name)
    free = shutil.disk_usage(probe).free
    where = f"{human_bytes(free)} free for {out}"
    plan = os.path.join(out, PLAN_FILE)
    projected = None
    if os.path.exists(plan):
        try:
            projected = read_document(PlanDoc, plan, MAX_PLAN_BYTES).projected_bytes
        except (OSError, ValueError) as exc:
            return Check("disk", WARN, f"{where}; its plan {plan} cannot be read: {exc}",
                         "gpudeck plan again", job=spec.name)
    if projected is None:
        if free < th.disk_warn_bytes:
            return Check("disk", WARN, f"{where}: under {human_bytes(th.disk_warn_bytes)}, and no plan to say "
                                       f"how much the run needs", "free some space; gpudeck plan projects the bytes",
                         job=spec.name)
        return Check("disk", OK, f"{where} (no plan.json with projected bytes to compare; gpudeck plan makes one)",
                     job=spec.name)
    detail = f"{where}; the plan projects {human_bytes(projected)} for the whole run"
    if projected > free:
        return Check("disk", FAIL, detail + f": {human_bytes(projected - free)} short",
                     "free space, another out on a larger disk, or compress = true (extract)", job=spec.name)
    return Check("disk", OK, detail, job=spec.name)


# ---------------------------------------------------------------- S3

_CRED_KEYS = {"AWS_ACCESS_KEY_ID": "aws_access_key_id", "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
              "AWS_SESSION_TOKEN": "aws_session_token", "AWS_PROFILE": "profile_name",
              "AWS_DEFAULT_REGION": "region_name"}


def _redact(url: Optional[str]) -> Optional[str]:
    if not url or "@" not in urlsplit(url).netloc:
        return url
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def check_s3(spec: JobSpec, environ: Optional[dict[str, str]] = None) -> Check:
    """Credentials found (as the job will: its env over the agent's) and a HEAD of the bucket.
    No credential is ever part of the line."""
    url = str(spec.options.s3)  # type: ignore[union-attr]
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        return Check("s3", FAIL, f"{url!r} is not an S3 URL", "s3 = \"s3://bucket/prefix\"", job=spec.name)
    bucket = parts.netloc
    env = {**(os.environ if environ is None else environ), **spec.env}
    try:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        return Check("s3", FAIL, "boto3 is not installed for the agent's python",
                     "gpudeck deploy (it installs the s3 extra for a job with s3)", job=spec.name)
    kwargs = {arg: env[key] for key, arg in _CRED_KEYS.items() if env.get(key)}
    endpoint = getattr(spec.options, "s3_endpoint", None) or env.get("AWS_ENDPOINT_URL_S3") or env.get(
        "AWS_ENDPOINT_URL")
    try:
        session = boto3.session.Session(**kwargs)
        creds = session.get_credentials()
    except BotoCoreError as exc:  # a profile that is not there
        return Check("s3", FAIL, f"no S3 credentials for {bucket}: {exc}",
                     "set AWS_PROFILE to a profile of the node's ~/.aws, or the keys in the job's env", job=spec.name)
    if creds is None:
        return Check("s3", FAIL, f"no S3 credentials for {bucket}: none in the job's env, the agent's environment, "
                                 f"~/.aws or an instance role",
                     "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the job's env (env = {...}), or write the "
                     "node's ~/.aws/credentials", job=spec.name)
    cfg = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 1},
                 s3={"addressing_style": "path"} if endpoint else None)
    where = f"s3://{bucket} at {_redact(endpoint) or 'AWS'}"
    try:
        client = session.client("s3", endpoint_url=endpoint or None, config=cfg,
                                region_name=kwargs.get("region_name") or env.get("AWS_REGION") or "us-east-1")
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("403", "AccessDenied", "Forbidden"):
            return Check("s3", FAIL, f"{where}: access denied with the credentials from {creds.method}",
                         "the credentials need s3:ListBucket, s3:GetObject and s3:PutObject on the bucket",
                         job=spec.name)
        if code in ("404", "NoSuchBucket", "NotFound"):
            return Check("s3", FAIL, f"{where}: no such bucket", "create it, or correct s3 in the fleet file",
                         job=spec.name)
        return Check("s3", FAIL, f"{where}: {code or 'refused'}", "check the endpoint and region", job=spec.name)
    except BotoCoreError as exc:
        return Check("s3", FAIL, f"{where}: cannot reach it: {exc}",
                     "check s3_endpoint and the node's network (a proxy? HTTPS_PROXY)", job=spec.name)
    return Check("s3", OK, f"{where}: reachable with the credentials from {creds.method}", job=spec.name)


# ---------------------------------------------------------------- clock, containment, limits


def check_clock(console_time: float, now: float, th: Thresholds = Thresholds()) -> Check:
    skew = now - console_time
    way = "ahead of" if skew > 0 else "behind"
    detail = f"this node's clock is {abs(skew):.1f} s {way} the console's (the request's transit counts as ahead)"
    fix = "turn on time sync on the node: timedatectl set-ntp true (or chrony); check the console's clock too"
    if abs(skew) >= th.skew_fail_s:
        return Check("clock", FAIL, detail + ": event times, ETAs and deadlines are off by as much, and S3 "
                                             "refuses requests signed 15 minutes off", fix)
    if abs(skew) >= th.skew_warn_s:
        return Check("clock", WARN, detail + f" (over {th.skew_warn_s:g} s: the nodes' events interleave wrongly)",
                     fix)
    return Check("clock", OK, detail)


def check_containment(mode: str, parent: Optional[Path], forced: bool, mount: Optional[Path]) -> Check:
    if mode == "cgroup":
        return Check("containment", OK, f"cgroup v2: each attempt in a cgroup under {parent}; a kill is "
                                        "cgroup.kill, and no process escapes it")
    escape = "a process that clears its environment escapes a kill's search (the GPU check still names it)"
    if forced:
        return Check("containment", WARN, f"token containment, forced by $GPUDECK_CONTAINMENT=token: {escape}",
                     "unset GPUDECK_CONTAINMENT where the agent starts")
    if mount is None:
        return Check("containment", WARN, f"no cgroup v2 here (cgroup v1, or none): token containment; {escape}",
                     "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1 on the kernel command line)")
    return Check("containment", WARN, f"cgroup v2 at {mount} is not delegated to this user: token containment; "
                                      f"{escape}",
                 "start the agent in a delegated scope (systemd-run --user --scope -p Delegate=yes), or set "
                 "GPUDECK_CGROUP_PARENT to a cgroup it may write (as root: mkdir /sys/fs/cgroup/gpudeck; "
                 "chown -R USER /sys/fs/cgroup/gpudeck)")


def _limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def check_limits(getrlimit: Callable[[int], tuple[int, int]] = resource.getrlimit,
                 th: Thresholds = Thresholds()) -> list[Check]:
    out = []
    for name, which, warn, fail, key, why in (
            ("open files", resource.RLIMIT_NOFILE, th.nofile_warn, th.nofile_fail, "nofile", "ulimit -n"),
            ("processes", resource.RLIMIT_NPROC, th.nproc_warn, th.nproc_fail, "nproc", "ulimit -u")):
        soft, hard = getrlimit(which)
        inf = resource.RLIM_INFINITY
        detail = f"soft {_limit(soft)}, hard {_limit(hard)} (the jobs inherit the agent's)"
        if soft == inf or soft >= warn:
            out.append(Check(name, OK, detail))
            continue
        if hard == inf or hard >= warn:
            fix = f"raise the soft limit where the agent starts: {why} {warn} (the hard limit allows it), or " \
                  f"Limit{key.upper()}={warn} in a systemd unit"
        else:
            fix = f"raise the hard limit (as root, /etc/security/limits.conf: USER - {key} {warn}), log in again"
        out.append(Check(name, FAIL if soft < fail else WARN, f"{detail}: under {warn}", fix))
    return out


# ---------------------------------------------------------------- running them


Task = tuple[str, float, Callable[[], list[Check]]]


def run_checks(tasks: list[Task]) -> list[Check]:
    """Each task in a thread of its own, each bounded by its own timeout; the lines in the
    tasks' order. A task that does not finish in time is a failed line saying so (its thread is
    left to end by itself: a hung stat cannot be cancelled)."""
    results: dict[int, list[Check]] = {}
    started = []
    for i, (name, _, fn) in enumerate(tasks):
        def body(i: int = i, name: str = name, fn: Callable[[], list[Check]] = fn) -> None:
            t0 = time.monotonic()
            try:
                got = fn()
            except Exception as exc:  # noqa: BLE001 -- a bug of ours: one line, the traceback in the log
                log.exception("doctor: the %s check failed", name)
                got = [Check(name, FAIL, f"the check itself failed: {type(exc).__name__}: {exc}",
                             "a bug of gpudeck's: the agent's log has the traceback")]
            took = round(time.monotonic() - t0, 2)
            results[i] = [c if c.seconds is not None else replace(c, seconds=took) for c in got]

        thread = threading.Thread(target=body, name=f"doctor-{name}", daemon=True)
        thread.start()
        started.append((thread, time.monotonic()))
    out: list[Check] = []
    for i, (thread, began) in enumerate(started):
        name, timeout, _ = tasks[i]
        thread.join(max(0.0, began + timeout - time.monotonic()))
        got = results.get(i)
        if got is None:
            got = [Check(name, FAIL, f"the check did not finish within {timeout:g} s",
                         "something it reads does not answer (a dead mount, an endpoint): see the detail of a "
                         "second run, or the agent's log", seconds=timeout)]
        out += got
    return out


def examine(op: ops.Doctor, jobs: JobBackend, gpu: GpuReader, node: str, home: Path) -> ops.DoctorReport:
    """The ``doctor`` op: every check of the node against its declared jobs."""
    received = time.time()  # first: the clock is compared against the console's at once
    th = Thresholds(import_warn_s=op.import_warn_s, timeout_s=op.timeout_s,
                    quick_timeout_s=min(op.timeout_s, Thresholds.quick_timeout_s))
    specs = sorted(jobs.declared().values(), key=lambda s: s.name)
    python = jobs.python
    quick = th.quick_timeout_s

    def py_of(s: JobSpec) -> str:  # a python_env's python (agents/envs.py), else the job's or the agent's
        try:
            return env_resolve(s, home, python)[0]
        except EnvMissing:
            return python  # its own `env` line fails, saying so

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

    tasks: list[Task] = [("python", quick, lambda: [check_python(op.venv, python, quick)]),
                         ("imports", th.timeout_s * (len(torch_by or [1]) + len(sglang_by)) + 5.0, imports),
                         ("nvml", quick, nvml)]
    for s in specs:
        if model_of(s):
            tasks.append(("model", quick, lambda s=s: [check_model(s, jobs.workdir, totals(), th)]))
    for s in specs:
        if s.kind is JobKind.LLAMA_SERVER and not s.command:
            tasks.append(("engine", quick, lambda s=s: [check_program(s, jobs.workdir, quick)]))
    for s in specs:
        if getattr(s.options, "out", None):
            tasks.append(("disk", quick, lambda s=s: [check_disk(s, jobs.workdir, th)]))
    for s in specs:
        if getattr(s.options, "s3", None):
            tasks.append(("s3", quick, lambda s=s: [check_s3(s)]))
    by_env: dict[str, list[str]] = {}  # python_env -> its jobs (agents/envs.py)
    for s in specs:
        if s.python_env:
            by_env.setdefault(s.python_env, []).append(s.name)
    for env, users in by_env.items():
        tasks.append(("env", th.timeout_s, lambda env=env, users=users: [check_env(home, env, users, quick)]))
    checks = run_checks(tasks)
    if op.console_time is not None:
        checks.append(check_clock(op.console_time, received, th))
    contained = jobs.containment()  # None: a scheduler contains the jobs (their nodes' own)
    if contained is not None:
        checks.append(check_containment(contained.mode, contained.parent,
                                        os.environ.get("GPUDECK_CONTAINMENT") == "token", cgroup2_mount()))
    checks += check_limits(th=th)
    checks.append(check_staged(home))  # the copies stages made here (agents/staging/copies.py)
    return ops.DoctorReport(node=node, checks=checks, at=time.time())
