"""The SSH transport: one asyncssh connection per node, the agent over an exec channel.

:class:`SshTransport` opens the same :class:`~remote.link.AgentLink` as the local
transport, with the bytes carried by SSH. It keeps one connection per node and reuses it
for the agent's channel and for deployment (SFTP, pip). Everything runs on the caller's
event loop.

Settings come from the fleet file (``host``, ``user``, ``port``, ``identity``,
``known_hosts``, ``host_keys``, ``connect_timeout``), then from ``~/.ssh/config`` as
OpenSSH reads it (``HostName``, ``User``, ``Port``, ``IdentityFile``,
``UserKnownHostsFile``, ``ServerAliveInterval``...).

Host keys are checked here, not by asyncssh, so that the refusal says where the recorded
key is: an unknown host is refused unless the node says ``host_keys = "accept-new"`` (then
the key is appended to the known_hosts file, as OpenSSH does); a changed key is always
refused, naming the file and line. No password or passphrase is ever asked for, printed
or logged.

The agent runs as ``<python> -m gpudeck.agents --node NAME ...``, where ``<python>`` is the
venv that ``gpudeck deploy`` made (``Node.agent_venv``) when it exists, else the node's
``python`` (default ``python3``). Closing the link closes the agent's stdin: it exits,
its jobs keep running. A new agent takes over from an old one left behind by a dropped
link (see ``agents.agent.AgentLock``).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import hmac
import logging
import os
import re
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import asyncssh

from gpudeck.remote.fleet import Node
from gpudeck.remote.link import LINE_LIMIT, AgentError, AgentLink, VersionMismatch, agent_argv

log = logging.getLogger(__name__)

KEEPALIVE_S = 15.0  # ServerAliveInterval, unless ~/.ssh/config or the transport says otherwise
KEEPALIVE_COUNT = 3  # ServerAliveCountMax
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
GLOBAL_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
STDERR_LINES = 30  # the agent's last stderr lines, kept to explain why it ended


# ---------------------------------------------------------------- errors


class SshError(AgentError):
    """A node that cannot be reached or used over SSH; ``str()`` names the node."""


class ConnectFailed(SshError):
    """No SSH connection: no route, refused, timed out, name unknown, dropped."""


class AuthFailed(SshError):
    """The server refused every key offered for the user."""


class HostKeyError(SshError):
    """The server's host key could not be trusted."""


class HostKeyUnknown(HostKeyError):
    """No known_hosts file records a key for this host (and the node is not accept-new)."""


class HostKeyChanged(HostKeyError):
    """A known_hosts file records another key for this host. Always refused."""

    def __init__(self, node: str, reason: str, path: str, line: int) -> None:
        self.path, self.line = path, line
        super().__init__(node, reason)


class AgentStartFailed(SshError):
    """Connected, but the agent did not start or did not say hello."""


# ---------------------------------------------------------------- known_hosts


@dataclass(frozen=True)
class KnownHost:
    path: str
    line: int
    marker: Optional[str]  # None, "revoked" or "cert-authority"
    patterns: str
    keytype: str
    key: bytes  # the public key blob, as the server sends it

    def fingerprint(self) -> str:
        return "SHA256:" + base64.b64encode(hashlib.sha256(self.key).digest()).decode().rstrip("=")


def read_known_hosts(paths: Iterable[str]) -> list[KnownHost]:
    entries = []
    for path in paths:
        try:
            text = Path(path).expanduser().read_text(errors="replace")
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot read known hosts file %s: %s", path, exc.strerror or exc)
            continue
        for n, raw in enumerate(text.splitlines(), start=1):
            parts = raw.split()
            if not parts or parts[0].startswith("#"):
                continue
            marker = None
            if parts[0].startswith("@"):
                marker, parts = parts[0][1:], parts[1:]
            if len(parts) < 3:
                continue
            try:
                blob = base64.b64decode(parts[2], validate=True)
            except ValueError:
                continue
            entries.append(KnownHost(path, n, marker, parts[0], parts[1], blob))
    return entries


def known_hosts_name(host: str, port: Optional[int]) -> str:
    """How OpenSSH writes a host in known_hosts: ``host``, or ``[host]:port`` off port 22."""
    return host if not port or port == 22 else f"[{host}]:{port}"


def host_matches(patterns: str, name: str) -> bool:
    """OpenSSH's rules: comma-separated patterns with ``*`` and ``?``, ``!`` negates,
    ``|1|salt|hash`` for hashed names."""
    name = name.lower()
    hit = False
    for pat in patterns.split(","):
        if pat.startswith("|1|"):
            try:
                salt, digest = (base64.b64decode(p) for p in pat[3:].split("|", 1))
            except ValueError:
                continue
            if hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest):
                hit = True
            continue
        negated = pat.startswith("!")
        pat = pat[1:] if negated else pat
        regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pat.lower())
        if re.fullmatch(regex, name):
            if negated:
                return False
            hit = True
    return hit


def _host_key_algs(keytype: str) -> list[str]:
    return ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if keytype == "ssh-rsa" else [keytype]


