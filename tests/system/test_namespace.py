"""The import names: other distributions install top-level ``agents`` (openai-agents) and
``console`` packages. With those first on sys.path, the CLI, the node agent and the TUI still
run, because gpudeck's own code lives under ``gpudeck.*``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.system  # runs python and the gpudeck CLI as processes


@pytest.fixture
def foreign_env(tmp_path):
    shadow = tmp_path / "shadow"
    for name in ("agents", "console", "remote"):
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(
            f"raise ImportError('another distribution top-level package: {name}')\n")
        (shadow / name / "__main__.py").write_text("raise SystemExit('the foreign package ran')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("GPUDECK_FLEET",)}
    env.update(PYTHONPATH=str(shadow), GPUDECK_HOME=str(tmp_path / "home"))
    probe = subprocess.run([sys.executable, "-c", "import agents"], capture_output=True, text=True, env=env,
                           cwd=tmp_path)
    assert "another distribution top-level package" in probe.stderr, probe.stderr  # the shadow comes first
    return env


def test_cli_and_agent_run_beside_foreign_agents_and_console_packages(foreign_env, tmp_path):
    r = subprocess.run([sys.executable, "-m", "gpudeck.console", "status", "--json"], capture_output=True, text=True,
                       env=foreign_env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["nodes"][0]["name"] == "local" and doc["nodes"][0]["reachable"] is True  # the agent answered
    r = subprocess.run([sys.executable, "-m", "gpudeck.agents", "--once", "--no-nvml", "--home", str(tmp_path / "h")],
                       capture_output=True, text=True, env=foreign_env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0 and '"type":"snapshot"' in r.stdout, r.stderr


@pytest.mark.slow
def test_the_tui_runs_beside_foreign_packages(foreign_env, tmp_path):
    svg = tmp_path / "demo.svg"
    r = subprocess.run([sys.executable, "-m", "gpudeck.console", "demo", "--dir", str(tmp_path / "demo"),
                        "--screenshot", str(svg)], capture_output=True, text=True, env=foreign_env, cwd=tmp_path,
                       timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert svg.is_file() and "gpudeck" in svg.read_text()
