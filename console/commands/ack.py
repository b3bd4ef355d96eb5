"""``gpudeck ack JOB``: acknowledge a job that gave up restarting.

A job past its ``max_restarts`` keeps its ``gave_up`` alert, and the heartbeat pings
``/fail``, until someone acts. ``kill`` cannot clear it (the job has ended already); a launch
does, by starting it again. ``ack`` is for the operator who has seen it and will not restart
it now: the node clears the alert, the heartbeat's plain ping comes back at its next beat, and
the timeline gets an ``acknowledged`` event. The job itself is left as it is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...agents.contract import ops
from .common import EXIT_FAIL, EXIT_OK, exit_codes, fleet_arg

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser("ack", help="acknowledge a job that gave up restarting (clears gave_up and the heartbeat's "
                                   "/fail; starts nothing)",
                       epilog=exit_codes({EXIT_FAIL: "the agent refused (the job has not given up, or is unknown "
                                                     "there)"}))
    fleet_arg(p)
    p.add_argument("job", help="the job's name in the fleet file")
    from .jobs import NODE_HELP
    p.add_argument("--node", help=NODE_HELP)
    p.set_defaults(run=_ack)


async def _ack(args: argparse.Namespace) -> int:
    from .jobs import _client, _node

    client = _client(args)
    try:
        r = await client.request(ops.Ack(job=args.job), node=_node(args))
    finally:
        await client.close()
    print(f"{r.job}: {r.message}")
    return EXIT_OK
