"""``gpudeck launch|relaunch|kill|logs JOB``: one job, from the shell.

``kill`` exits 1 when the verdict says processes or GPU memory were left behind."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Optional

from ...agents.contract import ops
from .common import (EXIT_FAIL, EXIT_HOLDS_NODE, EXIT_OK, EXIT_USAGE, OWNED_ELSEWHERE_EXIT, err, exit_codes,
                     fleet_arg, load_fleet, take_over_arg)

if TYPE_CHECKING:
    from ...remote.client import FleetClient
    from .common import Subparsers


EXITS = {"launch": {EXIT_FAIL: "the agent refused (the job already runs, its command cannot start, ...)"},
         "relaunch": {EXIT_FAIL: "the agent refused, or the kill before it did not complete"},
         "kill": {EXIT_FAIL: "the agent refused, or the kill left processes or GPU memory behind (the verdict "
                             "says which)",
                  EXIT_HOLDS_NODE: "refused, nothing signalled: the kill would take the node down (--pid 1, a "
                                   "gpudeck agent or an ancestor of one, or a process, or an adopted job, whose tree "
                                   "or process group holds one, an sshd session or another job's process)"}}


def register(sub: Subparsers) -> None:
    for name, fn, helptext in (("launch", _launch, "start a job"),
                               ("relaunch", _relaunch, "start a job again, resuming (kills it first); runs the "
                                                           "fleet file's version and prints what changed"),
                               ("kill", _kill, "stop a job and verify its GPU memory came back")):
        p = sub.add_parser(name, help=helptext, epilog=exit_codes({**EXITS[name], **OWNED_ELSEWHERE_EXIT}))
        fleet_arg(p)
        take_over_arg(p)
        if name == "kill":
            p.add_argument("job", nargs="?", help="the job (or --node and --pid for a GPU process of no job)")
            p.add_argument("--node", help="with --pid: the node of the process; with a JOB the fleet file does not "
                                          "declare (an adopted one): its node")
            p.add_argument("--pid", type=_pid, help="kill a GPU process that belongs to no job, verified the same way")
            p.add_argument("--json", action="store_true", help="print the verdict as JSON")
        else:
            p.add_argument("job", help="the job's name in the fleet file")
            p.add_argument("--node", help=NODE_HELP)
        if name in ("kill", "relaunch"):
            p.add_argument("--grace", type=seconds, default=10.0, help="seconds between SIGTERM and SIGKILL "
                                                                       "(0 to 3600)")
        p.set_defaults(run=fn)

    p = sub.add_parser("logs", help="a job's log")
    fleet_arg(p)
    p.add_argument("job", help="the job's name in the fleet file, or a job adopted on a node (`gpudeck adopt`)")
    p.add_argument("--node", help="the job's node; for an adopted job, found by asking each node when not given")
    p.add_argument("-n", "--lines", type=_count, default=50, help="how many lines from the end (default 50)")
    p.add_argument("--follow", action="store_true", help="keep printing what the job writes, until ctrl-c")
    p.set_defaults(run=_logs)


NODE_HELP = "the job's node, for a job the fleet file does not declare (one made with `gpudeck adopt`)"


def seconds(text: str) -> float:
    """A number of seconds from 0 to 3600 (NaN and infinities are not)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"expected 0 to 3600 seconds, got {text!r}")
    return value


def _pid(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"expected a process id, got {text!r}")
    return int(text)


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of lines, got {text!r}")
    return int(text)


def _client(args: argparse.Namespace, reading: bool = False, undeclared: bool = False) -> FleetClient:
    """A client of the fleet, once the job is known to it (an unknown job: UnknownName with the
    fleet's jobs, before any connection). ``reading``: a look (logs), which another fleet's
    ownership of the job never refuses. ``undeclared``: a job the file lacks is looked for on
    the nodes (:func:`_adopted_on`) rather than refused."""
    from ...remote.client import FleetClient

    fleet = load_fleet(args.fleet, getattr(args, "take_over", False))
    if getattr(args, "node", None):
        fleet.node(args.node)  # an unknown node: UnknownName naming the fleet's nodes
    elif not undeclared or any(j.name == args.job for j in fleet.jobs):
        fleet.job(args.job)
    return FleetClient(fleet, reading=reading)


