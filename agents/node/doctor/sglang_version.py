"""The sglang line: the import, and its version against the flags the jobs pass."""

from __future__ import annotations

import re
from typing import Any, Optional

from ...contract.jobs import JobSpec
from ...contract.needs import Need, fix_line
from ...contract.ops import Check
from .base import FAIL, OK, WARN, Thresholds, _who
from .imports import SLOW_FIX, timed_import


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


def sglang_verdict(python: str, jobs: list[str], said: Optional[dict[str, Any]], why: str, th: Thresholds,
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

