"""Real parts for the generation tests: sim-engine processes, gpudeck generate processes,
a moto S3 server on loopback, prompt files, and readers that check shards strictly."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import pytest

from support.core import PY, ROOT, free_port, read_jsonl_strict  # noqa: F401 (re-exported)
from support.s3 import DROP_ENV as _DROP_ENV, S3_ENV, MotoS3  # noqa: F401 (re-exported)



def child_env(extra: Optional[dict] = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(S3_ENV)
    env.update(extra or {})
    return env



# ---------------------------------------------------------------- sim-engine

class SimEngineProc:
    """``gpudeck sim-engine`` as a real process on loopback."""

    def __init__(self, *args: str, port: int = 0, log_dir: Optional[Path] = None) -> None:
        self.args = list(args)
        self.log_path = (log_dir / f"sim-{time.monotonic_ns()}.log") if log_dir else None
        self.start(port)

    def start(self, port: int = 0) -> None:
        self.proc = subprocess.Popen([PY, "-m", "gpudeck.console", "sim-engine", "--port", str(port), *self.args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env(), cwd=ROOT,
                                     start_new_session=True)
        line = self.proc.stdout.readline().decode()
        m = re.search(r"listening on (http://\S+)", line)
        if not m:
            rest = self.proc.stdout.read().decode() if self.proc.poll() is not None else ""
            raise AssertionError(f"sim-engine did not start: {line}{rest}")
        self.url = m.group(1)
        self.port = int(self.url.rsplit(":", 1)[1])
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for _ in self.proc.stdout:
            pass

    def kill(self) -> None:
        """kill -9, as a crash would."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def metric(self, name: str) -> float:
        """Sum of one metric family's samples on /metrics (e.g. sglang:num_requests_total)."""
        import httpx
        text = httpx.get(self.url + "/metrics", timeout=10).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total


@pytest.fixture
def sim_engines(tmp_path):
    """Start sim-engines with ``start(*args)``; all are stopped after the test."""
    procs: list[SimEngineProc] = []

    def start(*args: str, port: int = 0) -> SimEngineProc:
        p = SimEngineProc(*args, port=port, log_dir=tmp_path)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()


# ---------------------------------------------------------------- gpudeck generate

def generate_argv(prompts: Path, out: Path, servers: list[str], *extra: str) -> list[str]:
    argv = [PY, "-m", "gpudeck.console", "generate", "--prompts", str(prompts), "--out", str(out)]
    for s in servers:
        argv += ["--server", s]
    return argv + list(extra)


class GenerateProc:
    """One ``gpudeck generate`` process; its stderr goes to ``log`` (appended across runs)."""

    def __init__(self, argv: list[str], log: Path, env: Optional[dict] = None) -> None:
        self.log = log
        with open(log, "ab") as f:
            f.write(f"\n=== {' '.join(argv[3:])}\n".encode())
            self.proc = subprocess.Popen(argv, stdout=f, stderr=f, env=child_env(env), cwd=ROOT,
                                         start_new_session=True)

    def wait(self, timeout: float = 180) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"gpudeck generate did not finish within {timeout:.0f} s; log:\n"
                                 f"{self.log.read_text()[-4000:]}")

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def run_generate(argv: list[str], log: Path, timeout: float = 180, env: Optional[dict] = None) -> int:
    return GenerateProc(argv, log, env).wait(timeout)


# ---------------------------------------------------------------- prompts and shards

def write_prompts(path: Path, n: int, start: int = 0, formats: tuple[str, ...] = ("openai", "sharegpt", "multi"),
                  prefix: str = "p") -> list[str]:
    """``n`` prompts cycling through the formats; returns their ids in file order."""
    ids = []
    with open(path, "a") as f:
        for i in range(start, start + n):
            pid = f"{prefix}{i}"
            kind = formats[i % len(formats)]
            if kind == "openai":
                obj = {"id": pid, "messages": [{"role": "user", "content": f"Explain item {i} in a few words."}]}
            elif kind == "sharegpt":
                obj = {"id": pid, "conversations": [{"from": "human", "value": f"What is {i} squared?"},
                                                    {"from": "gpt", "value": "OK."}]}
            else:
                obj = {"id": pid, "messages": [{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": f"first question {i}"},
                                               {"role": "assistant", "content": "first answer"},
                                               {"role": "user", "content": f"second question {i}"},
                                               {"role": "assistant", "content": "an old answer to replace"}]}
            f.write(json.dumps(obj) + "\n")
            ids.append(pid)
    return ids


def read_shards(out: Path, shard_size: int = 1000, allow_open: bool = False) -> dict[str, list[dict]]:
    """Closed shards of ``out``: name -> records; checks names, sizes and that each parses."""
    shards = {}
    for p in sorted(out.iterdir()):
        if p.name.endswith(".jsonl.tmp"):
            assert allow_open, f"an open shard is left over: {p.name}"
            continue
        if p.name.startswith("shard-"):
            assert re.fullmatch(r"shard-\d{6}\.jsonl", p.name), f"unexpected shard name {p.name}"
            recs = read_jsonl_strict(p.read_bytes(), str(p))
            assert 0 < len(recs) <= shard_size, f"{p.name} holds {len(recs)} records"
            shards[p.name] = recs
    return shards


def id_counts(shards: dict[str, list[dict]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for recs in shards.values():
        for r in recs:
            counts[r["id"]] = counts.get(r["id"], 0) + 1
    return counts


def assert_exactly_once(shards: dict[str, list[dict]], ids: list[str]) -> None:
    counts = id_counts(shards)
    dup = {i: c for i, c in counts.items() if c > 1}
    missing = [i for i in ids if i not in counts]
    extra = [i for i in counts if i not in set(ids)]
    assert not dup, f"{len(dup)} ids appear more than once, e.g. {list(dup.items())[:5]}"
    assert not missing, f"{len(missing)} ids are missing, e.g. {missing[:5]}"
    assert not extra, f"{len(extra)} ids that are not prompts, e.g. {extra[:5]}"


def read_done(path: Path) -> list[str]:
    return [line for line in path.read_text().split("\n") if line]


