"""``gpudeck adopt --node N --pid P --as NAME``: a process gpudeck did not start, made a job.

The node records its command line, working directory, environment, process group and GPUs
(ops.Adopt); the job is then shown, killed with verification and relaunched as any other.
Each refusal has its own exit code (common.py), so a script can tell them apart."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ...agents.contract import ops
from ...agents.contract.jobs import KINDS
from .common import (EXIT_FAIL, EXIT_HOLDS_NODE, EXIT_NOT_YOURS, EXIT_OK, EXIT_OWNED, EXIT_PID_REUSED, EXIT_USAGE,
                     err, exit_codes, fleet_arg, load_fleet)

if TYPE_CHECKING:
    from .common import Subparsers


# a node's refusal (ops.Adopt; agents/contract/errors.ADOPT_REFUSALS) -> the command's exit code
REFUSAL_EXITS = {"no_such_pid": EXIT_USAGE, "name_taken": EXIT_USAGE, "not_yours": EXIT_NOT_YOURS,
                 "pid_reused": EXIT_PID_REUSED, "owned": EXIT_OWNED, "holds_node": EXIT_HOLDS_NODE}
EXITS = {EXIT_FAIL: "the node could not be reached, or failed",
         EXIT_USAGE: "a mistake on the command line or in the fleet file; no such process on the node; the node "
                     "already holds a job of that name",
         EXIT_NOT_YOURS: "the process is another user's (an agent adopts only its own user's processes)",
         EXIT_PID_REUSED: "the pid names another process than the one started at --started-at",
         EXIT_OWNED: "a job already owns the process",
         EXIT_HOLDS_NODE: "its kill would take the node down: pid 1, a gpudeck agent (the node's agent, its "
                          "watcher, a relay) or one of their ancestors, or a process whose tree or process group "
                          "holds one, an sshd session or another job's process"}


def register(sub: Subparsers) -> None:
    p = sub.add_parser("adopt", help="make a process gpudeck did not start a job (shown, killed and verified, "
                                     "relaunched)", epilog=exit_codes(EXITS))
    fleet_arg(p)
    p.add_argument("--node", required=True, help="the node the process runs on")
    p.add_argument("--pid", required=True, type=_pid, help="its process id")
    p.add_argument("--as", dest="name", required=True, metavar="NAME", type=_job_name, help="the job's name")
    p.add_argument("--progress-file", metavar="F", help="where the process reports progress (progress.json or "
                                                        "a done-set; relative: to its working directory)")
    p.add_argument("--kind", choices=KINDS, default="command", help="the job's kind (default command)")
    p.add_argument("--started-at", type=float, metavar="UNIX_TIME",
                   help="the process's start as listed (status --json: gpus[].processes[].started_at); a pid "
                        "that now names a process started at another time is refused")
    p.add_argument("--json", action="store_true", help="print what the node recorded as JSON")
    p.set_defaults(run=_adopt)


def _job_name(text: str) -> str:
    """Refused here, before any connection: a newline or an escape in a name would be a line or a
    colour of its own in every view (agents/contract/jobs.job_name_problem)."""
    from ...agents.contract.jobs import job_name_problem

    problem = job_name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _pid(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"expected a process id, got {text!r}")
    return int(text)


async def _adopt(args: argparse.Namespace) -> int:
    from ...agents.contract.plain import to_plain
    from ...remote.client import FleetClient, RequestFailed

    fleet = load_fleet(args.fleet)
    fleet.node(args.node)  # an unknown node: UnknownName naming the fleet's nodes
    if any(j.name == args.name for j in fleet.jobs):
        err(f"adopt: the fleet file already declares a job {args.name!r}; adopt the process under another name")
        return EXIT_USAGE
    client = FleetClient(fleet)
    op = ops.Adopt(pid=args.pid, job=args.name, started_at=args.started_at, progress_file=args.progress_file,
                   kind=args.kind)
    try:
        r = await client.request(op, node=args.node)
    except RequestFailed as exc:
        err(f"{exc.node}: {exc}")
        if exc.refusal in REFUSAL_EXITS:
            return REFUSAL_EXITS[exc.refusal]
        return EXIT_USAGE if exc.usage else EXIT_FAIL
    finally:
        await client.close()
    if args.json:
        print(json.dumps(to_plain(r), indent=1))
    else:
        gpus = f"GPU {', '.join(map(str, r.gpus))}" if r.gpus else "no GPU"
        print(f"adopted pid {r.pid} on {args.node} as job {r.job} ({gpus}, "
              f"{'process group ' + str(r.pgid) if r.pgid else 'its process tree'}); cwd {r.cwd}")
        print(f"  logs:     gpudeck logs {r.job}  (its node is found; --node {args.node} says it)")
        print(f"  kill:     gpudeck kill {r.job} --node {args.node}")
        print(f"  relaunch: gpudeck relaunch {r.job} --node {args.node}  (the same command, directory and "
              f"environment, contained)")
    return EXIT_OK
