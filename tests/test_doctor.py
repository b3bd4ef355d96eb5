"""`gpudeck doctor`: each check of agents/doctor.py on its own (no process), then the op through a
real agent and the command as a user runs it (marked system)."""

from __future__ import annotations

import json
import os
import resource
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gpudeck.agents import doctor
from gpudeck.agents.contract.jobs import JobSpec
from gpudeck.agents.contract.ops import Check
from gpudeck.agents.contract.vocab import Verdict
from support.cli import gpudeck
from support.core import reap

OK, WARN, FAIL = Verdict.OK, Verdict.WARN, Verdict.FAIL
GIB = 2**30


def job_dir(tmp_path: Path):
    return lambda name: tmp_path / "jobs" / name


def extract_job(model: str, out: str, **options) -> JobSpec:
    return JobSpec(name="ex", kind="extract", model=model, options={"data": "/d.jsonl", "out": out, "layers": [1],
                                                                    **options})


def sglang_job(model: str, **kw) -> JobSpec:
    return JobSpec(name="srv", kind="sglang-server", model=model, port=30000, **kw)


def model_dir(tmp_path: Path, weights: int, **config) -> Path:
    """A model directory as transformers writes it: config.json and the safetensors index."""
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    cfg = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096,
           "max_position_embeddings": 32768, "torch_dtype": "bfloat16", **config}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": weights},
                                                                 "weight_map": {}}))
    return d


# ---------------------------------------------------------------- the model


def test_a_missing_model_path_fails_naming_it(tmp_path):
    c = doctor.check_model(extract_job(str(tmp_path / "nowhere"), str(tmp_path / "out")), job_dir(tmp_path), [])
    assert c.verdict is FAIL and str(tmp_path / "nowhere") in c.detail and c.job == "ex"
    assert "copy the model" in c.fix


def test_a_hub_id_is_a_warning_not_a_missing_path(tmp_path):
    c = doctor.check_model(sglang_job("Qwen/Qwen3-8B"), job_dir(tmp_path), [("H200", 141 * 1024.0)])
    assert c.verdict is WARN and "Hugging Face Hub" in c.detail


def test_weights_and_kv_cache_that_fit_say_what_was_assumed(tmp_path):
    d = model_dir(tmp_path, weights=16 * 10**9)  # an 8B model in bf16
    c = doctor.check_model(sglang_job(str(d)), job_dir(tmp_path), [("H200", 141 * 1024.0)])
    assert c.verdict is OK, c.detail
    assert "memory fraction 0.88 assumed" in c.detail and "safetensors index" in c.detail
    # 2 x 32 layers x 8 KV heads x 128 x 2 B = 128 KiB per token
    assert "KV 128 KiB per token" in c.detail and "contexts of 32,768" in c.detail


def test_weights_that_do_not_fit_the_gpus_fail_and_tp_fixes_it(tmp_path):
    d = model_dir(tmp_path, weights=140 * 10**9)  # 70B in bf16 on 80 GB GPUs
    gpus = [("H100", 80 * 1024.0)] * 2
    c = doctor.check_model(sglang_job(str(d), args=["--mem-fraction-static", "0.9"]), job_dir(tmp_path), gpus)
    assert c.verdict is FAIL and "do not fit" in c.detail and "raise tp" in c.fix
    c2 = doctor.check_model(sglang_job(str(d), tp=2, args=["--mem-fraction-static", "0.9"]), job_dir(tmp_path),
                            gpus)
    assert c2.verdict in (OK, WARN) and "tp 2" in c2.detail and "memory fraction" not in c2.detail


def test_tp_over_the_gpus_there_are_fails(tmp_path):
    d = model_dir(tmp_path, weights=16 * 10**9)
    c = doctor.check_model(sglang_job(str(d), tp=8), job_dir(tmp_path), [("H200", 141 * 1024.0)] * 4)
    assert c.verdict is FAIL and "8 GPUs, the node has 4" in c.detail


def test_an_extract_model_is_set_against_one_gpu_in_its_dtype(tmp_path):
    d = model_dir(tmp_path, weights=60 * 10**9, torch_dtype="float32")  # 15B params stored in fp32
    c = doctor.check_model(extract_job(str(d), str(tmp_path / "out")), job_dir(tmp_path), [("L4", 24 * 1024.0)])
    assert c.verdict is FAIL and "bfloat16" in c.detail  # 30 GB in bf16 on a 24 GiB GPU
    ok = doctor.check_model(extract_job(str(d), str(tmp_path / "out")), job_dir(tmp_path), [("H200", 141 * 1024.0)])
    assert ok.verdict is OK, ok.detail


# ---------------------------------------------------------------- disk


