"""What a job's interpreter must import, and the one line that fixes it when it cannot.

Two sorts of job run on a node:

- gpudeck's own workers (``generate``, ``extract``) run with the python of the venv that
  ``gpudeck deploy`` made; deploy installs what they need there (the base dependencies, and
  the extras the fleet's jobs ask for: ``s3`` for an ``s3 =`` key, ``extract`` for an extract
  job).
- Engine kinds (``sglang-server``, ``router``) run with the interpreter that has the engine:
  the job's ``python = "..."``. gpudeck never installs an engine.

Deploy and launch both ask :func:`needed_modules` and check each module with
``importlib.util.find_spec`` in that interpreter (nothing is imported: SGLang takes seconds
to import), so a missing engine is one line *before* the launch, not a traceback after it.
A job given its own ``command`` is the operator's program and is never checked.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional

# modules of the extras (pyproject.toml's [project.optional-dependencies]) -> the extra
EXTRAS = {"torch": "extract", "numpy": "extract", "transformers": "extract", "safetensors": "extract",
          "zstandard": "extract", "boto3": "s3", "botocore": "s3", "sglang_router": "serve"}
# gpudeck's base dependencies that its node-side code imports (deploy installs them)
BASE = ("psutil", "httpx", "prometheus_client", "pynvml", "aiohttp")
EXTRACT = ("torch", "transformers", "safetensors", "numpy")


@dataclass(frozen=True)
class Need:
    module: str  # what must import
    engine: bool  # an engine (the job's own python must have it) or a gpudeck dependency (deploy's)
    what: str  # "SGLang", "aiohttp", ... as the message names it


def needed_modules(spec: Any) -> list[Need]:
    """What ``spec``'s interpreter must import for its kind, in the order to check; empty for
    a job with its own ``command`` and for kind ``command``."""
    from .jobs import JobKind

    if spec.command:
        return []
    kind = spec.kind
    if kind is JobKind.SGLANG_SERVER:
        return [Need("sglang", True, "SGLang")]
    if kind is JobKind.ROUTER:
        return [Need("sglang_router", True, "sglang-router")]
    needs: list[Need] = []
    if kind is JobKind.GENERATE:
        needs.append(Need("aiohttp", False, "aiohttp"))
    if kind is JobKind.EXTRACT:
        needs += [Need(m, False, m) for m in EXTRACT]
    if spec.worker is not None and spec.worker.s3:
        needs.append(Need("boto3", False, "boto3"))
    return needs


def extras_for(specs: list[Any]) -> list[str]:
    """The gpudeck extras the node's venv needs for these jobs (deploy installs them)."""
    wanted = {EXTRAS[n.module] for s in specs for n in needed_modules(s) if not n.engine and n.module in EXTRAS}
    return sorted(wanted)


def fix_line(need: Need, python: str, job: Optional[str] = None, kind: Optional[str] = None) -> str:
    """One line: what is missing, for which interpreter, and what to do about it."""
    who = f"job {job!r} (kind {kind}): " if job else ""
    if need.engine:
        install = "pip install sglang-router" if need.module == "sglang_router" else "pip install 'sglang[all]'"
        return (f"{who}{python} cannot import {need.module} ({need.what}): set python = \"/path/to/bin/python\" "
                f"on the job, the interpreter that has {need.what} (or {install} into {python})")
    extra = EXTRAS.get(need.module)
    package = f"'gpudeck[{extra}]'" if extra else need.module
    return (f"{who}{python} cannot import {need.module}: run `gpudeck deploy` for this node (it installs what "
            f"the fleet's jobs need), or {python} -m pip install {package}")


def broken_python_line(python: str, why: str, job: str, kind: str) -> str:
    """One line for a job whose interpreter does not run at all."""
    return (f"job {job!r} (kind {kind}): its python {python} does not run here ({why}): set python = "
            f"\"/path/to/bin/python\" on the job to an interpreter that exists on the node")


