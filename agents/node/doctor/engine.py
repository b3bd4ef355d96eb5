"""The engine line: a llama-server job's own program."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ...contract.jobs import JobSpec
from ...contract.needs import program_path, program_problem
from ...contract.ops import Check
from .base import FAIL, OK, _arg


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
    return Check("engine", OK, f"llama-server {binary} ({build}); model {spec.model}; "
                 f"{prompt_cache_said(spec.args, spec.env)}", job=spec.name)


def prompt_cache_said(args: Sequence[str], env: Mapping[str, str]) -> str:
    """What a llama-server job's arguments (and environment) make of the server's RAM prompt
    cache. On by default, it saves every idle slot into host memory each time a request comes
    (llama.cpp's ``--cache-idle-slots``), so a run that starts on slots an earlier run filled is
    let in a few requests at a time: 14.4 s to fill 128 slots on an H100, against 2.5 and 5.3 s
    with ``--cache-ram 0`` (bench/results/engine_llama). As the server reads them: the environment
    first, then the arguments, the last one winning."""
    ram = _arg(args, "--cache-ram", "-cram") or env.get("LLAMA_ARG_CACHE_RAM", "")
    idle = [a for a in args if a in ("--cache-idle-slots", "--no-cache-idle-slots")]
    if ram.strip() == "0":
        return "prompt cache off (--cache-ram 0)"
    if idle and idle[-1] == "--no-cache-idle-slots":
        return "prompt cache on, idle slots not saved into it (--no-cache-idle-slots)"
    return ("prompt cache on (the server's default: each new request first saves the idle slots into it, "
            "so a run that starts on slots an earlier one used is let in slowly; for a run of unique prompts, "
            "args --cache-ram 0: docs/fleet-file.md)")

