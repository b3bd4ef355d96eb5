"""Moving a job to another node: a verified kill on the old node (or, when it cannot be
reached, a fence), then a launch on the new one that resumes from the job's output.

The steps of :func:`move_job`, in this order:

1. Check the request: the node exists, is not the job's own, is a node (not a cluster); the
   job is a node's job. A mistake is a :class:`MoveRefused` (exit 2), before anything is sent.
2. Kill the job on its node and verify it (``ops.Kill``). A kill that leaves processes or GPU
   memory behind stops the move (:class:`MoveFailed`, exit 1): two attempts would write one
   output. A node that cannot be reached is not waited for: its attempt may still run, and is
   fenced instead (step 3).
3. Make the new attempt's id (agents/contract/fencing.py) and keep the placement
   (placements.py): from now on this laptop's commands see the job on the new node, with the
   id in its env. The new worker writes the id beside the output before it restores anything,
   and the old one, once it reads it (before its next upload, or within its check interval),
   stops and exits 5 without writing more. A placement another gpudeck of this laptop recorded
   since this one read where the job runs stops the move (:class:`MovedMeanwhile`, looked for
   before the kill and again at the record, under the placements' lock): the job was moved
   meanwhile, and moving it again would launch a second attempt.
4. Declare the job on the new node (``configure``) and launch it there; declare the old node's
   jobs without it when that node is connected.

:func:`lost_node_moves` is the rule of the automatic move (``on_node_lost = "move"``): pure
data, for the fleet watch and the console.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from ..agents.contract import ops
from ..agents.contract.errors import OperatorError
from ..agents.contract.fencing import ENV as ATTEMPT_ENV, new_attempt_id
from ..agents.contract.wire import KillVerdict, LaunchResult
from .placements import Placement, PlacementConflict, PlacementStore, apply, conflicting, moved_meanwhile

LOCAL = "local"


class MoveRefused(OperatorError):
    """The move cannot be asked for like this (exit 2): the message says why."""


class MoveFailed(Exception):
    """The move began and stopped (exit 1): the old attempt was not stopped, or the new one did
    not start; ``done`` says what was done before."""

    def __init__(self, message: str, done: list[str]) -> None:
        self.done = done
        super().__init__(message)


class MovedMeanwhile(MoveFailed):
    """Another gpudeck of this machine moved the job since this one read where it runs (``place``:
    its placement); nothing was launched."""

    def __init__(self, message: str, done: list[str], place: Placement) -> None:
        self.place = place
        super().__init__(message, done)


@dataclass
class MoveReport:
    job: str
    src: str
    dest: str
    attempt_id: str
    kill: Optional[KillVerdict] = None  # None: the old node could not be reached
    unreachable: Optional[str] = None  # why the old node could not be reached
    launch: Optional[LaunchResult] = None
    resumes_from: str = ""
    lines: list[str] = field(default_factory=list)  # what it did, one line each, in order


def node_of(spec: Any) -> str:
    return spec.node or LOCAL


def output_of(spec: Any) -> str:
    """Where the new attempt resumes from: the S3 prefix, else the output directory."""
    opts = spec.options
    s3 = getattr(opts, "s3", None)
    if s3:
        return f"{s3} (its done-set in S3)"
    out = getattr(opts, "out", None)
    if out:
        return f"{out} (the output directory: it must be a directory both nodes share)"
    return "its own command (gpudeck knows no output of this job to fence)"


def check_move(fleet: Any, job: str, dest: str) -> Any:
    """The job's spec as it runs; MoveRefused (or UnknownName) for a move that cannot be."""
    spec = fleet.job(job)  # UnknownName, listing the jobs
    node = fleet.node(dest)  # UnknownName, listing the nodes
    if spec.cluster is not None:
        raise MoveRefused(f"job {job!r} runs on cluster {spec.cluster!r}: its scheduler places it; move moves a "
                          f"node's job", fleet.path or "")
    if node.cluster is not None:
        raise MoveRefused(f"{dest!r} is a cluster, not a node: move takes a node of [[nodes]]", fleet.path or "")
    if node_of(spec) == dest:
        raise MoveRefused(f"job {job!r} is already on node {dest!r}; give another node with --to",
                          fleet.path or "")
    return spec


