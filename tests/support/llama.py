"""What tests/e2e/test_generate_llama.py and the modules that import it share (split out of
tests/test_generate_llama.py when the suite went into tiers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from support.generate import ROOT, child_env, free_port
from support.wait import wait_for

SCRIPT = ROOT / "tests" / "tools" / "llama_server.sh"
CACHE = Path(os.environ.get("CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "gpudeck-test")
BINARY = CACHE / "llama-server"

QUESTIONS = ["What is the capital of France?", "Name a primary color.", "What is 2 + 2?", "Say hello in Spanish.",
             "What do bees make?", "Name a planet.", "What is water made of?", "Give a synonym for happy."]


@pytest.fixture
def llama_server(tmp_path):
    port = free_port()
    log = open(tmp_path / "llama.log", "wb")
    env = child_env({"PY": sys.executable})  # the script finds the GGUF through this interpreter
    proc = subprocess.Popen(["bash", str(SCRIPT), "run", str(port)], stdout=log, stderr=log, env=env,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"llama-server exited {proc.returncode}: {(tmp_path / 'llama.log').read_text()[-2000:]}")
        try:
            return httpx.get(url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False
    try:
        wait_for(ready, timeout=120, interval=0.2, what="llama-server to load SmolLM2")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
