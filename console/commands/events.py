"""`gpudeck events [-f FLEET] [--since 8h] [--json] [--follow] [NODE...]`: the overnight
timeline of every node (``<home>/events.jsonl``, agents/watch/events.py), merged in time order."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers
    from ...agents.contract.wire import Event
    from ...remote.fleet import Node


def register(sub: Subparsers) -> None:
    from .common import EXIT_FAIL, exit_codes, fleet_arg

    p = sub.add_parser("events", help="what happened on the nodes: alerts, state changes, restarts, kills, "
                                      "notifications",
                       description="The timeline of every node (alerts coming up and clearing, state changes, "
                                   "launches, kills, restarts, notifications, GPU health), merged in time order. "
                                   "Each node keeps its own in <home>/events.jsonl.",
                       epilog=exit_codes({EXIT_FAIL: "no node answered"}))
    fleet_arg(p)
    p.add_argument("nodes", nargs="*", metavar="NODE", help="nodes of the fleet (default: those in use)")
    p.add_argument("--since", default="8h", help='how far back: "8h", "30m", "2d" or "all" (default 8h)')
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--follow", action="store_true", help="keep printing new events as they come")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds to wait for each node; the agent's hello waits this or the node's "
                        "hello_timeout_s, the larger")
    p.set_defaults(run=_events)


def _since(text: str) -> float:
    from ...agents.contract.errors import OperatorError
    from ...agents.contract.units import parse_duration

    if text == "all":
        return 0.0
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise OperatorError(str(exc), "--since") from None
    assert seconds is not None  # None is "never", which only never=True reads
    return time.time() - seconds


def line(ev: Event) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ev.t))
    where = " ".join(x for x in (ev.job and f"job={ev.job}", ev.gpu is not None and f"gpu={ev.gpu}") if x)
    by = f" ({ev.details['by']})" if ev.kind.value == "note" and ev.details.get("by") else ""  # who wrote a note
    return f"{when} {ev.node:<12} {ev.kind.value:<14} {where + ' ' if where else ''}{ev.message}{by}"


async def _events(args: argparse.Namespace) -> int:
    from .common import load_fleet as _fleet
    from .watch import _nodes
    from ...agents.contract import ops
    from ...agents.contract.plain import to_plain
    from ...remote.client import AgentError, FleetClient, RequestFailed

    fleet = _fleet(args.fleet)
    nodes = _nodes(fleet, args.nodes)
    since = _since(args.since)
    client = FleetClient(fleet, reading=True)  # a look: another fleet's jobs there are no reason to refuse
    after: dict[str, int] = {}
    down: dict[str, str] = {}

    async def one(node: Node) -> list[Event]:
        req = ops.ReadEvents(after_seq=after[node.name]) if node.name in after else ops.ReadEvents(since=since)
        try:
            r = await client.request(req, node=node.name, timeout=args.timeout)  # bounded: the hello apart
        except (AgentError, RequestFailed, OSError) as exc:
            why = str(exc) or "no answer"
            if down.get(node.name) != why:
                print(f"gpudeck: {node.name}: {why}", file=sys.stderr, flush=True)
            down[node.name] = why
            link = client.links.pop(node.name, None)
            if link is not None:
                await link.close()
            return []
        down.pop(node.name, None)
        # follow on from here: the node's last seq when it was asked, or the newest event read
        after[node.name] = max([r.seq] + [e.seq for e in r.events])
        return r.events

    first = True
    try:
        while True:
            batches = await asyncio.gather(*(one(n) for n in nodes))
            merged = sorted((e for b in batches for e in b), key=lambda e: (e.t, e.node, e.seq))
            for ev in merged:
                print(json.dumps(to_plain(ev), separators=(",", ":")) if args.json else line(ev), flush=args.follow)
            if first and not merged and len(down) < len(nodes):
                # nothing to show: say so, on stderr (--json's output stays JSON lines, here none)
                print(f"gpudeck: {nothing_since([n.name for n in nodes if n.name not in down], since)}"
                      + ("; waiting for new ones (ctrl-c to stop)" if args.follow else ""),
                      file=sys.stderr, flush=True)
            first = False
            if not args.follow:
                break
            await asyncio.sleep(1.0)
    finally:
        await client.close()
    return 1 if down and not args.follow and len(down) == len(nodes) else 0


def nothing_since(nodes: list[str], since: float) -> str:
    when = "ever" if since <= 0 else f"since {time.strftime('%Y-%m-%d %H:%M', time.localtime(since))}"
    return f"no events on {', '.join(nodes)} {when}"
