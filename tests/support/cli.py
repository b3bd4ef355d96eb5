"""The `gpudeck` program as a user runs it: a subprocess on a fleet file, its output captured,
or written into a pipe whose reader has gone (``gpudeck status | head`` once head has its
lines), or with a module hidden as if its extra were not installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

from support.core import ROOT, env_with_repo

NOISE = ("Traceback", "Exception ignored", "BrokenPipeError")  # what a closed pipe must never print


def gpudeck_cmd() -> list[str]:
    exe = shutil.which("gpudeck")
    return [exe] if exe else [sys.executable, "-m", "gpudeck.console"]


def gpudeck(*args, check: bool = True, timeout: float = 90, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    cmd = [*gpudeck_cmd(), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env_with_repo(env))
    if check and r.returncode != 0:
        raise AssertionError(f"gpudeck {' '.join(map(str, args))} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def into_closed_pipe(*args, timeout: float = 90, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """`gpudeck ARGS | head` where head has already left: stdout is a pipe with no reader, so
    the first write the program makes fails (EPIPE), whatever the size of its output."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([*gpudeck_cmd(), *args], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=timeout, cwd=ROOT, env=env_with_repo(env))
    finally:
        os.close(write_end)


def without(tmp_path: Path, *modules: str) -> dict:
    """An environment whose python cannot import ``modules`` (as if the extra were not installed)."""
    d = tmp_path / "hide"
    d.mkdir(exist_ok=True)
    (d / "sitecustomize.py").write_text(textwrap.dedent(f'''
        import sys
        class _Hide:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {set(modules)!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name.split(".")[0])
                return None
        sys.meta_path.insert(0, _Hide())
    '''))
    return {"PYTHONPATH": f"{d}{os.pathsep}{ROOT}"}


def at_a_terminal() -> None:
    """A Popen ``preexec_fn``: ctrl-c (SIGINT) reaches the program as at a terminal, even when
    this test run was started in the background, where the shell ignores SIGINT for what it
    starts and the child inherits that (Python then installs no KeyboardInterrupt handler)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)

