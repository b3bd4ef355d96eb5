"""A newcomer's install: gpudeck alone (no extras) into a fresh venv, not editable, from a copy
of this tree; then `gpudeck --help`, `gpudeck demo --screenshot`, and the wheel `gpudeck deploy`
rebuilds from the installed copy. The base dependencies come from the configured package index
(a local one here: about 10 s)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
import zipfile

import pytest

from support import ROOT

pytestmark = [pytest.mark.system, pytest.mark.slow]

LIGHT = ("textual", "asyncssh", "aiohttp", "httpx", "psutil", "prometheus_client", "pynvml")
HEAVY = ("torch", "boto3", "moto", "transformers", "sglang_router")


def run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=kw.pop("timeout", 240), **kw)
    assert r.returncode == 0, f"{argv} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def test_a_fresh_venv_without_extras_runs_help_the_demo_and_builds_the_deploy_wheel(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv*", ".git", "build", "*.egg-info", "__pycache__",
                                                             "tests", "bench", "docs"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py, exe = env_dir / "bin" / "python", env_dir / "bin" / "gpudeck"
    run([str(py), "-m", "pip", "install", "--disable-pip-version-check", str(src)])
    probe = run([str(py), "-c", "import importlib.util as u; print(' '.join(m for m in "
                 f"{LIGHT + HEAVY!r} if u.find_spec(m)))"]).stdout.split()
    assert set(LIGHT) <= set(probe) and not set(HEAVY) & set(probe), probe

    assert "demo" in run([str(exe), "--help"], cwd=tmp_path).stdout
    svg = tmp_path / "demo.svg"
    r = run([str(exe), "demo", "--dir", str(tmp_path / "demo"), "--screenshot", str(svg)], cwd=tmp_path,
            timeout=180)
    assert "screenshot saved" in r.stdout and svg.read_text().startswith("<svg")
    assert "freed 160.0 GiB" in r.stdout  # the demo's servers held simulated B200 memory

    # `gpudeck deploy` from this installed copy: the wheel rebuilt from its files
    out = tmp_path / "wheel"
    out.mkdir()
    code = ("import asyncio, pathlib, sys; from gpudeck.remote.deploy import build_wheel; "
            "print(asyncio.run(build_wheel(pathlib.Path(sys.argv[1]))))")
    wheel = run([str(py), "-c", code, str(out)], cwd=tmp_path).stdout.strip()
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpudeck/agents/__init__.py" in names and "gpudeck/console/app.tcss" in names
    assert any(n.endswith(".dist-info/METADATA") for n in names)
    target = tmp_path / "target"
    run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "--target",
         str(target), wheel])
    assert (target / "gpudeck" / "agents" / "node" / "agent.py").is_file()
