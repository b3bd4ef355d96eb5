"""The automatic move: a job of a lost node moved to a spare, by whatever watches the whole
fleet. ``gpudeck watch fleet`` (a console with no screen) and the console itself both run one
:class:`LostNodeMover`; the watchers on the nodes cannot do this, as a lost node's own watcher
is lost with it.

A node is lost once it has been unreachable for ``[alerts] node_lost_s``; each of its jobs with
``on_node_lost = "move"`` then moves to a ``spare = true`` node that is up and holds no job
(console/moving.py: ``lost_node_moves`` chooses, ``move_job`` moves: the old attempt is
fenced, since its node cannot be reached to kill it).

Two watchers of one fleet (a console and ``watch fleet``, two consoles) must not move one job
twice. Each round a mover first takes the moves recorded in this machine's placements since
(:meth:`LostNodeMover.catch_up`), and counts a job alive on another up node than its own as
moved already (the nodes' snapshots, whoever moved it); a move that starts all the same, two
watchers deciding within the same second, is refused at its record by the placements' lock
(placements.PlacementStore.claim) on one machine. Across machines the new node's agent refuses a
second launch of a job it runs, and should two attempts start on two spares, the newer attempt
id fences the older one (agents/contract/fencing.py): one attempt writes the output.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..agents.contract.vocab import JobState
from ..agents.contract.wire import Snapshot
from .moving import MovedMeanwhile, MoveFailed, MoveReport, PlannedMove, lost_node_moves, move_job
from .placements import PlacementStore, apply


class LostNodes:
    """What the watch loop's events say: which nodes are up, since when each other one is down
    (the first NodeDown of an outage), and which jobs each node last said are alive (with the
    fleet file that owns each). A node whose agent fails (AgentFailed: it answered, and its
    agent would not serve: another version, a home it refuses) is neither up nor down: it is
    not lost, its jobs may be running there, and a move would fence them for nothing; its
    outage counts from when it stops answering. An agent that says nothing at all (no hello in
    time: a machine hung behind its sshd, perhaps) counts as down, as before."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.up: set[str] = set()
        self.down_since: dict[str, float] = {}
        self.alive: dict[str, dict[str, Optional[str]]] = {}
        self._answered: dict[str, float] = {}  # when a node whose agent failed last answered

    def __call__(self, node: str, event: Any) -> None:
        from ..remote.client import AgentFailed, NodeDown, NodeUp

        if isinstance(event, Snapshot):
            self.alive[node] = {j.name: j.fleet for j in event.jobs if j.task is None and JobState(j.state).alive}
        elif isinstance(event, NodeUp):
            self.up.add(node)
            self.down_since.pop(node, None)
        elif isinstance(event, NodeDown) and isinstance(event.error, AgentFailed) and not event.error.silent:
            self.up.discard(node)
            self.down_since.pop(node, None)
            self._answered[node] = self.clock()
        elif isinstance(event, NodeDown):
            self.up.discard(node)
            self.down_since.setdefault(node, max(event.since, self._answered.pop(node, event.since)))


@dataclass(frozen=True)
class AutoMove:
    """One automatic move's outcome: its report, or why it failed and what it did before."""

    move: PlannedMove
    report: Optional[MoveReport] = None
    error: Optional[str] = None
    done: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        if self.report is not None:
            return list(self.report.lines)
        return [*self.done, f"move of {self.move.job} failed: {self.error}"]


