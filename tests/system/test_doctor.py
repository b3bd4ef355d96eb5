"""`gpudeck doctor`: each check of agents/doctor.py on its own (no process), then the op through a
real agent and the command as a user runs it (marked system).

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_doctor.py."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpudeck.agents import doctor
from support.cli import gpudeck
from support.core import reap
from support.doctor import FAIL, OK, generate_job, model_dir, no_aws


@pytest.mark.system  # moto's server
def test_s3_credentials_and_bucket_reachable_and_never_printed(moto_s3, monkeypatch, tmp_path):
    moto_s3.client().create_bucket(Bucket="runs")
    c = doctor.check_s3(generate_job("s3://runs/gen", moto_s3.endpoint))
    assert c.verdict is OK and "s3://runs" in c.detail and "reachable" in c.detail, c
    missing = doctor.check_s3(generate_job("s3://nope/gen", moto_s3.endpoint))
    assert missing.verdict is FAIL and "no such bucket" in missing.detail
    # the job's own env is used, and its secret is never part of a line
    no_aws(monkeypatch, tmp_path)
    env = {"AWS_ACCESS_KEY_ID": "AKIAJOBKEY", "AWS_SECRET_ACCESS_KEY": "s3cr3t-of-the-job"}
    mine = doctor.check_s3(generate_job("s3://runs/gen", moto_s3.endpoint, env=env))
    assert mine.verdict is OK, mine
    assert not any(secret in json.dumps([mine.detail, mine.fix]) for secret in ("AKIAJOBKEY", "s3cr3t"))


# ---------------------------------------------------------------- through a real agent


@pytest.mark.system
def test_the_op_through_an_agent_checks_its_jobs_and_the_clock(start_agent, home, tmp_path):
    (tmp_path / "blocker").write_text("")
    a = start_agent()
    try:
        job = {"name": "ex", "kind": "extract", "model": str(tmp_path / "no-model"), "options": {"data": "/d",
                                                            "out": str(tmp_path / "blocker" / "out"), "layers": [1],
                                                            "device": "cpu"}}
        a.ok("configure", jobs=[job])
        refused = a.request("doctor", timeout_s=-1)
        assert not refused["ok"] and "'timeout_s' must be" in refused["error"]
        report = a.ok("doctor", console_time=time.time() - 3600, venv=str(tmp_path / "no-venv"), timeout=120)
        by = {(c["name"], c["job"]): c for c in report["checks"]}
        assert report["node"] == "testnode"
        assert by[("model", "ex")]["verdict"] == "fail" and "no-model" in by[("model", "ex")]["detail"]
        assert by[("disk", "ex")]["verdict"] == "fail" and "is a file" in by[("disk", "ex")]["detail"]
        assert by[("clock", None)]["verdict"] == "fail" and "ahead of" in by[("clock", None)]["detail"]
        assert by[("python", None)]["verdict"] == "warn" and "gpudeck deploy" in by[("python", None)]["fix"]
        assert {"torch", "nvml", "containment", "open files", "processes"} <= {c["name"] for c in report["checks"]}
    finally:
        a.close()
        reap(home)


# ---------------------------------------------------------------- the command


def slow_python(tmp_path: Path, sleep_s: float) -> Path:
    """A `python` for the node whose `import torch` takes ``sleep_s``: a fake torch package
    first on its PYTHONPATH (a CPU build, as far as anyone asks)."""
    fake = tmp_path / "fake-torch"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(textwrap.dedent(f'''
        import time
        time.sleep({sleep_s})
        __version__ = "9.9.9+fake"
        class version:
            cuda = None
        class cuda:
            @staticmethod
            def is_available():
                return False
    '''))
    py = tmp_path / "slow-python"
    py.write_text(f'#!/bin/sh\nPYTHONPATH="{fake}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n')
    py.chmod(0o755)
    return py


def doctor_fleet(tmp_path: Path, home: Path, python: Path, model: Path, out: Path) -> Path:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(textwrap.dedent(f'''
        [[nodes]]
        name = "box"
        local = true
        python = "{python}"
        home = "{home}"
        nvml = false

        [[jobs]]
        name = "ex"
        kind = "extract"
        node = "box"
        model = "{model}"
        data = "/data.jsonl"
        out = "{out}"
        layers = [1]
        device = "cpu"
    '''))
    return fleet


@pytest.mark.system
def test_the_command_reports_a_slow_import_with_its_time(tmp_path, home):
    model = model_dir(tmp_path, weights=2 * 10**9)
    fleet = doctor_fleet(tmp_path, home, slow_python(tmp_path, 2.0), model, tmp_path / "out")
    r = gpudeck("doctor", "-f", str(fleet), "--json", "--import-warn", "1", check=False)
    doc = json.loads(r.stdout)
    [node] = doc["nodes"]
    by = {c["name"]: c for c in node["checks"]}
    assert node["node"] == "box" and node["error"] is None
    torch = by["torch"]
    assert torch["verdict"] == "warn" and "9.9.9+fake" in torch["detail"] and "over 1 s" in torch["detail"]
    took = float(torch["detail"].split("imported in ")[1].split(" s")[0])
    assert took >= 2.0 and "importtime" in torch["fix"]
    assert by["model"]["verdict"] == "ok" and by["disk"]["verdict"] == "ok"
    fails = [c for c in node["checks"] if c["verdict"] == "fail"]
    assert r.returncode == (1 if fails else 0), (fails, r.stderr)
    # the text: one line per check, the fix under a warning
    text = gpudeck("doctor", "-f", str(fleet), "--import-warn", "1", check=False)
    assert text.stdout.startswith("box: ") and "  warn  torch" in text.stdout and "fix: " in text.stdout


@pytest.mark.system
def test_the_command_fails_on_an_import_past_its_timeout_and_a_missing_model(tmp_path, home):
    fleet = doctor_fleet(tmp_path, home, slow_python(tmp_path, 30.0), tmp_path / "no-model", tmp_path / "out")
    r = gpudeck("doctor", "-f", str(fleet), "--check-timeout", "2", "--node", "box", check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "  fail  torch" in r.stdout and "did not finish within 2 s" in r.stdout
    assert "  fail  model ex" in r.stdout and "no-model does not exist" in r.stdout


@pytest.mark.system
def test_an_unknown_node_is_a_usage_error_naming_the_fleet_s_nodes(tmp_path, home):
    fleet = doctor_fleet(tmp_path, home, Path(sys.executable), tmp_path / "m", tmp_path / "out")
    r = gpudeck("doctor", "-f", str(fleet), "--node", "nope", check=False)
    assert r.returncode == 2 and "unknown node 'nope'" in r.stderr and "box" in r.stderr.split("its nodes: ")[1]
