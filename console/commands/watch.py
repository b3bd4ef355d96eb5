"""`gpudeck watch start|stop|status [-f FLEET] [NODE...]`: a watcher that outlives the console;
`gpudeck watch fleet [-f FLEET]`: the whole fleet watched from here, the jobs of a lost node
moved to a spare (console/automove.py).

``start`` sets each node's ``watching`` flag (``<home>/watch.json``) after the usual
``configure``, which carries the fleet's jobs, ``[[notify]]`` and ``[alerts]``; when this
command's connection closes the node's agent hands over to a detached one (agents/watch/
daemon.py), and ``start`` waits until it answers. ``stop`` clears the flag: the watcher exits
when its last console leaves. ``status`` shows each watcher; with ``--follow`` it keeps
running and sends ``node_unreachable`` (remote/unreachable.py) for a node that stops answering.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeGuard, Union

from ...agents.contract.ops import Watch, WatchStatus
from ...agents.contract.plain import to_plain
from ...agents.contract.vocab import RestartPolicy

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers
    from ...remote.fleet import Fleet, Node


def register(sub: Subparsers) -> None:
    from .common import EXIT_FAIL, exit_codes, fleet_arg

    p = sub.add_parser("watch", help="keep a watcher on the nodes when no console is connected",
                       description="A watcher samples, restarts jobs by their policy, raises alerts and sends "
                                   "notifications while no console is connected.")
    wsub = p.add_subparsers(dest="watch_command", required=True)
    for name, fn, text in (("start", _start, "start a watcher on each node (one per node)"),
                           ("stop", _stop, "stop watching: the agent exits when its last console leaves"),
                           ("status", _status, "show each node's watcher")):
        q = wsub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".",
                            epilog=exit_codes({EXIT_FAIL: "some node did not answer (the report says which)"}))
        fleet_arg(q)
        q.add_argument("nodes", nargs="*", metavar="NODE", help="nodes of the fleet (default: those in use)")
        q.add_argument("--json", action="store_true", help="machine-readable output")
        q.add_argument("--timeout", type=float, default=60.0,
                       help="seconds to wait for each node; the agent's hello waits this or the node's "
                            "hello_timeout_s, the larger")
        if name == "start":
            q.add_argument("--supervise", choices=("auto", "systemd", "cron", "none"), default="auto",
                           help="register the watcher with the node's supervisor so that it comes back after a "
                                "kill -9 or a reboot: a systemd user unit (Restart=always), or the user's crontab "
                                "(@reboot and every minute); auto: the first that works there (default)")
        if name == "status":
            q.add_argument("--follow", action="store_true",
                           help="keep watching the nodes; notify [[notify]] targets of a node that stops answering")
            q.add_argument("--unreachable-after", type=float, default=120.0, metavar="SECONDS",
                           help="with --follow: how long a node is down before node_unreachable is sent")
        q.set_defaults(run=fn)
    q = wsub.add_parser("fleet", help="watch the whole fleet from here; move the jobs of a lost node to a spare",
                        description="Keep every node of the fleet connected and, once a node has been unreachable "
                                    "for [alerts] node_lost_s, move each of its jobs with on_node_lost = \"move\" "
                                    "to a spare node (spare = true) that is up and holds no job: the old attempt is "
                                    "fenced, the new one resumes from the job's output. Runs until ctrl-c.",
                        epilog=exit_codes())
    fleet_arg(q)
    from .jobs import seconds
    q.add_argument("--grace", type=seconds, default=10.0,
                   help="a move's kill, when the old node answers after all: seconds between SIGTERM and SIGKILL")
    q.set_defaults(run=_fleet)


async def _fleet(args: argparse.Namespace) -> int:
    from ...remote.client import FleetClient
    from ..automove import watch_fleet
    from .common import load_fleet

    fleet = load_fleet(args.fleet)
    client = FleetClient(fleet)
    print(f"watching {len(client.nodes_in_use())} node(s); a node unreachable for "
          f"{fleet.alerts.node_lost_s:g} s is lost", flush=True)
    try:
        await watch_fleet(client, grace_s=args.grace, say=lambda line: print(line, flush=True))
    finally:
        await client.close()
    return 0


def _nodes(fleet: Fleet, names: list[str]) -> list[Node]:
    from ...remote.client import FleetClient

    if not names:
        return FleetClient(fleet).nodes_in_use()
    out: list[Node] = []
    for n in names:
        out.append(fleet.node(n))  # an unknown node: UnknownName, naming the fleet's nodes
    return out


@dataclass(frozen=True)
class NodeFailure:
    """Why a node has no WatchStatus to show. ``state``: ``unreachable`` (it could not be
    reached), ``agent_failed`` (it answered, and its agent would not start: a home it refuses,
    another version; the agent's reason), ``refused`` (its agent answered, and refused) or
    ``error`` (something else went wrong: a watcher that did not take over). Only the first is
    ever shown as UNREACHABLE."""

    state: str
    reason: str


# what a node gave ``watch``: its watcher's status, or why there is none
Answer = Union[WatchStatus, NodeFailure]


def fleet_args(node: Node) -> list[str]:
    """The node's agent arguments by the fleet file now (node keys such as ``interval`` and
    ``textfile_dir``), as a watcher reports its own (``WatchStatus.args``)."""
    from ...agents.contract.watching import agent_args
    from ...remote.link import agent_argv

    return agent_args(agent_argv(node, "python")[3:])  # less "python -m gpudeck.agents"


async def _ask(fleet: Fleet, nodes: list[Node], op: Union[Watch, Callable[[Node], Watch]],
               timeout: float) -> dict[str, Answer]:
    """``op`` (or ``op(node)``) on every node at once: node -> its WatchStatus, or a NodeFailure."""
    from ...remote.client import AgentError, AgentFailed, FleetClient, RequestFailed

    client = FleetClient(fleet)

    async def one(node: Node) -> tuple[str, Answer]:
        try:
            one_op = op if isinstance(op, Watch) else op(node)
            return node.name, await client.request(one_op, node=node.name, timeout=timeout)  # bounded: the hello apart
        except RequestFailed as exc:
            return node.name, NodeFailure("refused", exc.reason)
        except AgentFailed as exc:  # another version among them
            return node.name, NodeFailure("agent_failed", exc.reason)
        except AgentError as exc:
            return node.name, NodeFailure("unreachable", exc.reason)
        except OSError as exc:
            return node.name, NodeFailure("unreachable", f"{exc}")

    try:
        return dict(await asyncio.gather(*(one(n) for n in nodes)))
    finally:
        await client.close()


def _settled(r: Optional[Answer], want: list[str]) -> TypeGuard[WatchStatus]:
    """Whether ``watch start`` is done with this node: its detached watcher answered, with the
    fleet file's settings, or the agent that answered has another console open (it hands over
    when the last one closes, which may be hours away: nothing to wait for)."""
    return isinstance(r, WatchStatus) and ((r.detached and r.args == want) or r.consoles > 1)


async def _start(args: argparse.Namespace) -> int:
    from .common import load_fleet as _fleet

    fleet = _fleet(args.fleet)
    nodes = _nodes(fleet, args.nodes)
    want = {n.name: fleet_args(n) for n in nodes}
    first = await _ask(fleet, nodes, lambda n: Watch(on=True, supervise=args.supervise, node_args=want[n.name]),
                       args.timeout)
    results = {n: r for n, r in first.items() if not isinstance(r, WatchStatus) or _settled(r, want[n])}
    # the links are closed: each node's agent left alone hands over to its detached watcher; wait for it
    pending = [n for n in nodes if n.name not in results]
    deadline = time.monotonic() + args.timeout
    while pending:
        got = await _ask(fleet, pending, Watch(), max(5.0, min(30.0, deadline - time.monotonic())))
        for n in list(pending):
            r = got.get(n.name)
            if _settled(r, want[n.name]):
                results[n.name] = r
                pending.remove(n)
        if pending and time.monotonic() > deadline:
            break
        if pending:
            await asyncio.sleep(0.5)
    if pending:  # no half set-up watch behind an error: switched off again, and said so
        undone = await _ask(fleet, pending, Watch(on=False), max(5.0, args.timeout))
        for n in pending:
            started = first[n.name]
            assert isinstance(started, WatchStatus)  # pending: its first answer was a status, not yet settled
            log_path = started.log
            log_note = (f"its log on the node: {log_path}" if not n.local else
                        f"see {log_path}" if os.path.exists(log_path) else f"it wrote no {log_path}")
            back = undone.get(n.name)
            off = ("watching is off again" if isinstance(back, WatchStatus) else
                   f"and switching it off again failed ({back.reason if back else 'no answer'}): "
                   f"run `gpudeck watch stop {n.name}`")
            results[n.name] = NodeFailure("error", f"the detached watcher did not take over within "
                                                   f"{args.timeout:g} s ({log_note}); {off}")
    return _report(args, {n.name: results[n.name] for n in nodes}, "watching", want)


async def _stop(args: argparse.Namespace) -> int:
    from .common import load_fleet as _fleet

    fleet = _fleet(args.fleet)
    return _report(args, await _ask(fleet, _nodes(fleet, args.nodes), Watch(on=False), args.timeout), "stopped")


async def _status(args: argparse.Namespace) -> int:
    from .common import load_fleet as _fleet

    fleet = _fleet(args.fleet)
    nodes = _nodes(fleet, args.nodes)
    if args.follow:
        return await _follow(fleet, nodes, args.unreachable_after)
    return _report(args, await _ask(fleet, nodes, Watch(), args.timeout), None,
                   {n.name: fleet_args(n) for n in nodes})


def _report(args: argparse.Namespace, results: dict[str, Answer], verb: Optional[str],
            want: Optional[dict[str, list[str]]] = None) -> int:
    if args.json:
        print(json.dumps({n: (to_plain(r) if isinstance(r, WatchStatus) else {"error": r.reason, "state": r.state})
                          for n, r in results.items()}, indent=1))
    else:
        for node, r in results.items():
            print(render(node, r, verb, (want or {}).get(node), getattr(args, "fleet", None)))
    return 0 if all(isinstance(r, WatchStatus) for r in results.values()) else 1


def render(node: str, r: Answer, verb: Optional[str] = None, want: Optional[list[str]] = None,
           fleet_path: Optional[str] = None) -> str:
    if isinstance(r, NodeFailure):
        return f"{node}: {'UNREACHABLE' if r.state == 'unreachable' else r.state.upper()} ({r.reason})"
    if r.watching:
        others = r.consoles - 1  # the consoles besides this command's own connection
        who = f"detached watcher pid {r.pid}" if r.detached else \
            f"agent pid {r.pid} with {others} other console(s) open; the watcher takes over when the last " \
            f"console closes" if others > 0 else \
            f"agent pid {r.pid} (hands over to a detached watcher when its last console leaves)"
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.since)) if r.since else "?"
        head = f"{node}: watching since {since}: {who}; log {r.log}"
    else:
        head = f"{node}: not watching" + (f" (agent pid {r.pid} exits when its last console leaves)"
                                          if verb == "stopped" else "")
    lines = [head]
    if r.watching and want is not None and r.args != want:  # a node key changed since it started
        f = f" -f {fleet_path}" if fleet_path else ""
        then = ("the watcher that takes over when the last console closes starts with the fleet file's"
                if not r.detached and r.want_args == want else f"apply with: gpudeck watch start{f} {node}")
        lines.append(f"  STALE settings: runs with `{' '.join(r.args)}`, the fleet file says "
                     f"`{' '.join(want)}`; {then}")
    sup = r.supervisor
    if r.watching or sup.present:
        health = "healthy" if sup.healthy else "NOT HEALTHY" if sup.kind != "none" else "none"
        lines.append(f"  supervisor: {sup.kind} ({health}): {sup.detail}")
    hb = r.heartbeat
    if hb:
        last = hb.last
        when = time.strftime("%H:%M:%S", time.localtime(last.at)) if last else "never"
        lines.append(f"  heartbeat: {hb.target} every {hb.every:g} s; last sent {when}"
                     + (f" ({'/fail, ' if last.fail else ''}{last.answer})" if last else "")
                     + (f"; failing: {hb.failing}" if hb.failing else "")
                     + (f"; a ping in flight for {hb.in_flight_s:g} s" if hb.in_flight_s else ""))
    if r.notify:
        lines.append(f"  notify: {', '.join(r.notify)}; {r.outbox.pending} message(s) pending")
    for t in r.outbox.targets:
        if t.failing:
            lines.append(f"  ! {t.target}: {t.failing}")
    for j in r.jobs:
        if j.restart and j.restart is not RestartPolicy.NEVER or j.restart_on_stall or j.deadline:
            nxt = (f", next at {time.strftime('%H:%M:%S', time.localtime(j.next_restart_at))}"
                   if j.next_restart_at else "")
            lines.append(f"  job {j.name}: restart {j.restart}, {j.restarts}/"
                         f"{j.max_restarts if j.max_restarts is not None else '-'} restarts{nxt}"
                         + (f", on stall {j.restart_on_stall}" if j.restart_on_stall else "")
                         + (f", deadline {j.deadline}" if j.deadline else "")
                         + (f" — {j.restart_note}" if j.restart_note else ""))
    if r.active:
        lines.append(f"  active: {', '.join(r.active)}")
    return "\n".join(lines)


async def _follow(fleet: Fleet, nodes: list[Node], after_s: float) -> int:
    """Keep every node connected (as the TUI does) and print one line per node per change
    (connected, unreachable, answering again); a node down for ``after_s`` is notified to the
    ``[[notify]]`` targets, and a line says so. Runs until ctrl-c (asyncio.run turns it into
    KeyboardInterrupt: exit 130, as every command)."""
    from ...agents.contract.vocab import EventKind
    from ...remote.client import FleetClient, NodeDown, NodeUp
    from ...remote.unreachable import UnreachableNotifier

    client = FleetClient(fleet)
    alarm = UnreachableNotifier(fleet.notify, after_s)
    wanted = {n.name for n in nodes}
    shown: dict[str, str] = {}  # node: the last state printed ("up" or "down")

    def say(node: str, text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {node}: {text}", flush=True)

    def on_event(node: str, event: Any) -> None:
        if node not in wanted:
            return
        if isinstance(event, NodeDown):
            if shown.get(node) != "down":
                say(node, f"unreachable: {event.error.reason}")
                shown[node] = "down"
            alarm.down(node, str(event.error), event.since)
        elif isinstance(event, NodeUp):
            if shown.get(node) != "up":
                say(node, f"connected (agent pid {event.hello.pid}"
                          f"{', the detached watcher' if event.hello.detached else ''})")
                shown[node] = "up"
            alarm.up(node)

    task = asyncio.create_task(client.watch(on_event))
    try:
        while True:
            await asyncio.wait({task}, timeout=1.0)
            if task.done():
                task.result()  # what ended the watch (a closed output: BrokenPipeError) ends the command
            before = len(alarm.sent)
            alarm.check()
            for ev in alarm.sent[before:]:
                targets = [t.label for t in alarm.targets if t.wants(EventKind(ev["kind"]))]
                if targets:  # the node's line said why already; this one says who was told
                    say(ev["node"], f"{ev['kind']} sent to {', '.join(targets)}")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
