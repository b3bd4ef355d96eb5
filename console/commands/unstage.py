"""``gpudeck unstage [-f FLEET] [--node N] [PATH ...]``: remove the copies that jobs' ``stage``
made on the nodes (every one, or those at PATH), through each node's agent (``ops.Unstage``,
agents/staging/copies.py). A copy a live job stages or uses is kept, and said; `gpudeck doctor`
lists the copies first. A kill never removes a copy, and a relaunch reuses it: this is the one
way they go (besides a reboot, for those in /dev/shm)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Union

from ...agents.contract import ops
from ...agents.contract.units import human_bytes
from .common import EXIT_FAIL, EXIT_OK, err, exit_codes, fleet_arg, load_fleet

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers
    from ...remote.fleet import Node


def register(sub: Subparsers) -> None:
    p = sub.add_parser("unstage", help="remove the staged copies of models on the nodes (kept: those a live job uses)",
                       epilog=exit_codes({EXIT_FAIL: "a node did not answer, or kept a copy it was asked to remove"}))
    fleet_arg(p)
    p.add_argument("paths", nargs="*", metavar="PATH", help="only the copies at these destinations (a stage's `to`)")
    p.add_argument("--node", action="append", metavar="NODE", default=[],
                   help="on this node (repeat for several; default: every node in use)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each node")
    p.set_defaults(run=_unstage)


async def _unstage(args: argparse.Namespace) -> int:
    from .watch import _nodes
    from ...remote.client import AgentError, FleetClient, RequestFailed

    fleet = load_fleet(args.fleet)
    nodes = _nodes(fleet, args.node)
    client = FleetClient(fleet, reading=True)  # removes no job of anyone's: a look's rights are enough

    async def one(node: Node) -> tuple[str, Union[ops.Unstaged, AgentError, RequestFailed, OSError]]:
        try:
            await client.connect_all([node], args.timeout)
            return node.name, await client.request(ops.Unstage(paths=list(args.paths)), node=node.name,
                                                   timeout=args.timeout)
        except (AgentError, RequestFailed, OSError) as exc:
            return node.name, exc

    try:
        results = await asyncio.gather(*(one(n) for n in nodes))
    finally:
        await client.close()
    failed = False
    for node, r in results:
        if not isinstance(r, ops.Unstaged):
            err(f"{node}: {r or 'no answer'}")
            failed = True
            continue
        for c in r.removed:
            print(f"{node}: removed {c.to} ({human_bytes(c.bytes)} from {c.source})")
        for line in r.kept:
            print(f"{node}: kept {line}")
        if not r.removed and not r.kept:
            print(f"{node}: no staged copies")
        elif r.removed:
            print(f"{node}: {human_bytes(r.freed_bytes)} freed")
        failed = failed or bool(r.kept)
    return EXIT_FAIL if failed else EXIT_OK
