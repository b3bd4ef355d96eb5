"""Engine scrapers: the fixture pages, a real HTTP server playing every state, a real llama-server.

The e2e tier's tests of this file (end to end); the others are in tests/unit/test_engines.py,
tests/system/test_engines.py."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from gpudeck.agents.sense.engines import EngineScraper
from support import ROOT
from support.wait import wait_for

LLAMA = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpudeck-test" / "llama-server"


@pytest.fixture(scope="module")
def llama_server():
    if not LLAMA.exists():
        pytest.skip(f"llama-server is not built at {LLAMA}: run `make llama-server` (make test builds it)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(["bash", str(ROOT / "tests/tools/llama_server.sh"), "run", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PY": shutil.which("python") or "python3"})
    base = f"http://127.0.0.1:{port}"

    def healthy():
        try:
            return httpx.get(base + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, timeout=120, what="llama-server /health", interval=0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.system
async def test_real_llama_server_metrics(llama_server):
    s = EngineScraper(llama_server + "/metrics", window_s=600)
    async with httpx.AsyncClient(timeout=30) as client:
        e = await s.poll(client)
        assert e.state == "ready" and e.flavor == "llamacpp", e
        before = e.generation_tokens
        r = await client.post(llama_server + "/v1/chat/completions", json={
            "model": "smollm2", "max_tokens": 24, "temperature": 0,
            "messages": [{"role": "user", "content": "Count from one to twenty."}]})
        produced = r.json()["usage"]["completion_tokens"]
        assert produced > 0
        e = await s.poll(client)
        assert e.generation_tokens - before == produced
        assert e.tokens_per_s and e.tokens_per_s > 0
        assert e.running is not None and e.queued is not None


@pytest.mark.system
def test_agent_scrapes_a_real_llama_server_for_a_job(start_agent, llama_server, reap_jobs):
    a = start_agent()
    a.ok("configure", jobs=[{"name": "llama", "command": ["sleep", "120"], "metrics_url": llama_server + "/metrics"}])
    a.ok("launch", job="llama")
    snap = a.wait_snapshot(lambda s: (a.job(s, "llama").get("engine") or {}).get("state") == "ready",
                           timeout=30, what="llama-server ready")
    engine = a.job(snap, "llama")["engine"]
    assert engine["flavor"] == "llamacpp" and engine["running"] is not None
    httpx.post(llama_server + "/v1/chat/completions", timeout=60, json={
        "model": "smollm2", "max_tokens": 32, "messages": [{"role": "user", "content": "Say hello."}]})
    snap = a.wait_snapshot(lambda s: ((a.job(s, "llama").get("engine") or {}).get("tokens_per_s") or 0) > 0,
                           timeout=30, what="tokens/s from the counter")
    assert a.job(snap, "llama")["state"] == "running"
