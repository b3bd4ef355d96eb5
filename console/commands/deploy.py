"""`gpudeck deploy [-f FLEET] [NODE...]`: install this gpudeck version on the fleet's nodes."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Sequence, Union

from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, err, exit_codes, load_fleet

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers
    from ...remote.client import AgentError
    from ...remote.deploy import Deployed


def register(sub: Subparsers) -> None:
    p = sub.add_parser("deploy", help="install this gpudeck version on nodes (a wheel over SFTP, pip into a venv)",
                       description="Build a wheel of this gpudeck, copy it to each node over SFTP and pip install "
                                   "it into a venv there (default <home>/venv, i.e. ~/.gpudeck/venv). With the "
                                   "agent's dependencies already on the node, nothing is downloaded. The agent "
                                   "then runs with that venv's python.",
                       epilog=exit_codes({EXIT_FAIL: "some node was not deployed (the summary names it and the step)"}))
    p.add_argument("-f", "--fleet", help="fleet file (TOML); default $GPUDECK_FLEET")
    p.add_argument("nodes", nargs="*", metavar="NODE", help="nodes to deploy to (default: every SSH node)")
    p.add_argument("--cluster", action="append", default=[], metavar="CLUSTER",
                   help="a [[clusters]] table: install into its shared_dir's venv from its login node (repeatable)")
    p.add_argument("--wheel", help="install this gpudeck wheel instead of building one from this source tree")
    p.add_argument("--accept-new-host-keys", action="store_true",
                   help="record the host key of a node seen for the first time (like ssh's "
                        "StrictHostKeyChecking=accept-new); a changed key is still refused")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds each step may take on a node")
    p.set_defaults(run=_deploy)


async def _deploy(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ...remote.client import AgentError
    from ...remote.deploy import Deployed, deploy
    from ...remote.ssh import SshTransport

    fleet = load_fleet(args.fleet)
    remote_nodes = [n for n in fleet.nodes if not n.local]
    for name in args.cluster:  # a cluster's agent, tasks and observers all run the venv in its shared_dir
        if not any(n.name == name and n.cluster is not None for n in fleet.nodes):
            err(f"no cluster named {name!r} in {fleet.path or 'the local fleet'}; declared: "
                f"{', '.join(n.name for n in fleet.clusters) or 'none'}")
            return EXIT_USAGE
    args.nodes = list(args.nodes) + list(args.cluster)
    if args.nodes:
        known = {n.name: n for n in fleet.nodes}
        unknown = [name for name in args.nodes if name not in known]
        if unknown:
            err(f"no node named {', '.join(map(repr, unknown))} in {fleet.path or 'the local fleet'}; "
                 f"declared: {', '.join(known) or 'none'}")
            return EXIT_USAGE
        local = [name for name in args.nodes if known[name].local]
        if local:
            print(f"{', '.join(local)}: this machine runs the console's own gpudeck: nothing to deploy")
        nodes = [known[name] for name in args.nodes if not known[name].local]
    else:
        nodes = remote_nodes
    if not nodes:
        print("no SSH nodes to deploy to" + (f" in {fleet.path}" if fleet.path else " (no fleet file)"))
        return EXIT_OK

    def show(result: Union[Deployed, AgentError]) -> None:
        if isinstance(result, Deployed):
            print(result.describe(), flush=True)
            for line in result.problems:  # a job that would fail at launch: its fix, before any launch
                print(f"{result.node}: {line}", file=sys.stderr, flush=True)
        else:
            print(f"FAILED {result}", file=sys.stderr, flush=True)

    def step(node: str, what: str) -> None:
        print(f"{node}: {what}", flush=True)

    transport = SshTransport(accept_new=args.accept_new_host_keys)
    t0 = time.monotonic()
    try:
        results = await deploy(nodes, transport, Path(args.wheel) if args.wheel else None, args.timeout, show, step,
                               fleet=fleet)
    finally:
        await transport.close()
    failed = [r for r in results if isinstance(r, AgentError) or r.problems]
    print(summary(results, time.monotonic() - t0), flush=True)
    return EXIT_FAIL if failed else EXIT_OK


def summary(results: Sequence[Union[Deployed, AgentError]], seconds: float) -> str:
    """One line: how many nodes got this version, and which did not, at which step."""
    from ...remote.deploy import Deployed

    ok = [r for r in results if isinstance(r, Deployed)]
    bad = [r for r in results if not isinstance(r, Deployed)]
    line = f"deployed gpudeck to {len(ok)} of {len(results)} node(s) in {seconds:.1f} s"
    jobs = sum(len(r.problems) for r in ok)
    if jobs:
        line += f"; {jobs} job problem(s) to fix before launching (above)"
    if bad:
        line += "; failed: " + ", ".join(f"{getattr(r, 'node', '?')} (at {getattr(r, 'step', 'connect')})"
                                         for r in bad)
    return line
