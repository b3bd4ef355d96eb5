"""An import timed in a subprocess of the interpreter the jobs will use (torch, SGLang)."""

from __future__ import annotations

import subprocess
from typing import Any, Optional

from .base import _last_json


SLOW_FIX = ("every start and restart pays this; a venv on a network file system is the usual cause: "
            "put it on local disk (gpudeck deploy with the node's venv = \"/local/path\"), or see "
            "{python} -X importtime -c 'import {module}'")


def timed_import(python: str, script: str, timeout_s: float, *args: str) -> tuple[Optional[dict[str, Any]], str]:
    """What ``script`` (run with ``args``) printed (a JSON object), or None and why it printed none."""
    try:
        r = subprocess.run([python, "-c", script, *args], capture_output=True, text=True, timeout=timeout_s,
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

