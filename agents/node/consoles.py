"""Several consoles, one agent per node.

The agent that holds the node's lock (see ``agents.agent.AgentLock``) serves its own
stdin/stdout and a Unix socket, ``<home>/agent.sock``, in the agent's 0700 home. A later
``python -m gpudeck.agents`` for the same home (a second console: the TUI and a CLI command, or two
operators) finds that agent on the socket and relays: it copies its stdin to the socket and
the socket to its stdout, and the console cannot tell the difference. A relay never touches
a job; the node keeps one agent, one history and one set of jobs.

The socket takes connections only from the agent's own user (SO_PEERCRED) and opens no
network port. Each link writes from its own thread through a bounded queue, so one console
that stops reading (a laptop gone to sleep) never holds up the others: its queue fills and
the link is dropped. The agent exits when its last link closes.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import struct
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Optional

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("agents")

SOCKET_NAME = "agent.sock"
# How long an agent that took the connection gets to say hello. Something listens on the
# socket, so an agent holds the node: one starting on a busy machine (imports, NVML, its
# first snapshot) can take seconds, and taking the node over from it would kill the agent
# that another console is talking to. Only an agent that hangs waits this long to be replaced.
HELLO_TIMEOUT_S = float(os.environ.get("GPUDECK_HELLO_TIMEOUT_S", "30"))
# messages a console may leave unread before it is dropped: ten minutes of snapshots at 1 Hz
QUEUE_MAX = int(os.environ.get("GPUDECK_LINK_QUEUE", "600"))


class Link:
    """One console's connection: where the agent's messages for it go, written by a thread
    of its own so that a console that stops reading holds up nobody."""

    def __init__(self, name: str, write: Callable[[bytes], None], close: Callable[[], None],
                 on_drop: Optional[Callable[["Link"], None]] = None) -> None:
        self.name = name
        self._write, self._close, self._on_drop = write, close, on_drop
        self._q: "queue.Queue[Optional[bytes]]" = queue.Queue(maxsize=QUEUE_MAX)
        self.alive = True
        self._lock = threading.Lock()
        threading.Thread(target=self._writer, name=f"out-{name}", daemon=True).start()

    def send(self, data: bytes) -> None:
        if not self.alive:
            return
        try:
            self._q.put_nowait(data)
        except queue.Full:
            log.warning("%s has not read its last %d messages: dropping it", self.name, QUEUE_MAX)
            self.drop()

    def flush(self, timeout: float = 5.0) -> None:
        """Wait (a while) until what was sent is written; for the last words before exiting."""
        done = threading.Event()
        if self.alive:
            try:
                self._q.put(done, timeout=timeout)  # type: ignore[arg-type]
            except queue.Full:
                return
            done.wait(timeout)

    def _writer(self) -> None:
        while True:
            data = self._q.get()
            if data is None:
                return
            if isinstance(data, threading.Event):
                data.set()
                continue
            try:
                self._write(data)
            except (OSError, ValueError):
                self.drop()
                return

    def drop(self) -> None:
        with self._lock:
            if not self.alive:
                return
            self.alive = False
        try:
            self._close()
        except OSError:
            pass
        try:
            self._q.put_nowait(None)
        except queue.Full:
            pass
        if self._on_drop is not None:
            self._on_drop(self)


class Consoles:
    """The agent's consoles: its own stdin/stdout and the relays on its socket. Each link
    has a reader thread; what they read arrives, in order, on one asyncio queue of the
    agent's loop as (link, line), (link, None) when that console went away, and (None, None)
    when the agent is to stop reading (taken over). ``greet`` sends a new link its first
    messages (hello, history) before anything else can reach it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, greet: Callable[[Link], None]) -> None:
        import asyncio

        self.loop, self.greet = loop, greet
        self.lines: "asyncio.Queue[tuple[Optional[Link], Optional[bytes]]]" = asyncio.Queue()
        self.links: set[Link] = set()
        self.lock = threading.Lock()
        self.closing = False  # set on the loop when the agent exits: a late relay gets no hello
        self._relays = 0

    def _put(self, item: tuple[Optional[Link], Optional[bytes]]) -> None:
        self.loop.call_soon_threadsafe(self.lines.put_nowait, item)

    def _read(self, link: Link, stream: BinaryIO) -> None:  # a thread: a pipe, a socket or an SSH channel
        try:
            for line in iter(stream.readline, b""):
                self._put((link, line))
        except (OSError, ValueError):
            pass
        self._put((link, None))

    def open(self, name: str, stream: BinaryIO, write: Callable[[bytes], None], close: Callable[[], None]) -> Link:
        link = Link(name, write, close, on_drop=lambda gone: self._put((gone, None)))
        with self.lock:
            self.links.add(link)
        self.greet(link)
        threading.Thread(target=self._read, args=(link, stream), name=f"in-{name}", daemon=True).start()
        return link

    def on_relay(self, conn: socket.socket) -> None:
        """A console relayed through the socket (on the loop). One accepted just before the
        listener closed is closed without a hello: its agent takes the node over."""
        if self.closing:
            conn.close()
            return
        self._relays += 1
        self.open(f"relay-{self._relays}", conn.makefile("rb"), conn.sendall, lambda: conn.shutdown(socket.SHUT_RDWR))

    def gone(self, link: Link) -> Optional[int]:
        """``link`` went away: drop it; how many are left, or None when it was gone already."""
        link.drop()
        with self.lock:
            if link not in self.links:
                return None
            self.links.discard(link)
            return len(self.links)

    def all(self) -> list[Link]:
        with self.lock:
            return list(self.links)

    def stop_reading(self) -> None:
        self._put((None, None))


