"""What the checks share: the verdicts, the thresholds, what a job needs, and small readers."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, TypeVar

from ...contract.jobs import JobKind, JobSpec
from ...contract.kinds import ExtractOptions
from ...contract.options import KindOptions
from ...contract.vocab import Verdict

OK, WARN, FAIL = Verdict.OK, Verdict.WARN, Verdict.FAIL
GIB = 2**30
_Options = TypeVar("_Options", bound=KindOptions)


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
    return spec.kind is JobKind.SGLANG_SERVER or str(spec.options.device if isinstance(spec.options, ExtractOptions) else "cuda").startswith("cuda")


def _options(spec: JobSpec, cls: type[_Options]) -> _Options:
    """A job's options as its kind's class: JobSpec makes them so for each kind that has options
    (agents/contract/jobs.py), the checks of a kind ask for its class."""
    if not isinstance(spec.options, cls):
        raise TypeError(f"job {spec.name!r} (kind {spec.kind.value!r}): its options are "
                        f"{type(spec.options).__name__}, not {cls.__name__}")
    return spec.options


def model_of(spec: JobSpec) -> Optional[str]:
    if spec.kind is JobKind.EXTRACT:
        return (spec.options.model if isinstance(spec.options, ExtractOptions) else None) or spec.model
    if spec.kind in (JobKind.SGLANG_SERVER, JobKind.LLAMA_SERVER) and not spec.command:
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


def _last_json(text: str) -> Any:
    """The last line of ``text`` that is JSON (what a module prints on import comes before)."""
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def _arg(args: Sequence[str], *flags: str) -> Optional[str]:
    """The value an engine's arguments give any of ``flags`` (``--flag value`` or ``--flag=value``).
    A flag given twice takes its last value, as SGLang's argparse and llama.cpp's parser both do."""
    value = None
    for i, a in enumerate(args):
        for flag in flags:
            if a == flag and i + 1 < len(args):
                value = args[i + 1]
            elif a.startswith(flag + "="):
                value = a.split("=", 1)[1]
    return value

