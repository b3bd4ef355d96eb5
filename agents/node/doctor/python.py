"""The python line: the agent's interpreter, and the gpudeck venv the node's jobs run in."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

from ...contract import VERSION
from ...contract.ops import Check
from .base import FAIL, OK, WARN, _last_json


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