class HostKeyPolicy:
    """What we know of one host's keys, and the verdict on the key it presents."""

    def __init__(self, node: str, host: str, port: Optional[int], user_files: Sequence[str],
                 global_files: Sequence[str], accept_new: bool) -> None:
        self.node, self.name = node, known_hosts_name(host, port)
        self.ssh_hint = f"ssh -p {port} {host}" if port and port != 22 else f"ssh {host}"
        self.user_files, self.files = list(user_files), list(user_files) + list(global_files)
        self.accept_new = accept_new
        self.matching = [e for e in read_known_hosts(self.files)
                         if e.marker != "cert-authority" and host_matches(e.patterns, self.name)]
        self.known = [e for e in self.matching if e.marker is None]
        self.problem: Optional[HostKeyError] = None
        self.recorded_in: Optional[str] = None

    def server_host_key_algs(self) -> list[str]:
        """Ask the server for a key of a type we know for it (as OpenSSH does), so that a host
        known by its RSA key is not taken for changed when it also has an ed25519 one."""
        algs: list[str] = []
        for e in self.known:
            algs += [a for a in _host_key_algs(e.keytype) if a not in algs]
        return algs

    def check(self, key: asyncssh.SSHKey) -> bool:
        blob, alg, fp = key.public_data, key.get_algorithm(), key.get_fingerprint()
        for e in self.matching:
            if e.marker == "revoked" and e.key == blob:
                self.problem = HostKeyError(self.node, f"the host key of {self.name} ({alg} {fp}) is marked "
                                                       f"@revoked in {e.path} line {e.line}; refusing to connect")
                return False
        if any(e.key == blob for e in self.known):
            return True
        if self.known:
            e = next((e for e in self.known if e.keytype == alg), self.known[0])
            self.problem = HostKeyChanged(
                self.node,
                f"HOST KEY CHANGED for {self.name}: it now presents {alg} {fp}, but {e.path} line {e.line} "
                f"records {e.keytype} {e.fingerprint()}. Someone may be intercepting the connection, or the "
                f"node was reinstalled; if you know it was, remove that line "
                f"(ssh-keygen -R '{self.name}' -f {e.path}) and connect again. Refused.",
                e.path, e.line)
            return False
        if not self.accept_new:
            where = ", ".join(self.files)
            self.problem = HostKeyUnknown(
                self.node,
                f"host key of {self.name} is not known ({alg} {fp}; looked in {where}). Check the fingerprint "
                f"and add it (`{self.ssh_hint}` once, or ssh-keyscan), or set host_keys = \"accept-new\" for "
                f"this node in the fleet file (or deploy with --accept-new-host-keys)")
            return False
        path = Path(self.user_files[0]).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(path, "a") as f:
                f.write(f"{self.name} {alg} {base64.b64encode(blob).decode()}\n")
        except OSError as exc:
            self.problem = HostKeyError(self.node, f"host key of {self.name} is new and host_keys is accept-new, "
                                                   f"but it cannot be recorded in {path}: {exc.strerror or exc}")
            return False
        self.recorded_in = str(path)
        log.warning("node %s: recorded the new host key of %s (%s %s) in %s", self.node, self.name, alg, fp, path)
        return True


class _Client(asyncssh.SSHClient):
    def __init__(self, policy: HostKeyPolicy) -> None:
        self.policy = policy

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return self.policy.check(key)


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

    async def start(self, timeout: float = 15.0):
        try:
            return await super().start(timeout)
        except VersionMismatch:
            raise
        except AgentError as exc:
            detail = await self._explain()
            if not detail:
                raise
            raise AgentStartFailed(self.node.name, f"{exc.reason}; {detail}") from None

    async def _explain(self) -> str:
        try:
            await asyncio.wait_for(self.process.wait_closed(), 2.0)
        except (asyncio.TimeoutError, asyncssh.Error, OSError):
            pass
        parts = []
        status = self.process.exit_status
        if status == 127:
            parts.append(f"the agent's python was not found on the node (exit 127): set `python` for node "
                         f"{self.node.name} in the fleet file, or run `gpudeck deploy {self.node.name}`")
        elif status not in (None, 0):
            parts.append(f"the agent exited with code {status}")
        elif self.process.exit_signal:
            parts.append(f"the agent was killed by {self.process.exit_signal[0]}")
        lines = [ln for ln in self.stderr_tail if ln.strip()]
        if lines:
            parts.append("its stderr ends with: " + " | ".join(lines[-5:]))
        return "; ".join(parts)

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
        user_files = [node.known_hosts] if node.known_hosts else \
            list(cfg.get("UserKnownHostsFile", ()) or [self.default_known_hosts])
        global_files = list(cfg.get("GlobalKnownHostsFile", ()) or [GLOBAL_KNOWN_HOSTS])
        policy = HostKeyPolicy(node.name, opts.host_key_alias or opts.host, opts.port, user_files, global_files,
                               self.accept_new or node.host_keys == "accept-new")
        keepalive = self.keepalive_s or float(cfg.get("ServerAliveInterval", 0) or KEEPALIVE_S)
        count = self.keepalive_count or int(cfg.get("ServerAliveCountMax", 0) or KEEPALIVE_COUNT)
        extra: dict[str, Any] = dict(client_factory=lambda: _Client(policy), known_hosts=([], [], []),
                                     keepalive_interval=keepalive, keepalive_count_max=count)
        algs = policy.server_host_key_algs()
        if algs:
            extra["server_host_key_algs"] = algs
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
        if policy.problem is not None:
            return policy.problem
        if isinstance(exc, asyncssh.PermissionDenied):
            return AuthFailed(node.name, f"authentication failed for user {opts.username} with "
                                         f"{self._keys_offered(node, opts)} ({where})")
        if isinstance(exc, asyncssh.KeyExchangeFailed) and policy.known:
            e = policy.known[0]
            return HostKeyChanged(node.name, f"HOST KEY CHANGED for {policy.name}: the server offers none of the "
                                             f"key types recorded in {e.path} line {e.line} ({e.keytype}); "
                                             f"refused ({exc.reason})", e.path, e.line)
        if isinstance(exc, asyncssh.HostKeyNotVerifiable):
            return HostKeyError(node.name, f"host key of {where} not verified: {exc.reason}")
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