async def _adopted_on(client: FleetClient, job: str) -> str:
    """The node of ``job``, a job the fleet file does not declare (one made with `gpudeck adopt`):
    every node of the fleet is asked, as a look; UnknownName when none or several run it, with
    the ``--node`` form."""
    from ...agents.contract.errors import UnknownName
    from ...remote.client import AgentError

    fleet = client.fleet
    await client.connect_all(list(fleet.nodes))
    found: list[str] = []
    for name, link in sorted(client.links.items()):
        try:
            snap = await link.next_snapshot(link.configured_seq, 10.0)
        except AgentError:
            continue
        if any(j.name == job for j in snap.jobs):
            found.append(name)
    if len(found) == 1:
        return found[0]
    where = fleet.path or "the local fleet"
    if found:
        raise UnknownName(f"job {job!r} is not in the fleet file and runs on {', '.join(found)}", where,
                          f"give its node: gpudeck logs {job} --node NODE")
    unasked = sorted(set(client.errors) | set(client.refused))
    known = ", ".join(j.name for j in fleet.jobs) or "none"
    raise UnknownName(f"unknown job {job!r}", where,
                      f"its jobs: {known}; no node " + (f"that answered (not {', '.join(unasked)}) " if unasked else "")
                      + f"runs a job of that name either; a job adopted on a node: gpudeck logs {job} --node NODE")


def _told(client: FleetClient) -> None:
    """What the change took from another fleet (--take-over), and how this file's jobs differ
    from another copy's that the node held: said before the command's own result."""
    for line in client.taken():
        print(line)
    for line in client.differs():
        err(f"warning: {line}")


def _node(args: argparse.Namespace) -> Optional[str]:
    """Where a job's op goes: its ``--node`` when given, else the fleet file's node of the job."""
    node: Optional[str] = getattr(args, "node", None)
    return node or None


async def _launch(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        r = await client.request(ops.Launch(job=args.job), node=_node(args))
    finally:
        await client.close()
    _told(client)
    from ..formatting import started_as
    print(f"launched {r.job}: {started_as(r)}, attempt {r.attempt}, log {r.log}")
    return EXIT_OK


async def _relaunch(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        r = await client.request(ops.Relaunch(job=args.job, grace_s=args.grace), node=_node(args))
    finally:
        await client.close()
    _told(client)
    if r.kill is not None:
        print(f"killed {r.job}: {r.kill.message}")
    if r.changed:  # the fleet file's version ran, not the last launch's: say how they differ
        print(f"relaunched {r.job} with the fleet file's version; changed since its last launch:")
        for line in r.changed:
            print(f"  {line}")
    from ..formatting import started_as
    print(f"relaunched {r.job}: {started_as(r)}, attempt {r.attempt}")
    return EXIT_OK


async def _kill(args: argparse.Namespace) -> int:
    from ...agents.contract.plain import to_plain
    from ...remote.client import FleetClient

    if args.pid is not None:
        if args.job or args.node is None:
            err("kill: give a JOB, or --node NODE --pid PID for a GPU process that belongs to no job")
            return EXIT_USAGE
        fleet = load_fleet(args.fleet, getattr(args, "take_over", False))
        fleet.node(args.node)  # an unknown node: UnknownName naming the fleet's nodes
        client = FleetClient(fleet)
        try:
            r = await client.request(ops.KillPid(pid=args.pid, grace_s=args.grace), node=args.node)
        finally:
            await client.close()
        _told(client)
    else:
        if not args.job:
            err("kill: give a JOB, or --node NODE --pid PID")
            return EXIT_USAGE
        client = _client(args)
        try:
            r = await client.request(ops.Kill(job=args.job, grace_s=args.grace), node=_node(args))
        finally:
            await client.close()
        _told(client)
    if args.json:
        print(json.dumps(to_plain(r), indent=1))
    else:
        print(f"{'killed' if r.ok else 'KILL INCOMPLETE'} {r.job or 'process'}: {r.message}")
    return EXIT_OK if r.ok else EXIT_FAIL


async def _logs(args: argparse.Namespace) -> int:
    client = _client(args, reading=True, undeclared=True)
    try:
        if _node(args) is None and not any(j.name == args.job for j in client.fleet.jobs):
            args.node = await _adopted_on(client, args.job)  # an adopted job: its node, found
        r = await client.request(ops.Logs(job=args.job, lines=args.lines), node=_node(args))
        sys.stdout.write(r.text)
        sys.stdout.flush()
        offset = r.offset
        while args.follow:
            await asyncio.sleep(0.5)
            r = await client.request(ops.Logs(job=args.job, offset=offset), node=_node(args))
            if r.skipped:
                sys.stderr.write(f"[gpudeck: skipped {r.skipped / 2**20:.1f} MiB of log to keep up with the job]\n")
            if r.text:
                sys.stdout.write(r.text)
                sys.stdout.flush()
            offset = r.offset
    finally:
        await client.close()
    return EXIT_OK
