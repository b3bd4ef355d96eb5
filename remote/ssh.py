"""The SSH transport: one asyncssh connection per node, the agent over an exec channel.

:class:`SshTransport` opens the same :class:`~remote.link.AgentLink` as the local
transport, with the bytes carried by SSH. It keeps one connection per node and reuses it
for the agent's channel and for deployment (SFTP, pip). Everything runs on the caller's
event loop.

Settings come from the fleet file (``host``, ``user``, ``port``, ``identity``,
``known_hosts``, ``host_keys``, ``connect_timeout``), then from ``~/.ssh/config`` as
OpenSSH reads it (``HostName``, ``User``, ``Port``, ``IdentityFile``,
``UserKnownHostsFile``, ``ServerAliveInterval``...).

Host keys are checked by :mod:`remote.known_hosts`, not by asyncssh, so that the refusal
says where the recorded key is. The errors are in :mod:`remote.ssh_errors` (importable from
here too). No password or passphrase is ever asked for, printed or logged.

The agent runs as ``<python> -m gpudeck.agents --node NAME ...``, where ``<python>`` is the
venv that ``gpudeck deploy`` made (``Node.agent_venv``) when it exists, else the node's
``python`` (default ``python3``). Closing the link closes the agent's stdin: it exits,
its jobs keep running. A new agent takes over from an old one left behind by a dropped
link (see ``agents.agent.AgentLock``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import shlex
import socket
from typing import Any, Optional, Sequence

import asyncssh

from gpudeck.remote.fleet import Node
from gpudeck.remote.known_hosts import DEFAULT_KNOWN_HOSTS, HostKeyPolicy
from gpudeck.remote.link import LINE_LIMIT, AgentError, AgentLink, VersionMismatch, agent_argv, describe_end
from gpudeck.remote.ssh_errors import (AgentStartFailed, AuthFailed, ConnectFailed, HostKeyChanged, HostKeyError,
                                       HostKeyUnknown, SshError)

__all__ = ["AgentStartFailed", "AuthFailed", "ConnectFailed", "HostKeyChanged", "HostKeyError", "HostKeyUnknown",
           "KEEPALIVE_COUNT", "KEEPALIVE_S", "SshAgentLink", "SshError", "SshTransport", "agent_command"]

log = logging.getLogger(__name__)

KEEPALIVE_S = 15.0  # ServerAliveInterval, unless ~/.ssh/config or the transport says otherwise
KEEPALIVE_COUNT = 3  # ServerAliveCountMax
STDERR_LINES = 30  # the agent's last stderr lines, kept to explain why it ended


# ---------------------------------------------------------------- byte streams for AgentLink


class _ChannelWriter:
    """The agent's stdin; asyncssh's errors become ConnectionError, which AgentLink knows."""

    def __init__(self, stdin: asyncssh.SSHWriter) -> None:
        self._stdin = stdin

    def write(self, data: bytes) -> None:
        try:
            self._stdin.write(data)
        except (asyncssh.Error, OSError) as exc:
            raise ConnectionResetError(f"SSH channel closed: {exc}") from None

    async def drain(self) -> None:
        try:
            await self._stdin.drain()
        except (asyncssh.Error, OSError) as exc:
            raise ConnectionResetError(f"SSH channel closed: {exc}") from None


async def _pump(src: asyncssh.SSHReader, dst: asyncio.StreamReader) -> None:
    """Channel stdout into a plain StreamReader: the same line limit as over pipes (asyncssh's
    own readline stops at its receive window, and a History line may be larger)."""
    try:
        while True:
            data = await src.read(1 << 16)
            if not data:
                break
            dst.feed_data(data)
    except (asyncssh.Error, OSError) as exc:
        dst.set_exception(ConnectionResetError(f"SSH connection lost: {getattr(exc, 'reason', None) or exc}"))
        return
    dst.feed_eof()


async def _collect(src: asyncssh.SSHReader, tail: collections.deque, node: str) -> None:
    """Drain the agent's stderr, always (an undrained channel would block the agent), keeping
    its last lines to explain a failure."""
    buf = b""
    try:
        while True:
            data = await src.read(1 << 16)
            if not data:
                break
            *lines, buf = (buf + data).split(b"\n")
            if len(buf) > 4096:  # a line without end: keep its start
                lines, buf = lines + [buf[:4096]], b""
            for line in lines:
                text = line.decode(errors="replace").rstrip()
                tail.append(text)
                log.debug("node %s agent: %s", node, text)
    except (asyncssh.Error, OSError):
        pass
    if buf.strip():
        tail.append(buf.decode(errors="replace").rstrip())


class SshAgentLink(AgentLink):
    """An AgentLink whose failures also say what the agent wrote on stderr and how it exited."""

    process: asyncssh.SSHClientProcess
    stderr_tail: collections.deque
    stderr_task: asyncio.Task
    command: str

    start_error = AgentStartFailed

    async def explain_end(self) -> str:
        try:
            await asyncio.wait_for(self.process.wait_closed(), 2.0)
        except (asyncio.TimeoutError, asyncssh.Error, OSError):
            pass
        signal_name = self.process.exit_signal[0] if self.process.exit_signal else None
        return describe_end(self.node.name, self.process.exit_status, signal_name, list(self.stderr_tail))

    async def _read_loop(self) -> None:
        await super()._read_loop()
        if not self.lost:  # the agent ended: its last words on stderr say why
            await asyncio.wait({self.stderr_task}, timeout=1.0)
            if self.stderr_tail:
                self.closed = f"{self.closed} ({self.stderr_tail[-1]})"


# ---------------------------------------------------------------- the transport


def _shell_path(path: str) -> str:
    """A path for sh, with ``~`` expanded on the node."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def agent_command(node: Node, extra_args: Sequence[str] = ()) -> str:
    """The exec command: the deployed venv's python if there is one, else the node's python."""
    args = " ".join(shlex.quote(a) for a in agent_argv(node, "python")[1:] + list(extra_args))
    venv_py = _shell_path(node.agent_venv.rstrip("/") + "/bin/python")
    py = _shell_path(node.python or "python3")
    script = f"if [ -x {venv_py} ]; then exec {venv_py} {args}; fi; exec {py} {args}"
    return "exec /bin/sh -c " + shlex.quote(script)