class LostNodeMover:
    """The automatic moves of one watcher over ``client`` (a remote.client.FleetClient): feed
    ``nodes`` the watch loop's events, call :meth:`round` every second or so. ``tell_stays``:
    say that a lost node's job stays (on_node_lost = "stay"); None: only in a fleet where some
    job moves (a console on a fleet that never asked for moves says nothing of them)."""

    def __init__(self, client: Any, *, grace_s: float = 10.0, store: Optional[PlacementStore] = None,
                 clock: Callable[[], float] = time.time, tell_stays: Optional[bool] = None) -> None:
        self.client = client
        self.tell_stays = tell_stays
        self.grace_s = grace_s
        self.store = store or PlacementStore()
        self.clock = clock
        self.nodes = LostNodes(clock)
        self.started = clock()
        self._told: set[tuple[str, str, str]] = set()  # (job, lost node, what): said once per outage

    def running(self) -> dict[str, str]:
        """Job: an up node whose last snapshot shows it alive (this fleet's jobs only)."""
        fleet = self.client.fleet
        out: dict[str, str] = {}
        for node in sorted(self.nodes.up):
            for name, owner in self.nodes.alive.get(node, {}).items():
                if fleet.owns(owner):
                    out.setdefault(name, node)
        return out

    def catch_up(self) -> list[str]:
        """Take the moves another gpudeck of this machine recorded (placements.json), so that
        this one neither moves those jobs again nor declares them on their old node; a line for
        each recorded since this mover started."""
        fleet = self.client.fleet
        placements = self.store.of(fleet.path)
        placed = apply(fleet, placements)
        if placed is fleet:
            return []
        before = {j.name: j.node for j in fleet.jobs}
        news = [f"{j.name} was moved to {j.node} by another gpudeck of this machine (attempt id "
                f"{placements[j.name].attempt_id})" for j in placed.jobs
                if j.node != before.get(j.name) and placements[j.name].at >= self.started]
        if any(j.node != before.get(j.name) for j in placed.jobs):
            self.client.fleet = placed
        return news

    async def round(self, say: Callable[[str], None]) -> list[AutoMove]:
        """One look: the moves due now, made one after the other. ``say`` gets a line as each
        begins, and once per outage for a lost node's job that is not moved (it stays, or runs
        elsewhere already)."""
        from ..agents.contract.errors import OperatorError
        from ..remote.client import AgentError, RequestFailed

        for line in self.catch_up():
            say(line)
        fleet = self.client.fleet
        lost_s = fleet.alerts.node_lost_s
        now = self.clock()
        running = self.running()
        out: list[AutoMove] = []
        for m in lost_node_moves(fleet, self.nodes.down_since, self.nodes.up, now, lost_s, running):
            say(f"node {m.src} lost ({m.lost_for_s:.0f} s unreachable, node_lost_s {lost_s:g}): moving {m.job} "
                f"to spare {m.dest}")
            try:
                report = await move_job(self.client, m.job, m.dest, self.grace_s, self.store)
            except MovedMeanwhile as exc:  # the other watcher was first: run the job where it put it
                for line in self.catch_up() or [str(exc)]:
                    say(line)
            except MoveFailed as exc:
                out.append(AutoMove(m, error=str(exc), done=tuple(exc.done)))
            except (AgentError, RequestFailed, OperatorError) as exc:
                out.append(AutoMove(m, error=str(exc)))
            else:
                out.append(AutoMove(m, report=report))
        jobs = self.client.fleet.jobs
        stays = self.tell_stays if self.tell_stays is not None else any(j.on_node_lost == "move" for j in jobs)
        for spec in jobs:
            src = spec.node or "local"
            since = self.nodes.down_since.get(src)
            if spec.cluster is not None or since is None or now - since < lost_s:
                continue
            elsewhere = running.get(spec.name)
            if spec.on_node_lost != "move" and stays:
                self._say_once(say, spec.name, src, f"node {src} lost: {spec.name} stays (on_node_lost = \"stay\")")
            elif elsewhere is not None and elsewhere != src:
                self._say_once(say, spec.name, src, f"node {src} lost: {spec.name} already runs on {elsewhere} "
                                                    f"(moved by another gpudeck): not moved again")
        for key in [k for k in self._told if k[1] not in self.nodes.down_since]:
            self._told.discard(key)  # the node came back: the next outage is told again
        return out

    def _say_once(self, say: Callable[[str], None], job: str, node: str, line: str) -> None:
        key = (job, node, line)
        if key not in self._told:
            self._told.add(key)
            say(line)


async def watch_fleet(client: Any, *, grace_s: float = 10.0, store: Optional[PlacementStore] = None,
                      say: Callable[[str], None] = print, tick_s: float = 1.0,
                      clock: Callable[[], float] = time.time) -> None:
    """``gpudeck watch fleet``: until cancelled, keep ``client``'s nodes connected and move the
    jobs of lost nodes; one line a step on ``say``."""
    mover = LostNodeMover(client, grace_s=grace_s, store=store, clock=clock, tell_stays=True)
    watcher = asyncio.create_task(client.watch(mover.nodes), name="fleet watch")
    try:
        while not watcher.done():
            await asyncio.sleep(tick_s)
            for moved in await mover.round(say):
                for line in moved.lines():
                    say(line)
        await watcher  # its error, if it ended
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
