"""The layers: agents/ imports neither textual nor asyncssh; remote/ never imports textual."""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, env_with_repo


def _modules(package: str) -> list[str]:
    pkg = importlib.import_module(package)
    return [package] + [m.name for m in pkgutil.walk_packages(pkg.__path__, prefix=package + ".")
                        if not m.name.rsplit(".", 1)[1].startswith("_")]


@pytest.mark.parametrize("package, forbidden", [
    ("gpudeck.agents", ("textual", "asyncssh", "gpudeck.console", "gpudeck.remote")),
    ("gpudeck.remote", ("textual", "gpudeck.console"))])
def test_importing_a_layer_pulls_in_nothing_forbidden(package, forbidden):
    # every module of the layer, imported in a fresh interpreter; then look at sys.modules
    mods = _modules(package)
    assert len(mods) > 5 and f"{package}.__main__" not in mods
    code = (f"import importlib, sys\n"
            f"for m in {mods!r}:\n"
            f"    importlib.import_module(m)\n"
            f"bad = sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.') for f in {forbidden!r}))\n"
            f"print(','.join(bad))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_with_repo(), cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"{package} imported {r.stdout.strip()}"


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports") or str(ROOT / ".venv/bin/lint-imports")
    r = subprocess.run([exe], capture_output=True, text=True, cwd=ROOT, env=env_with_repo(), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout
