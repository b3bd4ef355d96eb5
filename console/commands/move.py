"""``gpudeck move JOB --to NODE``: a verified kill on the job's node (a fence when that node
cannot be reached), then a launch on NODE that resumes from the job's output
(console/moving.py; the placement is kept in console/placements.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, err, exit_codes, fleet_arg, load_fleet

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers


EXITS = {EXIT_FAIL: "the kill on the old node did not complete (nothing launched), the new node refused or "
                    "could not be reached, or another gpudeck of this machine moved the job meanwhile",
         EXIT_USAGE: "an unknown job or node, the node the job is already on, or a cluster's job"}


def register(sub: Subparsers) -> None:
    from .jobs import seconds

    p = sub.add_parser("move", help="move a job to another node: verified kill (or fence), then launch there, "
                                    "resuming from its output", epilog=exit_codes(EXITS))
    fleet_arg(p)
    p.add_argument("job", help="the job's name in the fleet file")
    p.add_argument("--to", required=True, metavar="NODE", help="the node to run it on (a node of the fleet file)")
    p.add_argument("--grace", type=seconds, default=10.0, help="seconds between SIGTERM and SIGKILL on the old node "
                                                               "(0 to 3600)")
    p.set_defaults(run=_move)


async def _move(args: argparse.Namespace) -> int:
    from ...remote.client import FleetClient
    from ..moving import MoveFailed, MoveRefused, check_move, move_job

    fleet = load_fleet(args.fleet)
    try:
        check_move(fleet, args.job, args.to)  # before any connection: a mistake costs nothing
    except MoveRefused as exc:
        err(f"move: {exc}")
        return EXIT_USAGE
    client = FleetClient(fleet)
    try:
        report = await move_job(client, args.job, args.to, args.grace)
    except MoveFailed as exc:
        for line in exc.done:
            print(line)
        err(f"move: {exc}")
        return EXIT_FAIL
    finally:
        await client.close()
    for line in report.lines:
        print(line)
    return EXIT_OK