def test_an_out_dir_that_cannot_be_made_fails(tmp_path):
    (tmp_path / "blocker").write_text("")
    c = doctor.check_disk(extract_job("/m", str(tmp_path / "blocker" / "out")), job_dir(tmp_path))
    assert c.verdict is FAIL and "is a file" in c.detail and c.job == "ex"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_out_dir_without_write_permission_fails(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    c = doctor.check_disk(extract_job("/m", str(ro / "out")), job_dir(tmp_path))
    assert c.verdict is FAIL and "cannot write" in c.detail


def test_free_disk_against_the_plan_s_projected_bytes(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    ok = doctor.check_disk(extract_job("/m", str(out)), job_dir(tmp_path))
    assert ok.verdict is OK and "no plan.json" in ok.detail
    (out / "plan.json").write_text(json.dumps({"projected_wall_s": 100.0, "projected_bytes": 10**18}))
    short = doctor.check_disk(extract_job("/m", str(out)), job_dir(tmp_path))
    assert short.verdict is FAIL and "short" in short.detail and "free space" in short.fix
    (out / "plan.json").write_text(json.dumps({"projected_bytes": 1000}))
    fits = doctor.check_disk(extract_job("/m", str(out)), job_dir(tmp_path))
    assert fits.verdict is OK and "the plan projects 1.0 KB" in fits.detail


# ---------------------------------------------------------------- S3


def generate_job(s3: str, endpoint: str = "", env=None) -> JobSpec:
    opts = {"prompts": "/p.jsonl", "out": "/o", "servers": ["http://127.0.0.1:1"], "s3": s3}
    if endpoint:
        opts["s3_endpoint"] = endpoint
    return JobSpec(name="gen", kind="generate", options=opts, env=env or {})


def no_aws(monkeypatch, tmp_path):
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role asked for, on no network


def test_no_s3_credentials_fail_before_any_request(monkeypatch, tmp_path):
    pytest.importorskip("boto3", reason="the s3 check reads credentials with boto3 (pip install '.[s3]'); "
                                        "make check's light venv has none, make test's has it")
    no_aws(monkeypatch, tmp_path)
    c = doctor.check_s3(generate_job("s3://bucket/prefix", "http://127.0.0.1:9"))
    assert c.verdict is FAIL and "no S3 credentials" in c.detail and "AWS_ACCESS_KEY_ID" in c.fix


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


# ---------------------------------------------------------------- clock, limits, NVML, torch, timeouts


def test_clock_skew_through_the_console_s_time():
    now = time.time()
    assert doctor.check_clock(now - 0.05, now).verdict is OK
    warn = doctor.check_clock(now + 30, now)
    assert warn.verdict is WARN and "30.0 s behind" in warn.detail and "timedatectl" in warn.fix
    assert doctor.check_clock(now - 3600, now).verdict is FAIL


def test_low_limits_warn_or_fail_with_the_fix():
    def limits(nofile, nproc):
        table = {resource.RLIMIT_NOFILE: nofile, resource.RLIMIT_NPROC: nproc}
        return lambda which: table[which]

    inf = resource.RLIM_INFINITY
    fine = doctor.check_limits(limits((1 << 20, 1 << 20), (inf, inf)))
    assert [c.verdict for c in fine] == [OK, OK] and "unlimited" in fine[1].detail
    low = doctor.check_limits(limits((4096, 1 << 20), (100, 100)))
    assert [c.name for c in low] == ["open files", "processes"]
    assert low[0].verdict is WARN and "ulimit -n 65536" in low[0].fix  # the hard limit allows it
    assert low[1].verdict is FAIL and "limits.conf" in low[1].fix
    assert doctor.check_limits(limits((512, 512), (inf, inf)))[0].verdict is FAIL


def test_no_nvml_fails_a_node_with_gpu_jobs_and_warns_one_without():
    assert doctor.nvml_verdict(None, "libnvidia-ml.so not found", "install", ["ex"]).verdict is FAIL
    none = doctor.nvml_verdict(None, "libnvidia-ml.so not found", "install", [])
    assert none.verdict is WARN and "no job of this node needs a GPU" in none.detail
    assert doctor.needs_gpu(extract_job("/m", "/o")) and not doctor.needs_gpu(extract_job("/m", "/o", device="cpu"))
    assert doctor.needs_gpu(JobSpec(name="c", command=["true"], gpus=[0]))


def test_torch_missing_slow_or_without_cuda():
    th = doctor.Thresholds(import_warn_s=10.0)
    missing = {"error": "ModuleNotFoundError: No module named 'torch'", "missing": True}
    assert doctor.torch_verdict("/py", missing, "", ["ex"], [], th).verdict is FAIL
    assert doctor.torch_verdict("/py", missing, "", [], [], th).verdict is WARN
    slow = doctor.torch_verdict("/py", {"import_s": 12.34, "version": "2.5", "cuda": True, "devices": 8,
                                        "device": "H200", "cuda_s": 1.0}, "", ["ex"], ["ex"], th)
    assert slow.verdict is WARN and "imported in 12.3 s" in slow.detail and "over 10 s" in slow.detail
    cpu = doctor.torch_verdict("/py", {"import_s": 1.0, "version": "2.5+cpu", "cuda": False, "cuda_build": None},
                               "", ["ex"], ["ex"], th)
    assert cpu.verdict is FAIL and "CUDA index" in cpu.fix
    hung = doctor.torch_verdict("/py", None, "did not finish within 120 s", ["ex"], [], th)
    assert hung.verdict is FAIL and "120 s" in hung.detail


def test_a_check_that_hangs_is_a_failed_line_and_the_others_still_report():
    release = threading.Event()
    try:
        got = doctor.run_checks([("hangs", 0.2, lambda: [release.wait(), Check("hangs", OK, "never")][1:]),
                                 ("quick", 5.0, lambda: [Check("quick", OK, "fine")])])
    finally:
        release.set()
    assert [(c.name, c.verdict) for c in got] == [("hangs", FAIL), ("quick", OK)]
    assert "did not finish within 0.2 s" in got[0].detail


def test_a_check_that_raises_is_a_failed_line():
    got = doctor.run_checks([("boom", 5.0, lambda: [1 / 0])])
    assert got[0].verdict is FAIL and "ZeroDivisionError" in got[0].detail


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