def socket_address(home: Path) -> tuple[str, Optional[int]]:
    """The address to bind or connect ``<home>/agent.sock``, and a directory fd to close after.
    A Unix socket path is limited to 107 bytes; a longer one goes through /proc/self/fd."""
    path = str(home / SOCKET_NAME)
    if len(path.encode()) < 100:
        return path, None
    dfd = os.open(str(home), os.O_PATH | os.O_DIRECTORY)
    return f"/proc/self/fd/{dfd}/{SOCKET_NAME}", dfd


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    uid: int = struct.unpack("3i", creds)[2]
    return uid


class Listener:
    """The lock holder's socket: accepts relays of its own user and hands each to
    ``on_connect(conn)`` on the accepting thread."""

    def __init__(self, home: Path, on_connect: Optional[Callable[[socket.socket], object]] = None) -> None:
        self.home = home
        self.path = home / SOCKET_NAME
        self.on_connect = on_connect
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        addr, dfd = socket_address(home)
        try:
            try:
                os.unlink(self.path)  # left by an agent that was killed; we hold the lock now
            except FileNotFoundError:
                pass
            old = os.umask(0o177)
            try:
                self.sock.bind(addr)
            finally:
                os.umask(old)
        finally:
            if dfd is not None:
                os.close(dfd)
        self.sock.listen(16)
        self._ino = os.stat(self.path).st_ino
        self._closed = False
        if on_connect is not None:
            self.start(on_connect)

    def start(self, on_connect: Callable[[socket.socket], object]) -> None:
        """Accept from now on. A socket bound earlier already queues connections: an agent
        starting beside this one finds it and waits for its hello instead of taking over."""
        self.on_connect = on_connect
        threading.Thread(target=self._accept, args=(on_connect,), name="listener", daemon=True).start()

    def _accept(self, on_connect: Callable[[socket.socket], object]) -> None:
        me = os.getuid()
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                uid = peer_uid(conn)
            except OSError:
                conn.close()
                continue
            if uid != me:
                log.warning("refused a connection on %s from uid %d", self.path, uid)
                conn.close()
                continue
            on_connect(conn)

    def close(self) -> None:
        self._closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        try:  # remove our socket file, not one a newer agent made since
            if os.stat(self.path).st_ino == self._ino:
                os.unlink(self.path)
        except OSError:
            pass


class StartLock:
    """``<home>/agent.start.lock``: agents starting for one home take turns between looking
    for a serving agent and binding the socket. Two consoles that start at the same moment
    then never both take the node over (one killing the other's agent): the second one finds
    the first one's socket and relays to it."""

    def __init__(self, home: Path, timeout_s: float = 60.0) -> None:
        import fcntl
        import time

        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.fd = os.open(home / "agent.start.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:  # a start stuck that long: go ahead, as before this lock
                    log.warning("another agent has been starting for %.0f s; going ahead", timeout_s)
                    return
                time.sleep(0.02)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def try_relay(home: Path, version: str, protocol_version: int, timeout_s: float = HELLO_TIMEOUT_S) -> Optional[int]:
    """Relay through the agent already serving ``home``, if there is one of this version.
    Returns the exit status once the console or the agent closes the link, or None when
    there is no such agent (nothing listening, no hello in time, another version): the
    caller then takes the node over as before."""
    found = find_agent(home, version, protocol_version, timeout_s)
    return relay(*found) if found is not None else None


def find_agent(home: Path, version: str, protocol_version: int, timeout_s: float = HELLO_TIMEOUT_S
               ) -> Optional[tuple[socket.socket, BinaryIO, bytes]]:
    """A connection to the agent serving ``home`` that said hello at this version, as
    (socket, reader, hello line), or None (nothing listens, no hello in ``timeout_s``,
    another version)."""
    from ..contract import plain, wire

    path = home / SOCKET_NAME
    if not path.exists():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    addr, dfd = socket_address(home)
    try:
        sock.connect(addr)
        reader = sock.makefile("rb")
        first = reader.readline()
        hello = wire.decode(first)
    except (OSError, plain.ProtocolError) as exc:
        log.info("no agent answering on %s (%s): taking over", path, exc)
        sock.close()
        return None
    finally:
        if dfd is not None:
            os.close(dfd)
    if not isinstance(hello, wire.Hello) or (hello.version, hello.protocol) != (version, protocol_version):
        got = f"{hello.version} (protocol {hello.protocol})" if isinstance(hello, wire.Hello) else hello.type
        log.info("the agent on %s is version %s, this one %s: taking over", path, got, version)
        sock.close()
        return None
    sock.settimeout(None)
    log.info("relaying to the agent already serving %s (pid %d)", home, hello.pid)
    return sock, reader, first


def relay(sock: socket.socket, reader: BinaryIO, first: bytes) -> int:
    """Copy stdin to the agent and the agent to stdout until either side closes."""
    out = sys.stdout.buffer
    out.write(first)
    out.flush()

    def downstream() -> None:  # the agent's messages to the console
        try:
            for line in reader:
                out.write(line)
                out.flush()
        except (OSError, ValueError):
            pass
        os._exit(0)  # the agent went away (or the console did): the console reconnects

    threading.Thread(target=downstream, name="relay-down", daemon=True).start()
    try:
        for line in iter(sys.stdin.buffer.readline, b""):
            sock.sendall(line)
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
    return 0
