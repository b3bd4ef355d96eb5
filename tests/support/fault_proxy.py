"""A TCP proxy on loopback that can pass, reset, hang or refuse connections on command: the
network faults a worker meets between a GPU node and S3, made on purpose in front of a real
server.

Modes (``proxy.mode = ...``, effective at once):

- ``pass``: bytes go both ways unchanged.
- ``reset``: every open connection and every new one is closed with a TCP reset.
- ``hang``: new connections are accepted and read, and never answered (open ones stall too).
- ``refuse``: the listening socket is closed, so a connect gets ``ECONNREFUSED``; it listens
  again on the same port when the mode changes.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
from typing import Optional


def _rst_close(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class FaultProxy:
    MODES = ("pass", "reset", "hang", "refuse")

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._mode = "pass"
        self._lock = threading.Lock()
        self._conns: list[tuple[socket.socket, Optional[socket.socket]]] = []
        self._stopped = threading.Event()
        self._listener: Optional[socket.socket] = None
        self.port = 0
        self._listen()
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        assert mode in self.MODES, mode
        with self._lock:
            self._mode = mode
            if mode in ("reset", "refuse"):
                for client, upstream in self._conns:
                    _rst_close(client)
                    if upstream is not None:
                        upstream.close()
                self._conns.clear()
            if mode == "refuse" and self._listener is not None:
                self._listener.close()
                self._listener = None
            elif mode != "refuse" and self._listener is None:
                self._listen()

    def _listen(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        s.settimeout(0.1)
        self.port = s.getsockname()[1]
        self._listener = s

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            listener = self._listener
            if listener is None:
                self._stopped.wait(0.05)
                continue
            try:
                client, _ = listener.accept()
            except (socket.timeout, OSError):
                continue
            self.accepted += 1
            with self._lock:
                mode = self._mode
            if mode == "reset":
                _rst_close(client)
            elif mode == "hang":
                with self._lock:
                    self._conns.append((client, None))
                threading.Thread(target=self._swallow, args=(client,), daemon=True).start()
            else:
                try:
                    upstream = socket.create_connection(self.upstream, timeout=5)
                except OSError:
                    _rst_close(client)
                    continue
                with self._lock:
                    self._conns.append((client, upstream))
                threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _swallow(self, client: socket.socket) -> None:
        try:
            while not self._stopped.is_set():
                r, _, _ = select.select([client], [], [], 0.2)
                if r and not client.recv(65536):
                    return
        except (OSError, ValueError):
            return

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        socks = [client, upstream]
        try:
            while not self._stopped.is_set():
                r, _, _ = select.select(socks, [], [], 0.2)
                if self._mode == "hang":
                    continue  # hold everything: nothing is read, nothing answered
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        return
                    (upstream if s is client else client).sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for s in socks:
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(2)
        with self._lock:
            for client, upstream in self._conns:
                client.close()
                if upstream is not None:
                    upstream.close()
            if self._listener is not None:
                self._listener.close()
