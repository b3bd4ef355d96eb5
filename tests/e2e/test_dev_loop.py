"""The developer's own loop (docs/development.md): the tests run on this checkout's code or
not at all; each checkout's demo has a folder of its own; the light venv `make demo-setup`
makes (the one `make check` uses) deploys to a real node."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT
from support.nodes import Laptop

pytestmark = pytest.mark.system

PRODUCT = ("agents", "console", "remote")
IGNORE = shutil.ignore_patterns(".venv*", ".git", "build", "*.egg-info", "__pycache__", ".mypy_cache")


def run(argv, timeout: float = 240, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)


def test_the_tests_of_another_checkout_stop_before_running_on_this_one_s_code(tmp_path):
    """A second worktree whose venv's editable gpudeck points at this one: its tests would pass
    or fail for this checkout's code. Its session stops with both paths named."""
    other = tmp_path / "other-checkout"
    for d in (*PRODUCT, "tests"):
        shutil.copytree(ROOT / d, other / d, ignore=IGNORE)
    shutil.copy(ROOT / "pyproject.toml", other)
    r = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_units.py"], cwd=other,
            timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == pytest.ExitCode.USAGE_ERROR, out
    assert (f"gpudeck.agents is imported from {ROOT / 'agents'}, not from this checkout ({other / 'agents'})"
            in out), out
    assert " passed" not in out


def test_two_checkouts_run_two_demos_in_two_folders(tmp_path):
    """`make demo` in two checkouts on one machine: each demo's folder (its fleet file, its
    agent homes) is its own, so one demo's `q` never stops the other's engines. Each copy is
    imported from its own path (PYTHONPATH), as an editable install of it would be."""
    cache = tmp_path / "cache"

    def demo_folder(checkout: Path) -> Path:
        pkg = checkout / "gpudeck"
        for d in PRODUCT:
            shutil.copytree(ROOT / d, pkg / d, ignore=IGNORE)
        env = {k: v for k, v in os.environ.items() if k != "GPUDECK_DEMO_DIR"}
        env.update(PYTHONPATH=str(checkout), XDG_CACHE_HOME=str(cache), COLUMNS="400")  # no wrapped help
        r = run([sys.executable, "-m", "gpudeck.console", "demo", "--help"], cwd=tmp_path, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        m = re.search(r"default (\S+): a folder of this checkout's own", r.stdout)
        assert m, r.stdout
        return Path(m.group(1))

    one, two = demo_folder(tmp_path / "one"), demo_folder(tmp_path / "two")
    assert one != two
    assert one.parent == two.parent == cache / "gpudeck-demo"
    assert one.name.startswith("gpudeck-") and two.name.startswith("gpudeck-")


@pytest.mark.slow
def test_the_light_venv_of_make_demo_setup_deploys_to_a_real_sshd_node(tmp_path):
    """A fresh clone's `make demo-setup` (Python's own venv: on 3.11, setuptools 65 and no
    wheel), then `gpudeck deploy` from that venv to a node behind a real sshd. The node's
    python3 already has what the agent imports, so its install is offline (--no-index)."""
    src = tmp_path / "clone"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    r = run(["make", "-C", str(src), "demo-setup"], timeout=420)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    light = src / ".venv-light" / "bin"
    probe = run([str(light / "python"), "-c", "import importlib.util as u; "
                 "print(' '.join(m for m in ('torch', 'triton', 'sglang') if u.find_spec(m)))"])
    assert probe.returncode == 0 and probe.stdout.split() == [], probe

    laptop = Laptop(tmp_path, {"gpu1": tmp_path / "gpu1-home"}, python3=Path(sys.executable))
    laptop.exe = light / "gpudeck"
    try:
        (laptop.dir / "fleet.toml").write_text('[defaults]\nhost_keys = "accept-new"\nnvml = false\n\n'
                                               '[[nodes]]\nname = "gpu1"\n')
        r = laptop.gpudeck("gpudeck deploy -f fleet.toml", check=False, timeout=300)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
        assert "deployed gpudeck to 1 of 1 node(s)" in r.stdout, r.stdout
        status = laptop.gpudeck("gpudeck status --json -f fleet.toml", timeout=120)
        assert '"gpu1"' in status.stdout, status.stdout
    finally:
        laptop.stop()
