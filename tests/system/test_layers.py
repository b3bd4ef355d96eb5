"""The layers: agents/ imports neither textual nor asyncssh; remote/ never imports textual; the
console's core and its headless commands work without textual.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_layers.py."""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import subprocess
import sys

import pytest

from support import ROOT, env_with_repo


def _modules(package: str) -> list[str]:
    pkg = importlib.import_module(package)
    return [package] + [m.name for m in pkgutil.walk_packages(pkg.__path__, prefix=package + ".")
                        if not m.name.rsplit(".", 1)[1].startswith("_")]


@pytest.mark.system
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


CONSOLE_CORE = ["gpudeck.console.state", "gpudeck.console.state_jobs", "gpudeck.console.state_nodes",
                "gpudeck.console.state_costs", "gpudeck.console.state_charts", "gpudeck.console.state_json",
                "gpudeck.console.rows", "gpudeck.console.series", "gpudeck.console.chart",
                "gpudeck.console.selection", "gpudeck.console.formatting", "gpudeck.console.actions", "gpudeck.console.timeline",
                "gpudeck.console.since", "gpudeck.console.looked", "gpudeck.console.cost", "gpudeck.console.pacing",
                "gpudeck.console.cli"]


@pytest.mark.system
def test_the_console_core_and_headless_commands_run_without_textual():
    # the core modules and every command module imported in a fresh interpreter, the parser
    # built (each command registers), a FleetState turned into rows, selections and the
    # status report: textual never loads
    mods = CONSOLE_CORE + _modules("gpudeck.console.commands")
    assert "gpudeck.console.commands.status" in mods and "gpudeck.console.commands.common" in mods
    code = (f"import importlib, sys\n"
            f"for m in {mods!r}:\n"
            f"    importlib.import_module(m)\n"
            f"from gpudeck.console.cli import build_parser\n"
            f"from gpudeck.console.commands.status import render_status\n"
            f"from gpudeck.console.selection import select_alerts, select_events, select_fleet, select_jobs\n"
            f"from gpudeck.console.state import FleetState\n"
            f"from gpudeck.remote.fleet import local_fleet\n"
            f"build_parser()\n"
            f"state = FleetState(local_fleet())\n"
            f"state.mark_unreachable('local', 'no agent here')\n"
            f"select_jobs(state.job_rows()), select_fleet(state.fleet_rows()), select_alerts(state.alert_rows())\n"
            f"from gpudeck.console.since import summarize\n"
            f"summarize(select_events(state.timeline.rows()), 0.0, 1.0)\n"
            f"state.totals(), state.to_json(), render_status(state)\n"
            f"print(','.join(sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_with_repo(), cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"the console's core imported {r.stdout.strip()}"


@pytest.mark.system
def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports") or str(ROOT / ".venv/bin/lint-imports")
    r = subprocess.run([exe], capture_output=True, text=True, cwd=ROOT, env=env_with_repo(), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout
