"""A webhook receiver that answers 200 with a 500 MB body, and one that drips a byte every
2 s: the watcher reads a few KiB of any answer, gives each request a total deadline, and
says in `watch status` that a request is in flight and for how long."""

from __future__ import annotations

import socket
import threading
import time

import psutil
import pytest

from support import command_job
from support.wait import wait_for

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("reap_jobs")]

BIG = 500 * 2**20


class RawReceiver:
    """A TCP server that reads a request's head and then misbehaves: ``huge`` answers 200 with
    a 500 MB body (as fast as the reader takes it), ``drip`` sends its answer a byte every 2 s."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.connections: list[float] = []
        self.sent = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/secret"

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(time.time())
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\nContent-Type: text/plain\r\n\r\n".encode()
            if self.mode == "drip":
                for byte in head + b"x" * 1000:
                    conn.sendall(bytes([byte]))
                    if self.closed.wait(2.0):
                        return
                return
            conn.sendall(head)
            chunk = b"\0" * 2**20
            while self.sent < BIG and not self.closed.is_set():
                conn.sendall(chunk)
                self.sent += len(chunk)
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self) -> None:
        self.closed.set()
        self.sock.close()


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        line = next(ln for ln in f if ln.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


@pytest.mark.parametrize("mode", ["huge", "drip"])
def test_a_hostile_receiver_neither_fills_the_watchers_memory_nor_holds_its_target(mode, start_agent, home):
    rx = RawReceiver(mode)
    try:
        # the drip is cut at the notify deadline: 3 s here rather than the default 15 s, so as not to wait it out
        a = start_agent(interval=0.2, env={"GPUDECK_NOTIFY_DEADLINE_S": "3"} if mode == "drip" else None)
        a.ok("configure", jobs=[command_job("dies", "exit 3")], watch={"notify": [{"url": rx.url, "events": ["died"]}]})
        a.ok("launch", job="dies")
        if mode == "huge":
            wait_for(lambda: rx.connections and a.ok("watch")["outbox"]["pending"] == 0, 120,
                     what="the message taken (a 200 is an answer, whatever its body)")
            peak = _peak_rss_mb(a.proc.pid)
            print(f"\nwatcher peak RSS {peak:.0f} MB against a {BIG >> 20} MB answer; "
                  f"{rx.sent >> 20} MB sent before the watcher closed the connection")
            assert rx.sent < BIG / 4  # it stopped reading: the sender's socket filled, the body never came whole
            assert peak < 300, peak
        else:
            status = wait_for(lambda: (t := a.ok("watch")["outbox"]["targets"]) and t[0]["in_flight_s"] and t, 60,
                              what="a request in flight in watch status")
            assert status[0]["in_flight_s"] > 0 and "secret" not in str(status)
            wait_for(lambda: len(rx.connections) >= 2, 120, what="a second attempt after the deadline")
            failing = a.ok("watch")["outbox"]["targets"][0]["failing"]
            assert "within 3 s" in (failing or ""), failing
        assert psutil.pid_exists(a.proc.pid)
    finally:
        rx.stop()
