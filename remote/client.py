"""Talking to node agents: one interface, whatever carries the bytes.

An :class:`AgentLink` is one conversation with one agent over a pair of byte streams
(a local subprocess's pipes, or an SSH channel). :class:`FleetClient` holds one link per
node and routes each job operation to the node that runs the job. The transports
(:mod:`remote.local`, :mod:`remote.ssh`) only know how to open the streams.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Awaitable, Callable, Optional, Protocol

from gpudeck.agents import __version__, protocol
from gpudeck.agents.protocol import Hello, History, KillVerdict, LaunchResult, LogChunk, Reply, Request, Snapshot
from gpudeck.remote.fleet import LOCAL, Fleet, Node

log = logging.getLogger(__name__)

LINE_LIMIT = 64 * 1024 * 1024  # a history message after a long sleep is large


class AgentError(Exception):
    """A node that cannot be reached or used; the message names the node and what to do."""

    def __init__(self, node: str, message: str) -> None:
        self.node = node
        super().__init__(f"node {node}: {message}")


class VersionMismatch(AgentError):
    """The node runs another gpudeck version than the console: `gpudeck deploy` fixes it."""

    def __init__(self, node: str, agent_version: str, agent_protocol: int) -> None:
        self.agent_version, self.agent_protocol = agent_version, agent_protocol
        super().__init__(node, f"agent version {agent_version} (protocol {agent_protocol}) does not "
                               f"match the console's {__version__} (protocol {protocol.PROTOCOL}); "
                               f"run `gpudeck deploy {node}`")


class RequestFailed(Exception):
    """The agent answered, and refused: the message is the agent's reason."""

    def __init__(self, node: str, op: str, message: str) -> None:
        self.node, self.op = node, op
        super().__init__(message)


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
        self._waiting: dict[int, asyncio.Future] = {}
        self.hello: Optional[Hello] = None
        self.latest: Optional[Snapshot] = None
        self.history: Optional[History] = None
        self.closed: Optional[str] = None  # why the link ended
        self._snapshot_event = asyncio.Event()
        self._on_message: list[Callable[[str, protocol.Message], None]] = []
        self._pump: Optional[asyncio.Task] = None

    def subscribe(self, callback: Callable[[str, protocol.Message], None]) -> None:
        """``callback(node_name, message)`` for every snapshot and history message."""
        self._on_message.append(callback)

    async def start(self, timeout: float = 15.0) -> Hello:
        """Read the hello and check the versions; then pump messages in the background."""
        try:
            line = await asyncio.wait_for(self._reader.readline(), timeout)
        except asyncio.TimeoutError:
            raise AgentError(self.node.name, f"the agent sent no hello within {timeout:.0f} s") from None
        if not line:
            raise AgentError(self.node.name, "the agent exited before saying hello "
                                             "(is gpudeck installed there? run `gpudeck deploy`)")
        try:
            msg = protocol.decode(line)
        except protocol.ProtocolError as exc:
            raise AgentError(self.node.name, f"the agent's first line is not a hello ({exc}): "
                                             f"{line[:200]!r}") from None
        if not isinstance(msg, Hello):
            raise AgentError(self.node.name, f"expected a hello, got a {msg.type}")
        if msg.protocol != protocol.PROTOCOL or msg.version != __version__:
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
                    msg = protocol.decode(line)
                except protocol.ProtocolError as exc:
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

    async def request(self, op: str, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
        if self.closed:
            raise AgentError(self.node.name, self.closed)
        self._ids += 1
        req = Request(id=self._ids, op=op, args=args)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[req.id] = fut
        try:
            self._writer.write(protocol.encode(req))
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
            raise AgentError(self.node.name, f"no answer to {op!r} within {timeout:.0f} s") from None
        if not reply.ok:
            raise RequestFailed(self.node.name, op, reply.error or "refused")
        return reply.result

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


class Transport(Protocol):
    async def open(self, node: Node) -> AgentLink: ...


@dataclasses.dataclass(frozen=True)
class NodeDown:
    """Delivered by :meth:`FleetClient.watch` when a node cannot be read."""

    node: str
    reason: str
    since: float
    retry_in_s: float


@dataclasses.dataclass(frozen=True)
class NodeUp:
    """Delivered by :meth:`FleetClient.watch` when a node's agent has said hello."""

    node: str
    hello: Hello




@dataclasses.dataclass
class NodeStatus:
    node: Node
    snapshot: Optional[Snapshot] = None
    error: Optional[str] = None
    since: Optional[float] = None  # unreachable since


class FleetClient:
    """One link per node; every job operation goes to the job's node."""

    def __init__(self, fleet: Fleet, transports: Optional[dict[str, Transport]] = None) -> None:
        self.fleet = fleet
        self.links: dict[str, AgentLink] = {}
        self.errors: dict[str, tuple[str, float]] = {}
        self._transports = transports or {}

    def transport_for(self, node: Node) -> Transport:
        kind = "local" if node.local else "ssh"
        if kind not in self._transports:
            if kind == "local":
                from gpudeck.remote.local import LocalTransport
                self._transports[kind] = LocalTransport()
            else:
                from gpudeck.remote.ssh import SshTransport  # asyncssh only when a fleet has remote nodes
                self._transports[kind] = SshTransport()
        return self._transports[kind]

    async def connect(self, node: Node, timeout: Optional[float] = None) -> AgentLink:
        timeout = timeout or node.connect_timeout + 15
        link = await asyncio.wait_for(self.transport_for(node).open(node), timeout)
        try:
            await link.start()
            await link.request("configure", jobs=[j.to_dict() for j in self.fleet.jobs_on(node.name)])
            link.configured_seq = link.latest.seq if link.latest is not None else 0
        except BaseException:
            await link.close()
            raise
        self.links[node.name] = link
        self.errors.pop(node.name, None)
        return link

    async def connect_all(self, nodes: Optional[list[Node]] = None, timeout: Optional[float] = None) -> None:
        nodes = nodes if nodes is not None else self.nodes_in_use()
        await asyncio.gather(*(self._try_connect(n, timeout) for n in nodes))

    async def _try_connect(self, node: Node, timeout: Optional[float] = None) -> Optional[AgentLink]:
        """connect(), with a failure recorded in ``errors`` (reason, since) instead of raised."""
        try:
            return await self.connect(node, timeout)
        except (AgentError, RequestFailed, OSError) as exc:
            self.errors[node.name] = (str(exc), time.time())
        except asyncio.TimeoutError:
            limit = timeout or node.connect_timeout + 15
            self.errors[node.name] = (f"node {node.name}: no answer within {limit:g} s", time.time())
        return None

    def nodes_in_use(self) -> list[Node]:
        """Nodes declared in the fleet file; the local node only when it has jobs or is alone."""
        used = {j.node or LOCAL for j in self.fleet.jobs}
        nodes = [n for n in self.fleet.nodes if n.name != LOCAL or LOCAL in used or len(self.fleet.nodes) == 1]
        return nodes

    async def status(self, timeout: float = 10.0) -> list[NodeStatus]:
        """Every node at once, each within ``timeout`` (connect and first snapshot together):
        a node that cannot be read comes back with its reason and since when, never raises."""

        async def one(node: Node) -> NodeStatus:
            deadline = time.monotonic() + timeout
            if node.name not in self.links and node.name not in self.errors:
                await self._try_connect(node, timeout)
            link = self.links.get(node.name)
            if link is None:
                err, since = self.errors.get(node.name, (f"node {node.name}: not connected", time.time()))
                return NodeStatus(node, error=err, since=since)
            try:
                left = max(deadline - time.monotonic(), min(timeout, 1.0))
                return NodeStatus(node, snapshot=await link.next_snapshot(link.configured_seq, left))
            except AgentError as exc:
                return NodeStatus(node, error=str(exc), since=time.time())

        return list(await asyncio.gather(*(one(n) for n in self.nodes_in_use())))

    async def watch(self, on_event: Callable[[str, Any], None], backoff_s: float = 1.0,
                    backoff_max_s: float = 30.0) -> None:
        """Keep every node connected until cancelled: one task per node, each with its own
        reconnect loop (exponential backoff with jitter), so one dead node never stalls
        another. ``on_event(node, event)`` gets NodeUp, every Snapshot and History, and
        NodeDown with the reason. Runs on the caller's event loop."""
        tasks = [asyncio.create_task(self._watch_node(n, on_event, backoff_s, backoff_max_s),
                                     name=f"watch-{n.name}") for n in self.nodes_in_use()]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch_node(self, node: Node, on_event: Callable[[str, Any], None],
                          backoff_s: float, backoff_max_s: float) -> None:
        import random

        delay = backoff_s
        down_since: Optional[float] = None
        while True:
            ended: Optional[AgentLink] = None
            try:
                link = await self.connect(node)
            except (AgentError, RequestFailed, OSError, asyncio.TimeoutError) as exc:
                reason = str(exc) or f"node {node.name}: connect timed out"
            except Exception as exc:  # untyped: show it on the node and keep the loop alive
                log.exception("node %s: connect failed", node.name)
                reason = f"node {node.name}: {type(exc).__name__}: {exc}"
            else:
                delay, down_since = backoff_s, None
                on_event(node.name, NodeUp(node.name, link.hello))
                if link.history is not None:
                    on_event(node.name, link.history)
                if link.latest is not None:
                    on_event(node.name, link.latest)
                link.subscribe(on_event)
                assert link._pump is not None
                try:
                    await asyncio.shield(link._pump)  # returns when the link ends
                except Exception as exc:  # a transport error the link did not type: still a lost link
                    link.lost, link.closed = True, link.closed or f"link lost: {type(exc).__name__}: {exc}"
                reason = f"node {node.name}: {link.closed}"
                self.links.pop(node.name, None)
                ended = link
            down_since = down_since or time.time()
            self.errors[node.name] = (reason, down_since)
            wait = min(delay, backoff_max_s) * random.uniform(0.7, 1.3)
            on_event(node.name, NodeDown(node.name, reason, down_since, wait))
            if ended is not None:
                await ended.close()  # after NodeDown: closing a dead link takes its own time
            await asyncio.sleep(wait)
            delay = min(delay * 2, backoff_max_s)

    def link_for_job(self, job: str) -> AgentLink:
        spec = self.fleet.job(job)  # KeyError names the fleet's jobs
        node = spec.node or LOCAL
        link = self.links.get(node)
        if link is None:
            err = self.errors.get(node, (f"node {node}: not connected", 0))[0]
            raise AgentError(node, err.removeprefix(f"node {node}: "))
        return link

    async def job_request(self, job: str, op: str, timeout: float = 60.0, **args: Any) -> Any:
        """``op`` on the job's node; the typed result (:func:`protocol.result_of`): a
        KillVerdict for kill, a LaunchResult for launch and relaunch, a LogChunk for logs."""
        node = self.fleet.job(job).node or LOCAL
        if node not in self.links:
            await self.connect_all([self.fleet.node(node)])
        result = await self.link_for_job(job).request(op, timeout=timeout, job=job, **args)
        try:
            return protocol.result_of(op, result)
        except protocol.ProtocolError as exc:
            raise RequestFailed(node, op, f"the agent's reply does not fit: {exc}") from None

    async def kill(self, job: str, grace_s: float = 10.0) -> KillVerdict:
        return await self.job_request(job, "kill", timeout=grace_s + 60.0, grace_s=grace_s)

    async def launch(self, job: str) -> LaunchResult:
        return await self.job_request(job, "launch", timeout=120.0)

    async def relaunch(self, job: str, grace_s: float = 10.0) -> LaunchResult:
        return await self.job_request(job, "relaunch", timeout=grace_s + 60.0, grace_s=grace_s)

    async def logs(self, job: str, lines: Optional[int] = None, offset: Optional[int] = None,
                   timeout: float = 60.0) -> LogChunk:
        args = {k: v for k, v in (("lines", lines), ("offset", offset)) if v is not None}
        return await self.job_request(job, "logs", timeout=timeout, **args)

    async def close(self) -> None:
        """Close every agent's stdin (they exit, their jobs keep running), then the transports
        (the SSH connections)."""
        await asyncio.gather(*(link.close() for link in self.links.values()), return_exceptions=True)
        self.links.clear()
        closers = [t.close() for t in self._transports.values() if hasattr(t, "close")]
        await asyncio.gather(*closers, return_exceptions=True)
