"""`gpudeck doctor [-f FLEET] [--node N] [--json]`: each node checked before the run, through
its agent (``ops.Doctor``, answered by agents/doctor.py): python and the venv, torch and CUDA,
the driver, SGLang, each job's model, disk and S3, the clock, containment and limits. One line
per check (ok, warn or fail) with its fix; exit 1 when any check fails or a node does not answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...agents.contract.ops import Check, Doctor, DoctorReport
from ...agents.contract.plain import to_plain
from ...agents.contract.vocab import NodeState, Verdict

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers
    from ...remote.fleet import Node


def register(sub: Subparsers) -> None:
    from .common import EXIT_FAIL, EXIT_USAGE, exit_codes, fleet_arg

    p = sub.add_parser("doctor", help="check the nodes before a run: python, torch, the driver, models, disk, S3, "
                                      "clock, limits",
                       description="Check each node before a run, against the jobs the fleet file gives it: the "
                                   "venv and its python, a timed import of torch and CUDA's start, the driver and "
                                   "NVML, SGLang (for sglang-server jobs), each model's path and its fit on the "
                                   "GPUs, free disk against the plan, S3 credentials and the bucket, the clock "
                                   "against this machine's, cgroup or token containment, open-file and process "
                                   "limits. One line per check: ok, warn or fail, and the fix.",
                       epilog=exit_codes({EXIT_FAIL: "a check failed, or a node did not answer (warnings alone: 0)",
                                          EXIT_USAGE: "a mistake on the command line or in the fleet file; an "
                                                      "unknown node (the message names the fleet's nodes)"}))
    fleet_arg(p)
    p.add_argument("--node", action="append", metavar="NODE", default=[],
                   help="check this node (repeat for several; default: every node in use)")
    p.add_argument("--json", action="store_true", help="the same lines as one JSON object")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds to wait for each node's answer (default 600: the imports may be slow)")
    p.add_argument("--check-timeout", type=float, default=120.0, metavar="S",
                   help="each check's own timeout on the node (default 120)")
    p.add_argument("--import-warn", type=float, default=20.0, metavar="S",
                   help="an import of torch or SGLang slower than this is a warning (default 20)")
    p.set_defaults(run=_doctor)


async def _doctor(args: argparse.Namespace) -> int:
    from .common import EXIT_FAIL, EXIT_OK, load_fleet
    from .watch import _nodes
    from ...agents.contract.errors import OperatorError
    from ...remote.client import AgentError, AgentFailed, FleetClient, RequestFailed

    for flag, value in (("--check-timeout", args.check_timeout), ("--import-warn", args.import_warn)):
        if not 0 < value <= 1800:
            raise OperatorError(f"{flag} must be seconds above 0, at most 1800; got {value:g}", flag)
    fleet = load_fleet(args.fleet)
    nodes = _nodes(fleet, args.node)  # an unknown node: UnknownName, naming the fleet's nodes (exit 2)
    client = FleetClient(fleet, reading=True)  # a look: another fleet's jobs there are no reason to refuse

    async def one(node: Node) -> tuple[str, Any]:
        try:
            await client.connect_all([node], args.timeout)
            # the op made after the connect: the skew the node sees is then the transit alone
            op = doctor_op(node, args.import_warn, args.check_timeout)
            return node.name, await client.request(op, node=node.name, timeout=args.timeout)
        except AgentFailed as exc:  # it answered: its agent would not start
            return node.name, NodeFailed(str(exc), agent_failed=True)
        except (AgentError, RequestFailed, OSError) as exc:
            return node.name, NodeFailed(str(exc) or "no answer")

    try:
        results = dict(await asyncio.gather(*(one(n) for n in nodes)))
    finally:
        await client.close()
    if args.json:
        print(json.dumps({"nodes": [_node_json(n, r) for n, r in results.items()]}, indent=1))
    else:
        print("\n".join(render(n, r) for n, r in results.items()))
    bad = any(not isinstance(r, DoctorReport) or r.worst is Verdict.FAIL for r in results.values())
    return EXIT_FAIL if bad else EXIT_OK


def doctor_op(node: "Node", import_warn_s: float = 20.0, timeout_s: float = 120.0) -> Doctor:
    """The request for ``node`` (the command's, and the console's `d`): the console's clock now,
    for the node's clock check, and the venv `gpudeck deploy` fills there (none for this
    machine: the agent's own python is the one checked)."""
    return Doctor(console_time=time.time(), venv="" if node.local else node.agent_venv,
                  import_warn_s=import_warn_s, timeout_s=timeout_s)


@dataclass(frozen=True)
class NodeFailed:
    """Why a node has no report: ``error`` names the node; ``agent_failed``: it answered, and
    its agent would not start (never said to be unreachable)."""

    error: str
    agent_failed: bool = False

    @property
    def state(self) -> str:
        return NodeState.AGENT_FAILED.value if self.agent_failed else NodeState.UNREACHABLE.value


def _node_json(node: str, r: Any) -> dict[str, Any]:
    if isinstance(r, NodeFailed):
        return {"node": node, "error": r.error, "state": r.state, "worst": None, "checks": []}
    return {"node": node, "error": None, "state": NodeState.UP.value, "worst": r.worst.value, "at": r.at,
            "checks": [to_plain(c) for c in r.checks]}


def check_name(c: Check) -> str:
    """What a line says was checked: the check, and the job it is about."""
    return f"{c.name} {c.job}" if c.job else c.name


def counts(r: DoctorReport) -> str:
    """``1 fail, 2 warn, 8 ok``: the report's head, worst first."""
    n = {v: sum(c.verdict is v for c in r.checks) for v in Verdict}
    return ", ".join(f"{n[v]} {v.value}" for v in (Verdict.FAIL, Verdict.WARN, Verdict.OK))


def line(c: Check) -> str:
    out = f"  {c.verdict.value:<4}  {check_name(c):<16} {c.detail}"
    if c.fix and c.verdict is not Verdict.OK:
        out += f"\n        fix: {c.fix}"
    return out


def render(node: str, r: Any) -> str:
    if isinstance(r, NodeFailed):
        return f"{node}: {r.state.upper()} ({r.error})"
    return "\n".join([f"{node}: {counts(r)}", *(line(c) for c in r.checks)])
