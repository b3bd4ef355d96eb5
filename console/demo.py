"""The demo fleet: this machine, a simulated SGLang server, and a generation job against it.

``build_demo(root)`` writes ``root/fleet.toml`` and what the jobs read. Everything lives
under ``root`` (default ``~/.cache/gpudeck-demo``), the agent's state directory included,
so the demo never sees or touches the operator's own jobs. The server is
``agents.workers.sim_engine`` (real HTTP, SGLang's routes and metric names).

The generation job is the built-in ``generate`` worker: it keeps requests in flight against
the server, writes shards and a done-set, reports ``progress.json``, and on a relaunch skips
every prompt it finished before.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
from pathlib import Path

from gpudeck.agents.jobs import JobKind

SERVER = "sim-sglang"
GENERATE = "gen"
JOBS = (SERVER, GENERATE)
PROMPTS = 100_000
TOK_S = 40.0  # per request: the server answers many requests at once
CONCURRENCY = 32
OUT_TOKENS = "64-512"


def demo_dir() -> Path:
    if os.environ.get("GPUDECK_DEMO_DIR"):
        return Path(os.environ["GPUDECK_DEMO_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "gpudeck-demo"


def build_demo(root: Path, *, python: str = sys.executable, reset: bool = False, prompts: int = PROMPTS,
               interval_s: float = 1.0) -> Path:
    """Write the demo fleet file and its data under ``root``; return the fleet file's path."""
    root = Path(root).expanduser().resolve()
    if reset and root.exists():
        shutil.rmtree(root)
    (root / "home").mkdir(parents=True, exist_ok=True)
    (root / "out").mkdir(exist_ok=True)
    prompts_path = root / "prompts.jsonl"
    if not prompts_path.exists():
        _write_prompts(prompts_path, prompts)
    port_file = root / "port"
    port = int(port_file.read_text()) if port_file.exists() else _free_port()
    port_file.write_text(f"{port}\n")
    url = f"http://127.0.0.1:{port}"
    server = [python, "-m", "gpudeck.agents.workers.sim_engine", "--port", str(port), "--tok-s", f"{TOK_S:g}",
              "--out-tokens", OUT_TOKENS, "--model", "Qwen3-8B (simulated)",
              "--latency-ms", "150", "--jitter-ms", "100"]
    fleet = f"""\
# The gpudeck demo: written by `gpudeck demo`; rewritten on every start.
[defaults]
home = {_toml(str(root / "home"))}
interval = {interval_s}

[[jobs]]
name = "{SERVER}"
kind = {_toml(JobKind.SGLANG_SERVER.value)}
command = {_toml(server)}
port = {port}
metrics_url = "{url}/metrics"

[[jobs]]
name = "{GENERATE}"
kind = {_toml(JobKind.GENERATE.value)}
servers = ["{SERVER}"]
prompts = {_toml(str(prompts_path))}
out = {_toml(str(root / "out"))}
concurrency = {CONCURRENCY}
max_tokens = 480
model_name = "Qwen3-8B (simulated)"
stall_after_s = 60
"""
    path = root / "fleet.toml"
    path.write_text(fleet)
    return path


async def stop_demo_jobs(fleet) -> list[str]:
    """Kill the demo's jobs (the demo should not leave work running on a laptop)."""
    from gpudeck.remote.client import AgentError, FleetClient, RequestFailed

    client = FleetClient(fleet)
    said = []
    try:
        for job in reversed(JOBS):
            try:
                r = await client.kill(job, grace_s=5.0)
                said.append(f"{job}: {r.message}")
            except (AgentError, RequestFailed, asyncio.TimeoutError, OSError) as exc:
                said.append(f"{job}: not stopped: {exc}")
    finally:
        await client.close()
    return said


def _write_prompts(path: Path, n: int) -> None:
    topics = ("a binary heap", "TCP slow start", "the KV cache", "speculative decoding", "a B-tree",
              "gradient checkpointing", "rotary embeddings", "a bloom filter", "NCCL all-reduce", "RAID 6")
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, "messages": [{"role": "user", "content":
                    f"Explain {topics[i % len(topics)]} to a new engineer, case {i}."}]}) + "\n")
    os.replace(tmp, path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml(v) -> str:
    return json.dumps(v)  # a JSON string or list of strings is valid TOML
