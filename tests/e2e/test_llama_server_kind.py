"""`kind = "llama-server"` as a user drives it: a fleet file with llama.cpp's server (the CPU
build `make test` makes, SmolLM2-135M), checked by `gpudeck doctor`, launched, ready, its figures
(tokens/s, requests running, KV use from /slots) read by `gpudeck status --json` from the node's
watcher, killed with the verdict, relaunched. The same program built with CUDA ran the same way
on an H200 (bench/device_engine.sh, bench/results/engine_llama).

Runs in the `llama` xdist group (tests/support/tiers.py): llama-server takes the CPU."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from support.cli import gpudeck
from support.core import reap
from support.generate import free_port
from support.llama import BINARY, SCRIPT
from support.wait import wait_for

pytestmark = pytest.mark.timeout(400)


def gguf() -> str:
    import os
    import subprocess
    import sys
    return subprocess.run(["bash", str(SCRIPT), "model"], capture_output=True, text=True, check=True,
                          env={**os.environ, "PY": sys.executable}).stdout.strip()


def fleet_file(tmp_path: Path, home: Path, port: int, binary: str, model: str) -> Path:
    f = tmp_path / "fleet.toml"
    f.write_text(f'''
[defaults]
nvml = false
interval = 0.2

[[nodes]]
name = "box"
local = true
home = "{home}"

[[jobs]]
name = "llama"
node = "box"
kind = "llama-server"
binary = "{binary}"
model = "{model}"
port = {port}
slots = 2
context = 1024
gpu_layers = 0
args = ["--threads", "1"]
''')
    return f


def job(fleet: Path) -> dict:
    r = gpudeck("status", "-f", str(fleet), "--json", check=False)
    assert r.returncode == 0, r.stderr
    return next(j for j in json.loads(r.stdout)["jobs"] if j["name"] == "llama")


def engine(fleet: Path) -> dict:
    return job(fleet).get("engine") or {}


@pytest.fixture
def llama_fleet(tmp_path):
    if not BINARY.exists():
        pytest.skip(f"llama-server is not built at {BINARY}: run `make llama-server` (make test builds it)")
    home = tmp_path / "home"
    home.mkdir()
    fleet = fleet_file(tmp_path, home, free_port(), str(BINARY), gguf())
    yield fleet
    gpudeck("watch", "stop", "-f", str(fleet), check=False)
    reap(home)


def test_llama_server_kind_doctor_launch_ready_figures_kill_relaunch(llama_fleet):
    fleet = llama_fleet
    port = int(next(ln for ln in fleet.read_text().splitlines() if ln.startswith("port")).split("=")[1])
    base = f"http://127.0.0.1:{port}"

    checks = json.loads(gpudeck("doctor", "-f", str(fleet), "--json", check=False).stdout)
    [engine_check] = [c for n in checks["nodes"] for c in n["checks"] if c["name"] == "engine"]
    assert engine_check["verdict"] == "ok" and "version:" in engine_check["detail"], engine_check
    assert "prompt cache on (the server's default" in engine_check["detail"], engine_check  # args: --threads 1

    gpudeck("watch", "start", "-f", str(fleet))
    r = gpudeck("launch", "-f", str(fleet), "llama")
    assert "launched llama" in r.stdout
    ready = wait_for(lambda: (e := engine(fleet)).get("state") == "ready" and e, timeout=120,
                     what="the engine ready (its /health 200)")
    assert ready["flavor"] == "llamacpp" and ready["url"] == f"{base}/metrics"
    assert ready["running"] == 0 and ready["kv_usage"] == 0  # idle slots hold nothing

    # two requests, one per slot, long enough to be seen running
    said: list = []

    def ask(text: str) -> None:
        said.append(httpx.post(base + "/v1/chat/completions", timeout=300, json={
            "max_tokens": 160, "ignore_eos": True, "messages": [{"role": "user", "content": text}]}).json())
    askers = [threading.Thread(target=ask, args=(t,)) for t in ("Write a story.", "Write a poem.")]
    for t in askers:
        t.start()
    busy = wait_for(lambda: (e := engine(fleet)).get("running") and e.get("kv_usage") and e, timeout=120,
                    what="requests running and KV held, from /metrics and /slots")
    assert 0 < busy["kv_usage"] <= 1 and busy["running"] >= 1
    for t in askers:
        t.join(300)
    made = sum(s["usage"]["completion_tokens"] for s in said)
    assert made == 320
    done = wait_for(lambda: (e := engine(fleet)).get("generation_tokens") == made and (e.get("tokens_per_s") or 0) > 0
                    and e, timeout=60, what="the engine's own token counter and its rate")
    assert done["running"] == 0

    r = gpudeck("kill", "-f", str(fleet), "llama")
    assert "killed llama" in r.stdout and "held no GPU memory" in r.stdout
    assert job(fleet)["state"] == "killed"
    with pytest.raises(httpx.ConnectError):
        httpx.get(base + "/health", timeout=5)

    r = gpudeck("relaunch", "-f", str(fleet), "llama")
    assert "attempt 2" in r.stdout
    again = wait_for(lambda: (j := job(fleet))["attempt"] == 2 and (j.get("engine") or {}).get("state") == "ready"
                     and j["engine"], timeout=120, what="the relaunched engine ready")
    # a new attempt's figures are its own: none of the last attempt's 320 tokens
    assert again["generation_tokens"] == 0 and not again["tokens_per_s"]
    gpudeck("kill", "-f", str(fleet), "llama")


def test_llama_server_kind_without_its_program_is_refused_before_the_launch(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    fleet = fleet_file(tmp_path, home, free_port(), str(tmp_path / "no-such-llama-server"), str(model))
    try:
        r = gpudeck("launch", "-f", str(fleet), "llama", check=False)
        assert r.returncode != 0
        assert "no-such-llama-server is not an executable file" in r.stderr and "binary =" in r.stderr, r.stderr
        assert not (home / "jobs" / "llama" / "state.json").exists() or job(fleet)["state"] != "running"
        checks = json.loads(gpudeck("doctor", "-f", str(fleet), "--json", check=False).stdout)
        [c] = [c for n in checks["nodes"] for c in n["checks"] if c["name"] == "engine"]
        assert c["verdict"] == "fail" and "no-such-llama-server" in c["detail"]
    finally:
        reap(home)