def missing(python: str, modules: list[str], timeout: float = 60.0) -> list[str]:
    """The modules of ``modules`` that ``python`` cannot find. This interpreter is asked
    in-process; another one through a subprocess (find_spec only, no import). An interpreter
    that cannot run at all raises OSError with what it said."""
    import importlib.util
    import subprocess

    if not modules:
        return []
    if python == sys.executable:  # the agent's own: no subprocess
        out = []
        for m in modules:
            try:
                found = importlib.util.find_spec(m) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                out.append(m)
        return out
    script = ("import importlib.util as u, sys\n"
              "for m in sys.argv[1:]:\n"
              "    try: ok = u.find_spec(m) is not None\n"
              "    except Exception: ok = False\n"
              "    ok or print(m)\n")
    try:
        r = subprocess.run([python, "-c", script, *modules], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise OSError(f"{python}: no such interpreter") from None
    except subprocess.TimeoutExpired:
        raise OSError(f"{python} did not answer within {timeout:g} s") from None
    if r.returncode != 0:
        said = (r.stderr or r.stdout).strip().splitlines()
        raise OSError(f"{python} exited with {r.returncode}" + (f": {said[-1]}" if said else ""))
    return [m for m in r.stdout.split() if m in modules]


def program_path(spec: Any, cwd: Optional[str] = None) -> str:
    """A ``llama-server`` job's program as the node looks it up: a relative path from the job's
    ``cwd`` (else ``cwd`` given here), a bare name as it is (the PATH)."""
    import os

    base = os.path.expanduser(spec.cwd) if spec.cwd else cwd
    binary = os.path.expanduser(spec.options.binary)
    return os.path.join(base, binary) if base and os.sep in binary and not os.path.isabs(binary) else binary


def program_problem(spec: Any, cwd: Optional[str] = None) -> Optional[str]:
    """A ``llama-server`` job: the one line saying why its program or its model is not there
    (a name not on the PATH, a path that is not an executable file, a GGUF that does not
    exist), or None. Relative paths are the job's: from its ``cwd``, else ``cwd`` given here."""
    import os
    import shutil

    from .jobs import JobKind

    if spec.kind is not JobKind.LLAMA_SERVER or spec.command:
        return None
    base = os.path.expanduser(spec.cwd) if spec.cwd else cwd
    who = f"job {spec.name!r} (kind llama-server)"
    binary = os.path.expanduser(spec.options.binary)
    where = program_path(spec, cwd)
    if shutil.which(where) is None:
        said = (f"{where} is not an executable file" if os.sep in binary else
                f"no {binary!r} on the node's PATH ({os.environ.get('PATH', '')})")
        return (f"{who}: {said}: set binary = \"/path/to/llama-server\" on the job (llama.cpp built with "
                f"-DLLAMA_BUILD_SERVER=ON, and -DGGML_CUDA=ON for a GPU)")
    model = os.path.expanduser(str(spec.model))
    model = os.path.join(base, model) if base and not os.path.isabs(model) else model
    if not os.path.isfile(model) and not staged_at_launch(spec, model):
        return f"{who}: its model {model} is not a file here: model = \"...\" must be a GGUF file on the node"
    return None


def staged_at_launch(spec: Any, path: str) -> bool:
    """``path`` is one a stage of the job puts in place before its command starts (agents/staging/,
    whose own check at launch refuses a source that is not there): it need not be there before."""
    import os

    target = os.path.normpath(path)
    for item in getattr(spec, "stage", None) or []:
        dest = os.path.normpath(os.path.expanduser(item.dest))
        if target == dest or target.startswith(dest.rstrip(os.sep) + os.sep):
            return True
    return False


def launch_problem(spec: Any, python: str, cwd: Optional[str] = None) -> Optional[str]:
    """Before a launch: the one line saying why ``spec`` would fail with ``python`` (an engine
    kind without its engine, a worker without its dependencies, an interpreter that does not
    run, a llama-server job without its program or model), or None."""
    program = program_problem(spec, cwd)
    if program:
        return program
    needs = needed_modules(spec)
    if not needs:
        return None
    try:
        absent = set(missing(python, [n.module for n in needs]))
    except OSError as exc:
        return broken_python_line(python, str(exc), spec.name, spec.kind.value)
    return next((fix_line(n, python, spec.name, spec.kind.value) for n in needs if n.module in absent), None)


def worker_import_error(exc: ModuleNotFoundError, command: str) -> Optional[str]:
    """For a worker's ``__main__``: the one line that replaces the traceback of a missing
    dependency, or None when ``exc`` is not one gpudeck knows."""
    top = (exc.name or "").split(".")[0]
    if top not in EXTRAS and top not in BASE:
        return None
    return f"gpudeck {command}: " + fix_line(Need(top, False, top), sys.executable)