class SshTransport:
    """One asyncssh connection per node; ``open(node)`` starts the agent on it.

    ``config``: ssh config files to read; ``()`` reads ``~/.ssh/config`` like ssh does,
    ``None`` reads none. ``keepalive_s``/``keepalive_count``: ServerAliveInterval and
    ServerAliveCountMax (default: ~/.ssh/config's, else 15 s x 3); a link whose agent says
    nothing for ``keepalive_s`` is declared lost (the agent speaks every tick).
    ``accept_new``: accept-new for every node, as a command-line flag would.
    ``agent_args``: more arguments for the agent (tests: a short ``--takeover-grace``).
    """

    def __init__(self, *, config: Optional[Sequence[str]] = (), keepalive_s: Optional[float] = None,
                 keepalive_count: Optional[int] = None, accept_new: bool = False,
                 known_hosts: Optional[str] = None, agent_args: Sequence[str] = ()) -> None:
        self.config = config
        self.keepalive_s = keepalive_s
        self.keepalive_count = keepalive_count
        self.accept_new = accept_new
        self.default_known_hosts = known_hosts or DEFAULT_KNOWN_HOSTS
        self.agent_args = list(agent_args)
        self._conns: dict[str, asyncssh.SSHClientConnection] = {}
        self._keepalive: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # ------------------------------------------------------------ connections

    async def connection(self, node: Node) -> asyncssh.SSHClientConnection:
        """The node's connection, opened on first use and after it was lost."""
        lock = self._locks.setdefault(node.name, asyncio.Lock())
        async with lock:
            conn = self._conns.get(node.name)
            if conn is not None and not conn.is_closed():
                return conn
            conn = await self._connect(node)
            self._conns[node.name] = conn
            return conn

    def _settings(self, node: Node) -> dict[str, Any]:
        kw: dict[str, Any] = dict(
            config=self.config, connect_timeout=node.connect_timeout,
            # never ask for anything: keys (files or ssh-agent) only
            password_auth=False, kbdint_auth=False, gss_auth=False, gss_kex=False, agent_forwarding=False)
        if node.port:
            kw["port"] = node.port
        if node.user:
            kw["username"] = node.user
        if node.identity:
            kw["client_keys"] = [os.path.expanduser(node.identity)]
        return kw

    async def _connect(self, node: Node) -> asyncssh.SSHClientConnection:
        assert node.host, f"node {node.name} has no host: it is the local node"
        kw = self._settings(node)
        try:
            opts = asyncssh.SSHClientConnectionOptions(host=node.host, **kw)
        except (ValueError, OSError, asyncssh.Error) as exc:
            # a missing or unreadable identity file, a bad ssh config line; never the key itself
            what = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            hint = ("; load the key into ssh-agent: gpudeck never asks for a passphrase"
                    if "passphrase" in str(what).lower() else "")
            raise SshError(node.name, f"cannot use its SSH settings: {what}{where}{hint}") from None
        cfg = opts.config
        policy = HostKeyPolicy.for_connection(node.name, opts, node.known_hosts, self.default_known_hosts,
                                              self.accept_new or node.host_keys == "accept-new")
        keepalive = self.keepalive_s or float(cfg.get("ServerAliveInterval", 0) or KEEPALIVE_S)
        count = self.keepalive_count or int(cfg.get("ServerAliveCountMax", 0) or KEEPALIVE_COUNT)
        extra = dict(policy.connect_options(), keepalive_interval=keepalive, keepalive_count_max=count)
        try:
            conn = await asyncssh.connect(node.host, **kw, **extra)
        except asyncio.CancelledError:
            raise
        except (asyncssh.Error, OSError, asyncio.TimeoutError, ValueError) as exc:
            raise self._connect_error(node, opts, policy, exc) from None
        self._keepalive[node.name] = keepalive
        return conn

    def _connect_error(self, node: Node, opts: asyncssh.SSHClientConnectionOptions, policy: HostKeyPolicy,
                       exc: BaseException) -> SshError:
        where = f"{opts.username}@{opts.host}:{opts.port}"
        refusal = policy.refusal(exc, where)
        if refusal is not None:
            return refusal
        if isinstance(exc, asyncssh.PermissionDenied):
            return AuthFailed(node.name, f"authentication failed for user {opts.username} with "
                                         f"{self._keys_offered(node, opts)} ({where})")
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
            return ConnectFailed(node.name, f"cannot connect to {where}: no answer within "
                                            f"{node.connect_timeout:g} s")
        if isinstance(exc, socket.gaierror):
            return ConnectFailed(node.name, f"cannot resolve host {opts.host!r}: {exc.strerror or exc}")
        if isinstance(exc, OSError):
            why = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
            return ConnectFailed(node.name, f"cannot connect to {where}: {why}")
        if isinstance(exc, asyncssh.DisconnectError):
            return ConnectFailed(node.name, f"SSH to {where} failed: {exc.reason}")
        return ConnectFailed(node.name, f"SSH to {where} failed: {type(exc).__name__}: {exc}")

    @staticmethod
    def _keys_offered(node: Node, opts: asyncssh.SSHClientConnectionOptions) -> str:
        """Which keys were tried, by file name: never their contents."""
        if node.identity:
            return f"key {node.identity}"
        files = list(opts.config.get("IdentityFile", ()) or [])
        if not files:
            files = [f"~/.ssh/{n}" for n in ("id_ed25519", "id_ecdsa", "id_rsa")
                     if os.path.exists(os.path.expanduser(f"~/.ssh/{n}"))]
        agent = " and the ssh-agent's keys" if opts.agent_path else ""
        if not files:
            return "no key file (none set for the node, none in ~/.ssh)" + agent
        return ("key " if len(files) == 1 else "keys ") + ", ".join(files) + agent

    def _forget(self, node: str, conn: asyncssh.SSHClientConnection, abort: bool) -> None:
        if self._conns.get(node) is conn:
            del self._conns[node]
        if abort:
            conn.abort()

    # ------------------------------------------------------------ the agent

    def silence_timeout(self, node: Node) -> float:
        keepalive = self._keepalive.get(node.name) or self.keepalive_s or KEEPALIVE_S
        return max(keepalive, 3 * node.interval)

    async def open(self, node: Node) -> AgentLink:
        conn = await self.connection(node)
        command = agent_command(node, self.agent_args)
        try:
            process = await asyncio.wait_for(conn.create_process(command, encoding=None), node.connect_timeout)
        except asyncio.TimeoutError:
            self._forget(node.name, conn, abort=True)
            raise ConnectFailed(node.name, f"the SSH connection did not open a channel within "
                                           f"{node.connect_timeout:g} s; it was dropped") from None
        except (asyncssh.Error, OSError) as exc:
            self._forget(node.name, conn, abort=True)
            raise AgentStartFailed(node.name, f"cannot start the agent: {getattr(exc, 'reason', None) or exc}") \
                from None
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        tail: collections.deque = collections.deque(maxlen=STDERR_LINES)
        loop = asyncio.get_running_loop()
        pumps = [loop.create_task(_pump(process.stdout, reader), name=f"ssh-stdout-{node.name}"),
                 loop.create_task(_collect(process.stderr, tail, node.name), name=f"ssh-stderr-{node.name}")]

        async def close() -> None:
            lost = link.lost
            if not lost:
                try:
                    process.stdin.write_eof()
                except (asyncssh.Error, OSError):
                    pass  # the channel is closed already: the agent has exited
                try:
                    await asyncio.wait_for(process.wait_closed(), 5.0)
                except (asyncssh.Error, OSError, asyncio.TimeoutError):
                    lost = True
            if lost:  # the connection is suspect: drop it, the next open() reconnects
                self._forget(node.name, conn, abort=True)
            else:
                process.close()
            for t in pumps:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

        link = SshAgentLink(node, reader, _ChannelWriter(process.stdin), close,
                            silence_timeout_s=self.silence_timeout(node))
        link.process, link.stderr_tail, link.stderr_task, link.command = process, tail, pumps[1], command
        return link

    async def close(self) -> None:
        """Close every connection (after the links: their agents have exited)."""
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            conn.close()
        await asyncio.gather(*(asyncio.wait_for(c.wait_closed(), 5.0) for c in conns), return_exceptions=True)
