"""The helpers every test file shares: paths, a real agent process over pipes, job specs,
process checks, a free loopback port (waiting on conditions is support.wait)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Optional

from support.wait import wait_for


ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PY = sys.executable


def env_with_repo(extra: Optional[dict] = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


class AgentProc:
    """A real `python -m gpudeck.agents` over pipes, driven line by line as the console does."""

    def __init__(self, home: Path, interval: float = 0.2, extra_args: tuple = (), env: Optional[dict] = None) -> None:
        self.home = home
        self.proc = subprocess.Popen(
            [PY, "-m", "gpudeck.agents", "--home", str(home), "--node", "testnode", "--interval", str(interval),
             "--no-nvml", *extra_args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_with_repo(env), cwd=ROOT)
        self.messages: "queue.Queue[dict]" = queue.Queue()
        self.replies: dict[int, dict] = {}
        self.snapshots: list[dict] = []
        self.other: list[dict] = []
        self.stderr: list[str] = []
        self._ids = 1000
        self._cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        self.hello = self.wait_message(lambda m: m["type"] == "hello", what="hello")

    def _read(self) -> None:
        for line in self.proc.stdout:
            msg = json.loads(line)
            with self._cv:
                if msg["type"] == "reply":
                    self.replies[msg["id"]] = msg
                elif msg["type"] == "snapshot":
                    self.snapshots.append(msg)
                else:
                    self.other.append(msg)
                self._cv.notify_all()

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace"))

    def wait_message(self, pred, timeout: float = 15.0, what: str = "message") -> dict:
        def find():
            with self._cv:
                for m in self.other + self.snapshots:
                    if pred(m):
                        return m
            return None
        return wait_for(find, timeout, what=what)

    def send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def request(self, op: str, timeout: float = 30.0, **args) -> dict:
        self._ids += 1
        rid = self._ids
        self.send_raw((json.dumps({"type": "request", "id": rid, "op": op, "args": args}) + "\n").encode())
        return wait_for(lambda: self.replies.get(rid), timeout, what=f"reply to {op}")

    def ok(self, op: str, **args) -> dict:
        r = self.request(op, **args)
        assert r["ok"], r["error"]
        return r["result"]

    def latest(self) -> Optional[dict]:
        with self._cv:
            return self.snapshots[-1] if self.snapshots else None

    def wait_snapshot(self, pred, timeout: float = 15.0, what: str = "snapshot") -> dict:
        def find():
            snap = self.latest()
            return snap if snap is not None and pred(snap) else None
        return wait_for(find, timeout, what=what)

    def job(self, snap: dict, name: str) -> dict:
        return next(j for j in snap["jobs"] if j["name"] == name)

    def close(self) -> int:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def reap(home: Path) -> None:
    """Kill every process group that the jobs under ``home`` left behind."""
    import signal
    for state in home.glob("jobs/*/state.json"):
        try:
            rec = json.loads(state.read_text())
        except ValueError:
            continue
        try:
            if rec.get("pgid"):
                os.killpg(rec["pgid"], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if rec.get("cgroup"):  # what left the group is still in the attempt's cgroup
            try:
                Path(rec["cgroup"], "cgroup.kill").write_text("1")
                wait_for(lambda: not Path(rec["cgroup"], "cgroup.procs").read_text().strip(), 10,
                         what="the cgroup to empty")
                os.rmdir(rec["cgroup"])
                os.rmdir(os.path.dirname(rec["cgroup"]))  # the home's, once it holds no attempt
            except OSError:
                pass


def command_job(name: str, script: str, **kw) -> dict:
    """A `command` job spec running a shell script."""
    return {"name": name, "kind": "command", "command": ["sh", "-c", script], **kw}


def pid_alive(pid: int) -> bool:
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_jsonl_strict(data: bytes, where: str) -> list[dict]:
    """Every line must be a complete JSON record with an id: a corrupt shard fails the test."""
    assert data.endswith(b"\n") or not data, f"{where} does not end with a newline"
    records = []
    for n, raw in enumerate(data.split(b"\n")[:-1], start=1):
        try:
            rec = json.loads(raw)
        except ValueError as exc:
            raise AssertionError(f"{where}:{n} does not parse: {exc}: {raw[:100]!r}") from None
        assert isinstance(rec, dict) and "id" in rec, f"{where}:{n} is not a record"
        records.append(rec)
    return records
