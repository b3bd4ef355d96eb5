"""Real parts for the watcher tests: a webhook receiver on loopback (stdlib http.server) that
records every message, and a fleet file with a watcher that the test stops afterwards."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

from support import ROOT, env_with_repo, reap
from support.wait import wait_for

TOKEN = "T0KEN-s3cr3t-9f8e7d6c5b4a"  # in every webhook URL of these tests: it must never be printed


class Receiver:
    """A webhook receiver: ``mode`` is "up" (answers 200, ``delay_s`` after it took the
    message), "down" (answers 503) or "hang" (reads the request, never answers).
    ``stop()``/``start()`` close and reopen the port."""

    def __init__(self, port: int = 0) -> None:
        self.messages: list[dict] = []
        self.gets: list[tuple[float, str]] = []  # (when, path) of every GET: a push monitor's pings
        self.raw: list[tuple[str, dict, bytes]] = []  # (path, headers, body) of every request, taken or not
        self.mode = "up"
        self.delay_s = 0.0
        self._cv = threading.Condition()
        self._release = threading.Event()
        self.port = port
        self.start()

    def start(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                with outer._cv:
                    outer.gets.append((time.time(), self.path))
                    outer._cv.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer._cv:
                    outer.raw.append((self.path, dict(self.headers), body))
                mode = outer.mode
                if mode == "hang":
                    outer._release.wait(30)
                    return
                if mode == "down":
                    self.send_response(503)
                    self.end_headers()
                    return
                with outer._cv:
                    try:
                        doc = json.loads(body)
                    except ValueError:
                        doc = {"text": body.decode(errors="replace"), "headers": dict(self.headers)}
                    outer.messages.append({"path": self.path, **doc} if isinstance(doc, dict) else {"doc": doc})
                    outer._cv.notify_all()
                if outer.delay_s:  # taken, and answered late: a sender that dies meanwhile sends it again
                    time.sleep(outer.delay_s)
                self.send_response(200)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()
        self._release.clear()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/{TOKEN}"

    def kinds(self, job: Optional[str] = None) -> list[str]:
        with self._cv:
            return [m.get("kind") for m in self.messages if job is None or m.get("job") == job]

    def wait(self, pred, timeout: float = 60.0, what: str = "messages"):
        return wait_for(lambda: pred(list(self.messages)), timeout, what=what, detail=lambda: f"got {self.kinds()}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_fleet(path: Path, home: Path, jobs: str, notify: str = "", alerts: str = "", interval: float = 0.2) -> Path:
    path.write_text(textwrap.dedent(f'''
        [defaults]
        home = "{home}"
        nvml = false
        interval = {interval}
    ''') + textwrap.dedent(alerts) + textwrap.dedent(notify) + textwrap.dedent(jobs))
    return path


def agent_pid(home: Path) -> Optional[int]:
    try:
        return int((home / "agent.lock").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def watcher_pid(home: Path) -> Optional[int]:
    """The pid of the detached watcher serving ``home``, or None."""
    import psutil

    pid = agent_pid(home)
    try:
        return pid if pid and "--detached" in psutil.Process(pid).cmdline() else None
    except psutil.Error:
        return None


def stop_watch(home: Path) -> None:
    """After a test: no watcher, no agent, no job left for ``home``."""
    try:
        doc = json.loads((home / "watch.json").read_text())
        doc["watching"] = False
        (home / "watch.json").write_text(json.dumps(doc))
    except (OSError, ValueError):
        pass
    pid = agent_pid(home)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    reap(home)


def events(home: Path) -> list[dict]:
    out = []
    for p in (home / "events.jsonl.1", home / "events.jsonl"):
        if p.exists():
            out += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return out


def gpudeck_watch(*args: str, timeout: float = 120, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    import sys
    return subprocess.run([sys.executable, "-m", "gpudeck.console", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env_with_repo(env))


def job_state(home: Path, job: str) -> dict:
    try:
        return json.loads((home / "jobs" / job / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def wait_state(home: Path, job: str, pred, timeout: float = 60.0, what: str = "job state") -> dict:
    return wait_for(lambda: (s := job_state(home, job)) and pred(s) and s, timeout, what=what)


def now() -> float:
    return time.time()


def tick_times(home) -> list[float]:
    """When the node's agent ticked: the times of its history's per-second rows
    (agents/history/db.py, ``<home>/history.db``), oldest first; [] before the first."""
    import sqlite3
    from pathlib import Path
    path = Path(home) / "history.db"
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return [t for (t,) in conn.execute("SELECT t FROM s1 ORDER BY t")]
    except sqlite3.OperationalError:  # the agent has not made its tables yet
        return []
    finally:
        conn.close()