async def move_job(client: Any, job: str, dest: str, grace_s: float, store: Optional[PlacementStore] = None,
                   now: Optional[float] = None) -> MoveReport:
    """Move ``job`` to ``dest`` over ``client`` (a remote.client.FleetClient whose fleet has the
    placements applied). On return ``client.fleet`` is the fleet as it runs after the move."""
    from ..remote.client import AgentError

    store = store or PlacementStore()
    fleet = client.fleet
    spec = check_move(fleet, job, dest)
    src = node_of(spec)
    seen = spec.env.get(ATTEMPT_ENV)  # the attempt id of the placement this fleet was read with (None: none)
    first = store.of(fleet.path).get(job)
    if conflicting(first, src, seen):
        assert first is not None
        raise MovedMeanwhile(moved_meanwhile(job, first) + "; nothing done", [], first)
    report = MoveReport(job, src, dest, "", resumes_from=output_of(spec))
    try:
        report.kill = await client.request(ops.Kill(job=job, grace_s=grace_s), node=src)
    except AgentError as exc:
        report.unreachable = exc.reason
    if report.kill is not None:
        report.lines.append(f"killed {job} on {src}: {report.kill.message}")
        if not report.kill.ok:
            raise MoveFailed(f"the kill of {job} on {src} did not complete ({report.kill.message}); not launched "
                             f"on {dest}: two attempts would write one output", report.lines)
    report.attempt_id = new_attempt_id(dest, now, moved=True)
    if report.unreachable is not None:
        report.lines.append(f"node {src} unreachable: fenced by attempt id {report.attempt_id} "
                            f"({report.unreachable}); its attempt stops once it reads that id")
    # the node the fleet file names: the first move's, while its placement holds here
    fleet_node = first.fleet_node if first is not None and first.node == src else src
    place = Placement(node=dest, fleet_node=fleet_node, moved_from=src, attempt_id=report.attempt_id,
                      at=time.time() if now is None else now)
    try:
        store.claim(fleet.path, job, place, src, seen)
    except PlacementConflict as exc:
        raise MovedMeanwhile(f"{exc}; not launched on {dest}", report.lines, exc.place) from None
    except OSError as exc:
        raise MoveFailed(f"cannot keep the placement in {store.path} ({exc}); not launched on {dest}",
                         report.lines) from None
    client.fleet = apply(fleet, {**store.of(fleet.path), job: place})
    await _declare(client, dest)
    if src in client.links:
        try:
            await _declare(client, src)
        except AgentError:
            pass  # it went away meanwhile: the next console to reach it declares its jobs
    try:
        report.launch = await client.request(ops.Launch(job=job), node=dest)
    except AgentError as exc:
        raise MoveFailed(f"node {dest}: {exc.reason}; {job} is placed there (attempt id {report.attempt_id}): "
                         f"`gpudeck launch {job}` once it answers", report.lines) from None
    r = report.launch
    report.lines.append(f"launched {job} on {dest}: pid {r.pid}, attempt {r.attempt}, attempt id "
                        f"{report.attempt_id}; resumes from {report.resumes_from}")
    return report


async def _declare(client: Any, node: str) -> None:
    """Send ``node`` the jobs the fleet (as it runs now) gives it; connect first if needed."""
    fleet = client.fleet
    if node not in client.links:
        await client.connect_all([fleet.node(node)])
        if node not in client.links:
            return  # the launch that follows says why
    reply = await client.links[node].request(ops.Configure(jobs=fleet.jobs_on(node), fleet=fleet.identity,
                                                           take_over=client.take_over,
                                                           watch=fleet.watch_settings(node)))
    client.spec_changes.update(reply.changed)


def spare_for(fleet: Any, job: str) -> Optional[str]:
    """The first ``spare`` node of the fleet (its order) that holds no job and is not the job's:
    where the console's ``m`` moves ``job``."""
    busy = {node_of(j) for j in fleet.jobs if j.cluster is None}
    return next((n.name for n in fleet.nodes if getattr(n, "spare", False) and n.name not in busy
                 and n.cluster is None), None)


# ---------------------------------------------------------------- the automatic move


@dataclass(frozen=True)
class PlannedMove:
    job: str
    src: str
    dest: str
    lost_for_s: float


def lost_node_moves(fleet: Any, down_since: dict[str, float], up: set[str], now: float,
                    node_lost_s: float, running: Optional[dict[str, str]] = None) -> list[PlannedMove]:
    """The moves to make now: each job with ``on_node_lost = "move"`` whose node has been down
    for ``node_lost_s`` or more goes to a ``spare`` node that is up, holds no job of the fleet
    and is not taken by another move of this round (nodes in the fleet file's order). A job with
    no such spare waits (the next round tries again).

    ``running`` (job: an up node whose last snapshot shows it alive) is what the nodes say, not
    the fleet file: a job alive on another node than its own was moved there already (by another
    watcher, a console on another laptop), so it is not moved again, and a spare that runs a job
    of the fleet is not free."""
    running = running or {}
    busy = {node_of(j) for j in fleet.jobs if j.cluster is None} | set(running.values())
    spares = [n.name for n in fleet.nodes if getattr(n, "spare", False) and n.name in up and n.name not in busy
              and n.cluster is None]
    out: list[PlannedMove] = []
    for spec in fleet.jobs:
        src = node_of(spec)
        since = down_since.get(src)
        if spec.cluster is not None or getattr(spec, "on_node_lost", "stay") != "move" or since is None:
            continue
        if now - since < node_lost_s or running.get(spec.name, src) != src or not spares:
            continue
        out.append(PlannedMove(spec.name, src, spares.pop(0), now - since))
    return out
