"""``gpudeck note [--node N] [--job J] [--notify] "text"``: the operator's note, a ``note`` line
in the events timeline beside the alerts and restarts ("switched to B200 because …"): the
team's memory of why, where the night's events are read.

With ``--node`` it goes to that node's timeline; with ``--job`` alone, to the job's node; with
neither, to every node the fleet file names (as ``events`` reads them), so that ``gpudeck
events`` shows it once a node (merged, it reads as one line a node). ``--notify`` sends it to
the nodes' ``[[notify]]`` targets too (those that take ``note`` events); without it, a note is
the timeline's alone. It shows in ``events``, ``events --json`` and the console's events
view."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from ...agents.contract import ops
from .common import EXIT_FAIL, EXIT_OK, exit_codes, fleet_arg

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser("note", help="write a note into the events timeline (of a node, or of every node)",
                       description="Write the operator's note into the events timeline: of --node, of --job's "
                                   "node, or of every node the fleet file names. `events` and the console's "
                                   "events view show it; --notify sends it to the [[notify]] targets too.",
                       epilog=exit_codes({EXIT_FAIL: "a node could not be reached or refused the note (the others "
                                                     "have it; the message says which)"}))
    fleet_arg(p)
    p.add_argument("text", help="the note: one line (quote it)")
    p.add_argument("--node", help="the node whose timeline takes it (default: --job's node, else every node of "
                                  "the fleet file)")
    p.add_argument("--job", help="the job the note is about (its node's timeline, unless --node: then any name, "
                                 "an adopted job's too)")
    p.add_argument("--notify", action="store_true", help="send it to the [[notify]] targets too")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each node (default 30)")
    p.set_defaults(run=_note)


def author() -> str:
    """Who writes the note: user@host of this console."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"


async def _note(args: argparse.Namespace) -> int:
    from ...agents.contract.errors import OperatorError
    from ...agents.contract.plain import ProtocolError
    from ...remote.client import AgentError, FleetClient, RequestFailed
    from .common import load_fleet

    op = ops.Note(text=args.text, job=args.job, notify=args.notify, by=author())
    try:
        op.check()
    except ProtocolError as exc:
        raise OperatorError(str(exc).removeprefix("'note': "), "the note") from None
    fleet = load_fleet(args.fleet)
    if args.node:
        nodes = [fleet.node(args.node).name]  # an unknown node: UnknownName, naming the fleet's nodes
    elif args.job:
        from ...remote.fleet import LOCAL
        nodes = [fleet.job(args.job).target or LOCAL]  # an unknown job: UnknownName, naming the fleet's jobs
    else:
        nodes = [n.name for n in FleetClient(fleet).nodes_in_use()]
    client = FleetClient(fleet, reading=True)  # a note changes no job: another fleet's ownership is no reason
    failed = 0

    async def one(node: str) -> None:
        nonlocal failed
        try:
            r = await client.request(op, node=node, timeout=args.timeout)
        except (AgentError, RequestFailed, OSError) as exc:
            failed += 1
            print(f"gpudeck note: {node}: {exc or 'no answer'}", file=sys.stderr)
            return
        print(f"noted on {r.node} (event {r.seq})" + (", notified" if r.notified else ""))

    try:
        await asyncio.gather(*(one(n) for n in nodes))
    finally:
        await client.close()
    return EXIT_FAIL if failed else EXIT_OK
