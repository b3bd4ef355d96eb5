"""One conversation with one node agent, whatever carries the bytes; and the errors it raises.

An :class:`AgentLink` talks JSON lines to an agent over a pair of byte streams (a local
subprocess's pipes, or an SSH channel): the hello check, requests by id, the latest
snapshot. A :class:`Transport` only knows how to open those streams; this module imports
none (:mod:`remote.transports` chooses one per node).

Every failure that concerns a node is a :class:`NodeError`: ``.node``, ``.reason``, and
``str()`` is ``node NODE: REASON``. Code that needs the reason alone reads ``.reason``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Optional, Protocol, TypeVar

from ..agents.contract import VERSION as __version__
from ..agents.contract import ops, plain, wire
from ..agents.contract.errors import OperatorError
from ..agents.contract.wire import Hello, History, Reply, Snapshot
from .fleet import Node

R = TypeVar("R")  # an op's answer: its Result (agents/contract/ops.py)

log = logging.getLogger(__name__)

LINE_LIMIT = 64 * 1024 * 1024  # a history message after a long sleep is large


# ---------------------------------------------------------------- errors


class NodeError(OperatorError):
    """Something went wrong on, or on the way to, one node: ``str()`` is ``node NODE: REASON``;
    ``.reason`` is the reason alone (what a row that names the node already shows)."""

    def __init__(self, node: str, reason: str) -> None:
        self.node, self.reason = node, reason
        super().__init__(reason, f"node {node}")


class AgentError(NodeError):
    """A node that cannot be reached or used; the reason says what to do. Every transport's
    and deployment's errors are AgentErrors."""


class AgentFailed(AgentError):
    """The node answered, and its agent would not serve: it stopped before its hello (a home it
    refuses, a lock another host holds, no python), said nothing, runs another version, or
    refused this console's configure. The node is reachable; its agent is what to fix, and the
    reason is the agent's own where it gave one (NodeState ``agent_failed``, never
    ``unreachable``). ``silent``: it said nothing at all (no hello in time): whether the
    machine behind it still works is not known."""

    silent = False


class _NoHello(AgentError):
    """The agent sent no hello in time (start_explained makes it a silent AgentFailed)."""


class VersionMismatch(AgentFailed):
    """The node runs another gpudeck version than the console: `gpudeck deploy` fixes it."""

    def __init__(self, node: str, agent_version: str, agent_protocol: int) -> None:
        self.agent_version, self.agent_protocol = agent_version, agent_protocol
        super().__init__(node, f"agent version {agent_version} (protocol {agent_protocol}) does not "
                               f"match the console's {__version__} (protocol {wire.PROTOCOL}); "
                               f"run `gpudeck deploy {node}`")


class RequestFailed(Exception):
    """The agent answered, and refused: ``str()`` is the agent's reason alone (also in
    ``.reason``); ``.node`` and ``.op`` say where and what."""

    def __init__(self, node: str, op: str, reason: str, usage: bool = False, refusal: Optional[str] = None) -> None:
        self.node, self.op, self.reason = node, op, reason
        self.usage = usage  # the fleet file's or the command's mistake, as the node judged it
        self.refusal = refusal  # the refusal's kind, where the op has kinds (adopt: ADOPT_REFUSALS)
        super().__init__(reason)


# ---------------------------------------------------------------- the conversation


def agent_argv(node: Node, python: str) -> list[str]:
    """How every transport starts the agent: ``python -m gpudeck.agents --node NAME ...``."""
    argv = [python, "-m", "gpudeck.agents", "--node", node.name, "--interval", str(node.interval)]
    if node.home:
        argv += ["--home", node.home]
    if not node.nvml:
        argv.append("--no-nvml")
    if node.simulate_gpus:
        argv += ["--simulate-gpus", node.simulate_gpus]
    if node.textfile_dir:
        argv += ["--textfile-dir", node.textfile_dir]
    if node.cluster is not None:  # the agent of a cluster's login node (agents/cluster/)
        import json
        argv += ["--cluster", json.dumps(node.cluster.to_dict(), separators=(",", ":"))]
    return argv


class ByteWriter(Protocol):
    def write(self, data: bytes) -> Any: ...


