"""The engine line: a llama-server job's own program."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Callable

from ...contract.jobs import JobSpec
from ...contract.needs import program_path, program_problem
from ...contract.ops import Check
from .base import FAIL, OK


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

