"""The SSH transport: one asyncssh connection per node, the agent over an exec channel.

:class:`SshTransport` opens the same :class:`~remote.link.AgentLink` as the local
transport, with the bytes carried by SSH. It keeps one connection per node and reuses it
for the agent's channel and for deployment (SFTP, pip). Everything runs on the caller's
event loop.

Settings come from the fleet file (``host``, ``user``, ``port``, ``identity``,
``known_hosts``, ``host_keys``, ``connect_timeout``, ``jump``), then from ``~/.ssh/config``
as OpenSSH reads it (``HostName``, ``User``, ``Port``, ``IdentityFile``,
``UserKnownHostsFile``, ``ServerAliveInterval``, ``ProxyJump``...).

A node behind a bastion (the fleet's ``jump``, else ProxyJump, a chain of hosts) is reached
through asyncssh's tunnel: the bastion's connection is opened first, with the node's
known_hosts files and policy, and shared by every node behind it.

Host keys are checked by :mod:`remote.known_hosts`, not by asyncssh, so that the refusal
says where the recorded key is. The errors are in :mod:`remote.ssh_errors` (importable from
here too). No password or passphrase is ever asked for, printed or logged.

The agent runs as ``<python> -m gpudeck.agents --node NAME ...``, where ``<python>`` is the
venv that ``gpudeck deploy`` made (``Node.agent_venv``) when it exists, else the node's
``python`` (default ``python3``). Closing the link closes the agent's stdin: it exits,
its jobs keep running. A new agent takes over from an old one left behind by a dropped
link (see ``agents.lock.AgentLock``).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import shlex
import socket
from typing import Any, Optional, Sequence, cast

import asyncssh

from .fleet import NO_JUMP, Node, jump_host_node
from .known_hosts import DEFAULT_KNOWN_HOSTS, HostKeyPolicy
from .link import LINE_LIMIT, AgentLink, agent_argv, describe_end
from .ssh_errors import (AgentStartFailed, AuthFailed, ConnectFailed, HostCertificateRefused,
                                       HostKeyChanged, HostKeyError, HostKeyUnknown, SshError)

__all__ = ["AgentStartFailed", "AuthFailed", "ConnectFailed", "HostCertificateRefused", "HostKeyChanged",
           "HostKeyError", "HostKeyUnknown",
           "KEEPALIVE_COUNT", "KEEPALIVE_S", "SshAgentLink", "SshError", "SshTransport", "agent_command"]

log = logging.getLogger(__name__)

KEEPALIVE_S = 15.0  # ServerAliveInterval, unless ~/.ssh/config or the transport says otherwise
KEEPALIVE_COUNT = 3  # ServerAliveCountMax
STDERR_LINES = 30  # the agent's last stderr lines, kept to explain why it ended
MAX_HOPS = 8  # bastions in a row, at most


# ---------------------------------------------------------------- byte streams for AgentLink


class _ChannelWriter:
    """The agent's stdin; asyncssh's errors become ConnectionError, which AgentLink knows."""

    def __init__(self, stdin: asyncssh.SSHWriter[bytes]) -> None:
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


async def _pump(src: asyncssh.SSHReader[bytes], dst: asyncio.StreamReader) -> None:
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


async def _collect(src: asyncssh.SSHReader[bytes], tail: collections.deque[str], node: str) -> None:
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

    process: asyncssh.SSHClientProcess[bytes]
    stderr_tail: collections.deque[str]
    stderr_task: asyncio.Task[None]

    def stderr_lines(self) -> list[str]:
        return list(self.stderr_tail)
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
        # by Node: a bastion that is not a node of the fleet is a Node of its own
        self._conns: dict[Node, asyncssh.SSHClientConnection] = {}
        self._tunnels: set[Node] = set()  # the bastions among them
        self._keepalive: dict[Node, float] = {}
        self._locks: dict[Node, asyncio.Lock] = {}

    # ------------------------------------------------------------ connections

    async def connection(self, node: Node, _path: tuple[Node, ...] = ()) -> asyncssh.SSHClientConnection:
        """The node's connection, opened on first use and after it was lost. ``_path``: the
        nodes whose connection waits for this one (it is their bastion)."""
        if node in _path or len(_path) >= MAX_HOPS:
            hops = " -> ".join(n.name for n in _path + (node,))
            raise ConnectFailed(_path[0].name, f"its bastions go round in a circle or are too many ({hops}); "
                                               f"check ProxyJump in the ssh config and `jump` in the fleet file")
        lock = self._locks.setdefault(node, asyncio.Lock())
        async with lock:
            conn = self._conns.get(node)
            if conn is not None and not conn.is_closed():
                return conn
            conn = await self._connect(node, _path)
            self._conns[node] = conn
            return conn

    def _bastion(self, node: Node, cfg: Any) -> Optional[Node]:
        """The node's bastion: the fleet's ``jump``, else ProxyJump (``a,b``: ``b`` through ``a``)."""
        if node.via is not None or node.jump == NO_JUMP:
            return node.via
        value = cfg.get("ProxyJump")
        if not value or value.lower() == NO_JUMP:
            return None
        via: Optional[Node] = None
        for dest in value.split(","):
            try:
                hop = jump_host_node(dest.strip(), node)
            except ValueError as exc:
                raise SshError(node.name, f"cannot use its SSH settings: ProxyJump {exc}") from None
            via = dataclasses.replace(hop, via=via) if via is not None else hop
        return via

    async def _tunnel(self, node: Node, via: Node, path: tuple[Node, ...]) -> asyncssh.SSHClientConnection:
        """The bastion's connection; its failure is said as the node's, naming the bastion."""
        try:
            conn = await self.connection(via, path + (node,))
        except SshError as exc:
            # the bastion's own failure names it; a cycle is told as the first node's already
            reason = f"bastion {via.name!r}: {exc.reason}" if exc.node == via.name else exc.reason
            if isinstance(exc, HostKeyChanged):
                raise HostKeyChanged(node.name, reason, exc.path, exc.line) from None
            raise type(exc)(node.name, reason) from None
        self._tunnels.add(via)
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

    async def _connect(self, node: Node, path: tuple[Node, ...] = ()) -> asyncssh.SSHClientConnection:
        assert node.host, f"node {node.name} has no host: it is the local node"
        kw = self._settings(node)
        try:
            opts = asyncssh.SSHClientConnectionOptions(host=node.host, **kw)
        except (ValueError, OSError, asyncssh.Error) as exc:
            # a missing or unreadable identity file, a bad ssh config line; never the key itself
            what = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
            where = f" ({filename})" if (filename := getattr(exc, "filename", None)) else ""
            hint = ("; load the key into ssh-agent: gpudeck never asks for a passphrase"
                    if "passphrase" in str(what).lower() else "")
            raise SshError(node.name, f"cannot use its SSH settings: {what}{where}{hint}") from None
        cfg = opts.config
        policy = HostKeyPolicy.for_connection(node.name, opts, node.known_hosts, self.default_known_hosts,
                                              self.accept_new or node.host_keys == "accept-new")
        keepalive = self.keepalive_s or float(cast("float | str", cfg.get("ServerAliveInterval", 0)) or KEEPALIVE_S)
        count = self.keepalive_count or int(cast("int | str", cfg.get("ServerAliveCountMax", 0)) or KEEPALIVE_COUNT)
        via = self._bastion(node, cfg)
        # tunnel=None too: asyncssh must not follow ProxyJump by itself, with its own host key check
        tunnel = await self._tunnel(node, via, path) if via is not None else None
        extra = dict(policy.connect_options(), keepalive_interval=keepalive, keepalive_count_max=count,
                     tunnel=tunnel)
        try:
            conn = await asyncssh.connect(node.host, **kw, **extra)
        except asyncio.CancelledError:
            raise
        except (asyncssh.Error, OSError, asyncio.TimeoutError, ValueError) as exc:
            raise self._connect_error(node, opts, policy, exc, via) from None
        self._keepalive[node] = keepalive
        return conn

    def _connect_error(self, node: Node, opts: asyncssh.SSHClientConnectionOptions, policy: HostKeyPolicy,
                       exc: BaseException, via: Optional[Node] = None) -> SshError:
        where = f"{opts.username}@{opts.host}:{opts.port}" + (f" through bastion {via.name!r}" if via else "")
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
        if isinstance(exc, asyncssh.ChannelOpenError):  # the bastion could not reach the node
            return ConnectFailed(node.name, f"cannot connect to {where}: {exc.reason}")
        if isinstance(exc, asyncssh.DisconnectError):
            return ConnectFailed(node.name, f"SSH to {where} failed: {exc.reason}")
        return ConnectFailed(node.name, f"SSH to {where} failed: {type(exc).__name__}: {exc}")

    @staticmethod
    def _keys_offered(node: Node, opts: asyncssh.SSHClientConnectionOptions) -> str:
        """Which keys were tried, by file name: never their contents."""
        if node.identity:
            return f"key {node.identity}"
        files = list(cast("Sequence[str]", opts.config.get("IdentityFile", ())) or [])
        if not files:
            files = [f"~/.ssh/{n}" for n in ("id_ed25519", "id_ecdsa", "id_rsa")
                     if os.path.exists(os.path.expanduser(f"~/.ssh/{n}"))]
        agent = " and the ssh-agent's keys" if opts.agent_path else ""
        if not files:
            return "no key file (none set for the node, none in ~/.ssh)" + agent
        return ("key " if len(files) == 1 else "keys ") + ", ".join(files) + agent

    def _forget(self, node: Node, conn: asyncssh.SSHClientConnection, abort: bool) -> None:
        if self._conns.get(node) is conn:
            del self._conns[node]
        if abort:
            conn.abort()

    # ------------------------------------------------------------ the agent

    def silence_timeout(self, node: Node) -> float:
        keepalive = self._keepalive.get(node) or self.keepalive_s or KEEPALIVE_S
        return max(keepalive, 3 * node.interval)

    async def open(self, node: Node) -> AgentLink:
        conn = await self.connection(node)
        command = agent_command(node, self.agent_args)
        try:
            process = await asyncio.wait_for(conn.create_process(command, encoding=None), node.connect_timeout)
        except asyncio.TimeoutError:
            self._forget(node, conn, abort=True)
            raise ConnectFailed(node.name, f"the SSH connection did not open a channel within "
                                           f"{node.connect_timeout:g} s; it was dropped") from None
        except (asyncssh.Error, OSError) as exc:
            self._forget(node, conn, abort=True)
            raise AgentStartFailed(node.name, f"cannot start the agent: {getattr(exc, 'reason', None) or exc}") \
                from None
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
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
                self._forget(node, conn, abort=True)
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
        """Close every connection (after the links: their agents have exited), the bastions last."""
        conns = list(self._conns.items())
        self._conns.clear()
        for last in (False, True):
            group = [c for n, c in conns if (n in self._tunnels) == last]
            for conn in group:
                conn.close()
            await asyncio.gather(*(asyncio.wait_for(c.wait_closed(), 5.0) for c in group), return_exceptions=True)
