"""Talking to the fleet's agents: one link per node, each job operation routed to its node.

:class:`FleetClient` holds one :class:`~remote.link.AgentLink` per node and routes each job
operation to the node that runs the job. It knows no transport: :mod:`remote.transports`
chooses one per node. The link and its errors live in :mod:`remote.link`; they are
importable from here too, as the console has always imported them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from typing import Any, Callable, Optional, TypeVar

from ..agents.contract import ops
from ..agents.contract.wire import Hello, Snapshot
from .fleet import LOCAL, Fleet, Node
from .transports import transport_for as choose_transport
from .link import (LINE_LIMIT, AgentError, AgentFailed, AgentLink, ByteWriter, NodeError, RequestFailed,
                   Transport, VersionMismatch)

__all__ = ["LINE_LIMIT", "AgentError", "AgentFailed", "AgentLink", "ByteWriter", "FleetClient", "NodeDown", "NodeError",
           "NodeStatus", "NodeUp", "NodeView", "RequestFailed", "Transport", "VersionMismatch"]

log = logging.getLogger(__name__)

R = TypeVar("R")  # an op's answer: its Result (agents/contract/ops.py)


def _failure(node: str, exc: BaseException, fallback: Optional[str] = None) -> AgentError:
    """Why ``node`` is down, typed: an AgentError as it is; a refused request (the agent answered:
    its configure refused) an AgentFailed with the agent's reason; another error (an OSError)
    becomes the reason of an AgentError; an error without text has ``fallback`` for reason."""
    if isinstance(exc, AgentError):
        return exc
    if isinstance(exc, RequestFailed):
        return AgentFailed(node, exc.reason or fallback or "refused")
    return AgentError(node, str(exc) or fallback or type(exc).__name__)


@dataclasses.dataclass(frozen=True)
class NodeDown:
    """Delivered by :meth:`FleetClient.watch` when a node cannot be read."""

    node: str
    error: AgentError  # its ``.reason`` is the reason alone; ``str()`` names the node too
    since: float
    retry_in_s: float


@dataclasses.dataclass(frozen=True)
class NodeUp:
    """Delivered by :meth:`FleetClient.watch` when a node's agent has said hello."""

    node: str
    hello: Hello
    # how this file's jobs differ from another copy's of its fleet on the node, as its configure
    # said (None: they do not); the console shows it on the node's line until a configure says none
    copy: Optional[ops.CopyDiff] = None




@dataclasses.dataclass
class NodeView:
    """One node as a console knows it: its last snapshot, or why it cannot be read and since
    when. ``FleetClient.status`` answers with these, and the console's FleetState keeps one
    per node: one type from the link to the screen."""

    name: str
    snapshot: Optional[Snapshot] = None
    error: Optional[NodeError] = None  # why it cannot be read: ``.reason`` alone, or ``str()`` with the node
    unreachable_since: Optional[float] = None
    retry_in_s: Optional[float] = None  # the reconnect loop's next try, when it said
    told_at: Optional[float] = None  # when the error was recorded
    node: Optional[Node] = None  # the fleet file's node, where known
    copy: Optional[ops.CopyDiff] = None  # how this file's jobs differ from another copy's there (configure)

    @property
    def reachable(self) -> bool:
        return self.snapshot is not None and self.error is None

    @property
    def since(self) -> Optional[float]:
        return self.unreachable_since

    @property
    def agent_failed(self) -> bool:
        """It answered, and its agent would not serve (AgentFailed): not unreachable."""
        return isinstance(self.error, AgentFailed)


NodeStatus = NodeView  # the name FleetClient.status used before the two were one


def nodes_in_use(fleet: Fleet) -> list[Node]:
    """The nodes a console connects to: those the fleet file declares; the implicit local node
    only when it has jobs or is alone."""
    used = {j.target or LOCAL for j in fleet.jobs}
    return [n for n in fleet.nodes if n.name != LOCAL or LOCAL in used or len(fleet.nodes) == 1]


