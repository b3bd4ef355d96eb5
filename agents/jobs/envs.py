"""A job's ``python_env`` on the node: the build its name links to now (agents/contract/envs.py),
resolved at the job's launch, so the job keeps that build while a deploy swaps the link."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from ..contract.envs import ENV_DOC, ENVS_DIR
from ..contract.jobs import JobSpec
from ..contract.ops import Check


class EnvMissing(ValueError):
    """The job's env is not built on this node: what to do."""


def env_dir(home: Path, name: str) -> Path:
    """The link ``<home>/envs/<name>``: the last build that succeeded."""
    return Path(home) / ENVS_DIR / name


def resolve(spec: JobSpec, home: Path, default_python: str, node: str = "") -> tuple[str, dict[str, str]]:
    """The job's interpreter, and what its environment gains: for a ``python_env``, that env's
    python, its ``bin`` first on PATH and VIRTUAL_ENV; else the spec's python (or
    ``default_python``) and nothing. EnvMissing when the env is not built here."""
    if not spec.python_env:
        return spec.python or default_python, {}
    link = env_dir(home, spec.python_env)
    build = Path(os.path.realpath(link))
    python = build / "bin" / "python"
    if not link.exists() or not python.exists():
        on = f" on node {node}" if node else ""
        raise EnvMissing(f"job {spec.name!r}: its python_env {spec.python_env!r} is not built{on} (no {link}): "
                         f"`gpudeck deploy -f FLEET` builds it")
    path = f"{build / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    return str(python), {"VIRTUAL_ENV": str(build), "PATH": path, "GPUDECK_ENV": build.name}


def built(home: Path, name: str) -> Optional[dict[str, Any]]:
    """What the current build of env ``name`` says of itself (its table, key, when it was built)."""
    try:
        doc = json.loads((env_dir(home, name) / ENV_DOC).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


# the env's python says its version and the versions of the packages named (importlib.metadata)
_VERSIONS = ("import json, sys, importlib.metadata as m\n"
             "out = {'python': sys.version.split()[0], 'packages': {}}\n"
             "for n in sys.argv[1:]:\n"
             "    try: out['packages'][n] = m.version(n)\n"
             "    except m.PackageNotFoundError: out['packages'][n] = None\n"
             "print(json.dumps(out))")


def check_env(home: Path, name: str, jobs: list[str], timeout_s: float, now: Optional[float] = None) -> Check:
    """doctor's ``env`` line for one env: built, its python runs, and the versions of the
    packages its table names."""
    import subprocess
    import time

    from ..contract.envs import package_names
    from ..contract.units import human_duration
    from ..contract.vocab import Verdict

    who = ", ".join(jobs)
    doc = built(home, name)
    link = env_dir(home, name)
    if doc is None and (link / "bin" / "python").exists():
        doc = {}  # made by hand (a local node): its python is checked, no packages are named
    if doc is None:
        return Check("env", Verdict.FAIL, f"env {name!r} (for {who}) is not built here: no {link}",
                     "gpudeck deploy -f FLEET builds it", job=jobs[0] if len(jobs) == 1 else None)
    python = str(link / "bin" / "python")
    names = package_names(list(doc.get("packages") or []))
    try:
        r = subprocess.run([python, "-c", _VERSIONS, *names], capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL)
        said = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 and r.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        said = None
        why = f"{python} does not answer: {exc}"
    else:
        why = f"{python} exited with {r.returncode}: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
    if not isinstance(said, dict):
        return Check("env", Verdict.FAIL, f"env {name!r} (for {who}): {why}", "gpudeck deploy -f FLEET builds it again "
                     "once the table changes; remove the build to force it", job=jobs[0] if len(jobs) == 1 else None)
    versions = said.get("packages") or {}
    missing = [n for n, v in versions.items() if v is None]
    built_at = doc.get("built_at")
    age = f", built {human_duration((now or time.time()) - built_at)} ago" if isinstance(built_at, (int, float)) else ""
    head = (f"env {name!r} ({os.path.realpath(link)}{age}): Python {said.get('python')}; "
            + ", ".join(f"{n} {v or 'MISSING'}" for n, v in versions.items()))
    if missing:
        return Check("env", Verdict.WARN, head + f" (for {who})", f"its table names {', '.join(missing)}, which its "
                     "python cannot find: a setup step removed it?", job=jobs[0] if len(jobs) == 1 else None)
    return Check("env", Verdict.OK, head + f" (for {who})", job=jobs[0] if len(jobs) == 1 else None)