class AgentLink:
    """One agent conversation: the hello check, requests by id, the latest snapshot."""

    def __init__(self, node: Node, reader: asyncio.StreamReader, writer: ByteWriter,
                 close: Callable[[], Awaitable[None]], silence_timeout_s: Optional[float] = None) -> None:
        self.node = node
        # the agent speaks every tick: this long without a line means the link is dead even
        # when TCP has not noticed yet (a cable pulled, a laptop asleep); None: never
        self.silence_timeout_s = silence_timeout_s
        self.lost = False  # the link ended by a failure or a silence, not by the agent's EOF
        self.configured_seq = 0  # snapshots after this one show the jobs the console declared
        self._reader = reader
        self._writer = writer
        self._close = close
        self._ids = 0
        self._waiting: dict[int, asyncio.Future[Reply]] = {}
        self.hello: Optional[Hello] = None
        self.hello_wait_s = 0.0  # how long the agent took to say hello (a budget of its own)
        self.latest: Optional[Snapshot] = None
        self.history: Optional[History] = None
        self.closed: Optional[str] = None  # why the link ended
        self._snapshot_event = asyncio.Event()
        self._on_message: list[Callable[[str, wire.Message], None]] = []
        self._pump: Optional[asyncio.Task[None]] = None

    def subscribe(self, callback: Callable[[str, wire.Message], None]) -> None:
        """``callback(node_name, message)`` for every snapshot and history message."""
        self._on_message.append(callback)

    start_error: type = AgentFailed  # what a failed start raises, with the transport's explanation

    async def explain_end(self) -> str:
        """Why the agent ended before its hello, from what the transport saw (its exit status,
        its last stderr lines but the one that states the cause); empty when the transport has
        nothing to say."""
        return ""

    def stderr_lines(self) -> list[str]:
        """The agent's last stderr lines, where the transport keeps them."""
        return []

    async def start_explained(self, timeout: Optional[float] = None) -> Hello:
        """:meth:`start`, with the transport's explanation added to a failure."""
        try:
            return await self.start(timeout)
        except AgentFailed:
            raise
        except AgentError as exc:  # the transport opened: whatever the agent did next is its failure
            detail = await self.explain_end()
            cause = wire.stated_cause(self.stderr_lines()) if detail else None
            if cause is not None:  # the agent said why it stopped: that leads, not a guess at a missing install
                failed = self.start_error(self.node.name, f"{cause}; {detail} before saying hello")
            else:
                failed = self.start_error(self.node.name, f"{exc.reason}; {detail}" if detail else exc.reason)
                failed.silent = isinstance(exc, _NoHello)
            raise failed from None

    async def start(self, timeout: Optional[float] = None) -> Hello:
        """Read the hello within ``timeout`` (default: the node's ``hello_timeout_s``) and check
        the versions; then pump messages in the background. ``hello_wait_s``: how long it took."""
        timeout = self.node.hello_timeout_s if timeout is None else timeout
        began = time.monotonic()
        try:
            line = await asyncio.wait_for(self._reader.readline(), timeout)
        except asyncio.TimeoutError:
            raise _NoHello(self.node.name, f"the agent sent no hello within {timeout:g} s; raise "
                                             f"`hello_timeout_s` for node {self.node.name} in the fleet "
                                             f"file") from None
        finally:
            self.hello_wait_s = time.monotonic() - began
        if not line:
            raise AgentError(self.node.name, "the agent exited before saying hello "
                                             "(is gpudeck installed there? run `gpudeck deploy`)")
        try:
            msg = wire.decode(line)
        except plain.ProtocolError as exc:
            raise AgentError(self.node.name, f"the agent's first line is not a hello ({exc}): "
                                             f"{line[:200]!r}") from None
        if not isinstance(msg, Hello):
            raise AgentError(self.node.name, f"expected a hello, got a {msg.type}")
        if msg.protocol != wire.PROTOCOL or msg.version != __version__:
            raise VersionMismatch(self.node.name, msg.version, msg.protocol)
        self.hello = msg
        self._pump = asyncio.get_running_loop().create_task(self._read_loop())
        return msg

    async def _read_loop(self) -> None:
        reason = "the agent closed the link"
        try:
            while True:
                try:
                    line = await asyncio.wait_for(self._reader.readline(), self.silence_timeout_s)
                except asyncio.TimeoutError:
                    self.lost = True
                    reason = f"link lost: no word from the agent for {self.silence_timeout_s:g} s"
                    break
                if not line:
                    break
                try:
                    msg = wire.decode(line)
                except plain.ProtocolError as exc:
                    log.warning("node %s: ignoring a bad line from the agent: %s", self.node.name, exc)
                    continue
                if isinstance(msg, Reply):
                    fut = self._waiting.pop(msg.id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
                    continue
                if isinstance(msg, Snapshot):
                    self.latest = msg
                    self._snapshot_event.set()
                elif isinstance(msg, History):
                    self.history = msg
                for cb in self._on_message:
                    cb(self.node.name, msg)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            self.lost = True
            reason = f"link lost: {exc}"
        finally:
            self.closed = reason
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(AgentError(self.node.name, reason))
            self._waiting.clear()
            self._snapshot_event.set()

    async def request(self, op: ops.Op[R], timeout: float = 30.0) -> R:
        """``op`` answered: its ``op.Result``. AgentError when the link fails or the answer does
        not come within ``timeout``; RequestFailed when the agent refuses, or answers something
        that is not an ``op.Result``."""
        if self.closed:
            raise AgentError(self.node.name, self.closed)
        self._ids += 1
        req = ops.request(self._ids, op)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[req.id] = fut
        try:
            self._writer.write(wire.encode(req))
            drain = getattr(self._writer, "drain", None)
            if drain is not None:
                await drain()
        except (ConnectionError, OSError) as exc:
            self._waiting.pop(req.id, None)
            raise AgentError(self.node.name, f"cannot send to the agent: {exc}") from None
        try:
            reply: Reply = await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            self._waiting.pop(req.id, None)
            raise AgentError(self.node.name, f"no answer to {op.name!r} within {timeout:.0f} s") from None
        if not reply.ok:
            raise RequestFailed(self.node.name, op.name, reply.error or "refused", usage=reply.usage,
                                refusal=reply.refusal)
        try:
            return op.answer(reply.result)
        except plain.ProtocolError as exc:
            raise RequestFailed(self.node.name, op.name, f"the agent's reply does not fit: {exc}") from None

    async def next_snapshot(self, after_seq: int = 0, timeout: float = 10.0) -> Snapshot:
        deadline = time.monotonic() + timeout
        while self.latest is None or self.latest.seq <= after_seq:
            if self.closed:
                raise AgentError(self.node.name, self.closed)
            self._snapshot_event.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentError(self.node.name, f"no snapshot within {timeout:.0f} s")
            try:
                await asyncio.wait_for(self._snapshot_event.wait(), left)
            except asyncio.TimeoutError:
                pass
        return self.latest

    async def close(self) -> None:
        """Close the agent's stdin: it exits; its jobs keep running."""
        try:
            await self._close()
        finally:
            if self._pump is not None:
                try:
                    await asyncio.wait_for(self._pump, 5.0)
                except (asyncio.TimeoutError, asyncio.CancelledError):
                    self._pump.cancel()


def describe_end(node: str, status: Optional[int], signal_name: Optional[str], stderr: list[str]) -> str:
    """An agent's end in words: its exit status or signal, and its last stderr lines."""
    parts = []
    if status == 127:
        parts.append(f"the agent's python was not found on the node (exit 127): set `python` for node "
                     f"{node} in the fleet file, or run `gpudeck deploy {node}`")
    elif status not in (None, 0):
        parts.append(f"the agent exited with code {status}")
    elif signal_name:
        parts.append(f"the agent was killed by {signal_name}")
    cause = wire.stated_cause(stderr)  # said first, by start_explained
    lines = [ln for ln in stderr if ln.strip() and (cause is None or ln[len(wire.STDERR_ERROR):].strip() != cause)]
    if lines:
        parts.append("its stderr ends with: " + " | ".join(lines[-5:]))
    return "; ".join(parts)


class Transport(Protocol):
    """Opens the byte streams to a node's agent: :mod:`remote.local`, :mod:`remote.ssh`."""

    async def open(self, node: Node) -> AgentLink: ...