ENGINE_WAIT_S = 7.0  # a one-shot status waits this long at most for the first scrape of live engines
ANSWER_S = 15.0  # a connect without a timeout: the node's connect_timeout and this, besides the hello


def hello_timeout(node: Node, timeout: Optional[float] = None) -> float:
    """How long the agent's hello is waited for: the node's ``hello_timeout_s``, or a command's
    ``--timeout`` when that is larger. The hello's wait is not counted in ``timeout``."""
    return max(node.hello_timeout_s, timeout or 0.0)


class FleetClient:
    """One link per node; every job operation goes to the job's node."""

    def __init__(self, fleet: Fleet, transports: Optional[dict[str, Transport]] = None,
                 take_over: bool = False, reading: bool = False) -> None:
        self.fleet = fleet
        self.take_over = take_over or fleet.take_over  # jobs another fleet file owns on a node become ours
        # a look (status, doctor, events, logs, history, a read-only console): the nodes never
        # refuse it for what another fleet owns, and it takes nothing (agents/jobs/owners.py)
        self.reading = reading
        self.configured: dict[str, ops.Configured] = {}  # per node: its last configure's answer
        self.spec_changes: dict[str, list[str]] = {}  # per job: what the fleet file changed since its launch
        try:  # when the fleet file was read (reload_fleet reads it again once it changes)
            self._fleet_stamp: Optional[int] = os.stat(fleet.path).st_mtime_ns if fleet.path else None
        except OSError:
            self._fleet_stamp = None
        self.links: dict[str, AgentLink] = {}
        # why each unreachable node is down, and since when
        self.errors: dict[str, tuple[AgentError, float]] = {}
        # nodes whose agent refused this fleet's configure (another fleet owns its jobs there):
        # a request raises the refusal itself, so that its kind reaches the exit code
        self.refused: dict[str, RequestFailed] = {}
        self._transports = transports or {}  # by kind ("local", "ssh"); more are made on demand
        # what a fleet read again from its file becomes before use (the console's moved jobs:
        # console/placements.py); the identity by default
        self.adjust: Callable[[Fleet], Fleet] = lambda f: f
        # the running watch (its event handler and backoffs), its loop per node, and a wake-up
        # when apply_fleet adds a node to it
        self._watching: Optional[tuple[Callable[[str, Any], None], float, float]] = None
        self._watch_tasks: dict[str, asyncio.Task[None]] = {}
        self._watch_added: Optional[asyncio.Event] = None

    def transport_for(self, node: Node) -> Transport:
        return choose_transport(node, self._transports)

    def _down(self, node: str, error: AgentError, since: float) -> None:
        self.errors[node] = (error, since)

    def _up(self, node: str) -> None:
        self.errors.pop(node, None)
        self.refused.pop(node, None)

    async def connect(self, node: Node, timeout: Optional[float] = None, reading: Optional[bool] = None) -> AgentLink:
        """Open, hello, configure. The hello has a wait of its own (:func:`hello_timeout`); the
        rest is within ``timeout`` (default: the node's ``connect_timeout`` and ANSWER_S), every
        wait getting what is left."""
        budget = timeout or node.connect_timeout + ANSWER_S
        deadline = time.monotonic() + budget
        link = await asyncio.wait_for(self.transport_for(node).open(node), budget)
        try:
            await link.start_explained(hello_timeout(node, timeout))
            deadline += link.hello_wait_s  # a slow hello leaves configure its time
            reply = await link.request(self._configure_op(self.fleet, node.name, reading),
                                       timeout=max(1.0, deadline - time.monotonic()))
            self._configured(node.name, reply)
            link.configured_seq = link.latest.seq if link.latest is not None else 0
        except BaseException:
            await link.close()
            raise
        self.links[node.name] = link
        self._up(node.name)
        return link

    async def reload_fleet(self) -> None:
        """Read the fleet file again if it changed since it was read, and declare its jobs anew
        on every connected node, so that a launch or relaunch runs what the file says now and
        ``spec_changes`` tells what that changes. FleetError (nothing changed) for a broken file."""
        from .fleet import load_fleet

        if self.fleet.path is None:
            return
        try:
            stamp = os.stat(self.fleet.path).st_mtime_ns
        except OSError:
            stamp = None
        if stamp is not None and stamp == self._fleet_stamp:
            return
        fleet = self.adjust(load_fleet(self.fleet.path))
        self.fleet, self._fleet_stamp = dataclasses.replace(fleet, take_over=self.take_over), stamp
        for name, link in list(self.links.items()):
            jobs = fleet.jobs_on(name)
            reply = await link.request(self._configure_op(fleet, name))
            self.spec_changes.update({j.name: [] for j in jobs})
            self._configured(name, reply)

    async def apply_fleet(self, fleet: Fleet) -> dict[str, str]:
        """Use ``fleet`` (the file read again, by an open console: console/reload.py): every
        connected node gets the ``configure`` a console sends at connect, with the jobs the file
        gives it now (a node reads it as it reads any console's: nothing is launched or killed;
        a job dropped from the file stays where it runs); a node the file adds is connected by
        the running :meth:`watch`. The nodes whose configure failed, with why (the others have
        the new file all the same)."""
        self.fleet = dataclasses.replace(fleet, take_over=self.take_over)
        try:
            self._fleet_stamp = os.stat(fleet.path).st_mtime_ns if fleet.path else None
        except OSError:
            self._fleet_stamp = None

        async def one(name: str, link: AgentLink) -> Optional[str]:
            try:  # a node read as a look (another fleet owns jobs there) is configured as one again
                reply = await link.request(self._configure_op(self.fleet, name, True if name in self.refused else None),
                                           timeout=ANSWER_S)
            except (AgentError, RequestFailed, OSError, asyncio.TimeoutError) as exc:
                return str(getattr(exc, "reason", "") or exc) or type(exc).__name__
            self.spec_changes.update({j.name: [] for j in self.fleet.jobs_on(name)})
            self._configured(name, reply)
            return None

        links = list(self.links.items())
        answers = await asyncio.gather(*(one(name, link) for name, link in links))
        if self._watching is not None:
            for node in self.nodes_in_use():
                if node.name not in self._watch_tasks:
                    self._watch_task(node)
        return {name: why for (name, _), why in zip(links, answers) if why is not None}

    def _configure_op(self, fleet: Fleet, node: str, reading: Optional[bool] = None) -> ops.Configure:
        reading = self.reading if reading is None else reading
        return ops.Configure(jobs=fleet.jobs_on(node), fleet=fleet.identity, source=fleet.source,
                             take_over=self.take_over and not reading, reading=reading,
                             watch=fleet.watch_settings(node))

    async def _connect_or_look(self, node: Node) -> AgentLink:
        """The console's connect: where another fleet owns some of this file's jobs (and no
        --take-over), the node is still read, as a look, its refusal kept in ``refused`` so that
        the console refuses changes there, naming the owner; never shown as unreachable."""
        from ..agents.contract.ownership import OWNED_ELSEWHERE

        try:
            return await self.connect(node)
        except RequestFailed as exc:
            if self.reading or exc.refusal != OWNED_ELSEWHERE:
                raise
            link = await self.connect(node, reading=True)
            self.refused[node.name] = exc
            return link

    def _configured(self, node: str, reply: ops.Configured) -> None:
        self.spec_changes.update(reply.changed)
        self.configured[node] = reply
        for name, owner in sorted(reply.taken.items()):  # said where it happened: the agent's log too
            log.warning("node %s: job %s taken over from %s", node, name, owner)

    def taken(self) -> list[str]:
        """What ``--take-over`` took, one line a job: the job, its node and its former owner."""
        from ..agents.contract.ownership import owner_text

        return [f"took job {name!r} on node {node} from {owner_text(owner)}"
                for node, reply in sorted(self.configured.items()) for name, owner in sorted(reply.taken.items())]

    def copy_of(self, node: str) -> Optional[ops.CopyDiff]:
        """How this file's jobs differ from another copy's on ``node``, by its last configure."""
        reply = self.configured.get(node)
        return reply.copy if reply is not None else None

    def differs(self) -> list[str]:
        """How this file's jobs differ from what the nodes hold for its fleet (another copy's)."""
        return [line for _, reply in sorted(self.configured.items()) for line in reply.differs]

    async def connect_all(self, nodes: Optional[list[Node]] = None, timeout: Optional[float] = None) -> None:
        nodes = nodes if nodes is not None else self.nodes_in_use()
        await asyncio.gather(*(self._try_connect(n, timeout) for n in nodes))

    async def _try_connect(self, node: Node, timeout: Optional[float] = None) -> Optional[AgentLink]:
        """connect(), with a failure recorded in ``errors`` (reason, since) instead of raised."""
        try:
            return await self.connect(node, timeout)
        except (AgentError, RequestFailed, OSError) as exc:
            if isinstance(exc, RequestFailed):
                self.refused[node.name] = exc
            self._down(node.name, _failure(node.name, exc), time.time())
        except asyncio.TimeoutError:
            limit = timeout or node.connect_timeout + ANSWER_S
            err = AgentError(node.name, f"no answer within {limit:g} s")
            self._down(node.name, err, time.time())
        return None

    def nodes_in_use(self) -> list[Node]:
        """Nodes declared in the fleet file; the local node only when it has jobs or is alone."""
        return nodes_in_use(self.fleet)

    async def status(self, timeout: float = 10.0) -> list[NodeView]:
        """Every node at once, each within ``timeout`` (connect and first snapshot together;
        the agent's hello waits apart, :func:`hello_timeout`): a node that cannot be read comes
        back with its reason and since when, never raises."""

        async def one(node: Node) -> NodeView:
            deadline = time.monotonic() + timeout
            if node.name not in self.links and node.name not in self.errors:
                opened = await self._try_connect(node, timeout)
                deadline += opened.hello_wait_s if opened is not None else 0.0
            link = self.links.get(node.name)
            if link is None:
                err, since = self.errors.get(node.name, (AgentError(node.name, "not connected"), time.time()))
                return NodeView(node.name, error=err, unreachable_since=since, node=node)
            try:
                left = max(deadline - time.monotonic(), min(timeout, 1.0))
                snap = await link.next_snapshot(link.configured_seq, left)
                # the first snapshot after configure comes before any scrape: wait (bounded) for
                # the engines of live jobs, so a one-shot status shows them and their alerts
                scraped = {j.name for j in self.fleet.jobs_on(node.name) if j.scrape_url}
                engine_deadline = min(deadline, time.monotonic() + ENGINE_WAIT_S)
                while any(j.name in scraped and j.state.alive and j.engine is None for j in snap.jobs):
                    left = engine_deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        snap = await link.next_snapshot(snap.seq, left)
                    except AgentError:
                        if link.closed:
                            raise
                        break
                return NodeView(node.name, snapshot=snap, node=node, copy=self.copy_of(node.name))
            except AgentError as exc:
                return NodeView(node.name, error=exc, unreachable_since=time.time(), node=node)

        return list(await asyncio.gather(*(one(n) for n in self.nodes_in_use())))

    async def watch(self, on_event: Callable[[str, Any], None], backoff_s: float = 1.0,
                    backoff_max_s: float = 30.0) -> None:
        """Keep every node connected until cancelled: one task per node, each with its own
        reconnect loop (exponential backoff with jitter), so one dead node never stalls
        another. ``on_event(node, event)`` gets NodeUp, every Snapshot and History, and
        NodeDown with the reason. Runs on the caller's event loop."""
        self._watching = (on_event, backoff_s, backoff_max_s)
        self._watch_tasks = {}
        self._watch_added = asyncio.Event()
        for n in self.nodes_in_use():
            self._watch_task(n)
        try:
            while True:  # until cancelled, or a node's loop fails; a node the file adds joins (apply_fleet)
                self._watch_added.clear()
                added = asyncio.create_task(self._watch_added.wait())
                try:
                    done, _ = await asyncio.wait([*self._watch_tasks.values(), added],
                                                 return_when=asyncio.FIRST_COMPLETED)
                finally:
                    added.cancel()
                for name, t in list(self._watch_tasks.items()):
                    if t in done:
                        t.result()  # a node's loop that ended raises here, as gather raised it
                        del self._watch_tasks[name]
                if not self._watch_tasks:
                    return
        finally:
            tasks = list(self._watch_tasks.values())
            self._watching = None
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _watch_task(self, node: Node) -> None:
        assert self._watching is not None
        on_event, backoff_s, backoff_max_s = self._watching
        self._watch_tasks[node.name] = asyncio.create_task(
            self._watch_node(node, on_event, backoff_s, backoff_max_s), name=f"watch-{node.name}")
        if self._watch_added is not None:
            self._watch_added.set()

    async def _watch_node(self, node: Node, on_event: Callable[[str, Any], None],
                          backoff_s: float, backoff_max_s: float) -> None:
        import random

        delay = backoff_s
        down_since: Optional[float] = None
        while True:
            ended: Optional[AgentLink] = None
            try:
                link = await self._connect_or_look(node)
            except (AgentError, RequestFailed, OSError, asyncio.TimeoutError) as exc:
                error = _failure(node.name, exc, "connect timed out")
            except Exception as exc:  # untyped: show it on the node and keep the loop alive
                log.exception("node %s: connect failed", node.name)
                error = AgentError(node.name, f"{type(exc).__name__}: {exc}")
            else:
                delay, down_since = backoff_s, None
                assert link.hello is not None, f"node {node.name}: connected without a hello"  # connect() waits for it
                on_event(node.name, NodeUp(node.name, link.hello, self.copy_of(node.name)))
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
                error = AgentError(node.name, link.closed or "the agent closed the link")
                self.links.pop(node.name, None)
                ended = link
            down_since = down_since or time.time()
            self._down(node.name, error, down_since)
            wait = min(delay, backoff_max_s) * random.uniform(0.7, 1.3)
            on_event(node.name, NodeDown(node.name, error, down_since, wait))
            if ended is not None:
                await ended.close()  # after NodeDown: closing a dead link takes its own time
            await asyncio.sleep(wait)
            delay = min(delay * 2, backoff_max_s)

    async def request(self, op: ops.Op[R], node: Optional[str] = None, timeout: Optional[float] = None,
                      connect: bool = True) -> R:
        """``op`` on ``node``, or on its job's node for an op with a ``job``; its ``op.Result``.
        Connects when needed (``connect=False``: use the link there is: the console, whose watch
        loop owns the links); a ``timeout`` given covers the connect and the answer together,
        the agent's hello apart (:func:`hello_timeout`). AgentError when the node cannot be
        reached; RequestFailed when the agent refuses; UnknownName (naming the fleet's jobs) for
        a job the fleet lacks."""
        if node is None:
            job = getattr(op, "job", None)
            if job is None:
                raise TypeError(f"{op.name!r} needs a node")
            node = self.fleet.job(job).target or LOCAL
        if node not in self.links and connect:
            began = time.monotonic()
            await self.connect_all([self.fleet.node(node)], timeout)
            opened = self.links.get(node)
            if timeout is not None and opened is not None:
                timeout = max(1.0, timeout - (time.monotonic() - began - opened.hello_wait_s))
        link = self.links.get(node)
        if link is None and node in self.refused:
            raise self.refused[node]
        if link is None:
            failure = self.errors.get(node)
            raise failure[0] if failure is not None else AgentError(node, "not connected")
        if timeout is None:  # a kill waits out its grace period; a launch may start a big process
            grace = getattr(op, "grace_s", None)
            timeout = grace + 60.0 if grace is not None else 120.0 if isinstance(op, ops.Launch) else 60.0
        return await link.request(op, timeout=timeout)

    async def close(self) -> None:
        """Close every agent's stdin (they exit, their jobs keep running), then the transports
        (the SSH connections)."""
        await asyncio.gather(*(link.close() for link in self.links.values()), return_exceptions=True)
        self.links.clear()
        closers = [t.close() for t in self._transports.values() if hasattr(t, "close")]
        await asyncio.gather(*closers, return_exceptions=True)
