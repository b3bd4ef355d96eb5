"""gpudeck's commands. Heavy imports (textual, asyncssh, torch, boto3) stay inside the
command that needs them, so `gpudeck status` starts fast."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import sys
import time
from typing import Any, Optional

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _fleet(path: Optional[str]):
    from gpudeck.remote.fleet import load_fleet, local_fleet
    path = path or os.environ.get("GPUDECK_FLEET")
    return load_fleet(path) if path else local_fleet()


def _err(msg: str) -> None:
    print(f"gpudeck: {msg}", file=sys.stderr)


# ---------------------------------------------------------------- status

async def _status(args) -> int:
    from gpudeck.console.state import FleetState
    from gpudeck.remote.client import FleetClient

    fleet = _fleet(args.fleet)
    client = FleetClient(fleet)
    try:
        state = FleetState(fleet)
        for ns in await client.status(timeout=args.timeout):
            if ns.snapshot is not None:
                state.apply(ns.snapshot)
            else:
                state.mark_unreachable(ns.node.name, ns.error or "unreachable", ns.since)
    finally:
        await client.close()
    if args.json:
        print(json.dumps(state.to_json(), indent=1))
    else:
        print(render_status(state))
    return EXIT_OK


def render_status(state) -> str:
    from gpudeck.console.formatting import human_duration
    from gpudeck.console.state import job_tokens_per_s

    lines = []
    for name, view in state.nodes.items():
        snap = view.snapshot
        if snap is None:
            since = (f" since {time.strftime('%H:%M:%S', time.localtime(view.unreachable_since))}"
                     if view.unreachable_since else "")
            lines.append(f"{name}: UNREACHABLE{since} ({view.error})")
            continue
        h = snap.host
        lines.append(f"{name} ({h.hostname}): cpu {h.cpu_pct:.0f}% of {h.cpu_count}, "
                     f"mem {h.mem_used_bytes / 2**30:.1f}/{h.mem_total_bytes / 2**30:.1f} GiB, load {h.load1:.2f}")
        if not snap.gpus:
            lines.append(f"  no GPUs: {snap.gpu_error}")
        for g in snap.gpus:
            owners = ", ".join(sorted({p.job or f"pid {p.pid}?" for p in g.processes})) or "-"
            lines.append(f"  GPU{g.index} {g.name}: {g.mem_used_mib / 1024:.1f}/{g.mem_total_mib / 1024:.1f} GiB "
                         f"util {_n(g.util_pct)}% {_n(g.temp_c)}C {_n(g.power_w)}W  {owners}")
    jobs = state.jobs()
    if jobs:
        lines.append("")
        lines.append(f"{'JOB':<20} {'NODE':<12} {'KIND':<14} {'STATE':<9} {'GPUS':<6} {'TRY':>3} "
                     f"{'DONE':>16} {'TOK/S':>9} {'ETA':>8}")
        for node, j in jobs:
            p = j.progress
            done = f"{p.done}/{p.total}" if p and p.total is not None else (str(p.done) if p else "-")
            tps = job_tokens_per_s(j)
            lines.append(f"{j.name:<20} {node:<12} {j.kind:<14} {j.state:<9} "
                         f"{','.join(map(str, j.gpus)) or '-':<6} {j.attempt:>3} {done:>16} "
                         f"{(f'{tps:.0f}' if tps is not None else '-'):>9} {human_duration(p.eta_s if p else None):>8}")
    alerts = state.alerts()
    if alerts:
        lines.append("")
        lines.extend(f"ALERT {node}: {a.message}" for node, a in alerts)
    return "\n".join(lines)


def _n(v) -> str:
    return "-" if v is None else f"{v:.0f}"


# ---------------------------------------------------------------- job operations

async def _job_op(args, op: str, **extra: Any) -> Any:
    from gpudeck.remote.client import FleetClient

    fleet = _fleet(args.fleet)
    fleet.job(args.job)  # unknown job: KeyError with the fleet's jobs, before any connection
    client = FleetClient(fleet)
    try:
        return await client.job_request(args.job, op, timeout=extra.pop("timeout", 120.0), **extra)
    finally:
        await client.close()


async def _launch(args) -> int:
    r = await _job_op(args, "launch")
    print(f"launched {r.job}: pid {r.pid}, attempt {r.attempt}, log {r.log}")
    return EXIT_OK


async def _relaunch(args) -> int:
    r = await _job_op(args, "relaunch", grace_s=args.grace, timeout=args.grace + 60)
    if r.kill is not None:
        print(f"killed {r.job}: {r.kill.message}")
    print(f"relaunched {r.job}: pid {r.pid}, attempt {r.attempt}")
    return EXIT_OK


async def _kill(args) -> int:
    from gpudeck.agents.protocol import to_plain

    r = await _job_op(args, "kill", grace_s=args.grace, timeout=args.grace + 60)
    if args.json:
        print(json.dumps(to_plain(r), indent=1))
    else:
        print(f"{'killed' if r.ok else 'KILL INCOMPLETE'} {r.job}: {r.message}")
    return EXIT_OK if r.ok else EXIT_FAIL


async def _logs(args) -> int:
    from gpudeck.remote.client import FleetClient

    fleet = _fleet(args.fleet)
    fleet.job(args.job)
    client = FleetClient(fleet)
    try:
        r = await client.logs(args.job, lines=args.lines)
        sys.stdout.write(r.text)
        sys.stdout.flush()
        offset = r.offset
        while args.follow:
            await asyncio.sleep(0.5)
            r = await client.logs(args.job, offset=offset)
            if r.text:
                sys.stdout.write(r.text)
                sys.stdout.flush()
            offset = r.offset
    finally:
        await client.close()
    return EXIT_OK


# ---------------------------------------------------------------- entry point

def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gpudeck", description="A control console for LLM data pipelines on GPU nodes.")
    ap.add_argument("--version", action="version", version=_version())
    sub = ap.add_subparsers(dest="command", required=True)

    def fleet_arg(p):
        p.add_argument("-f", "--fleet", help="fleet file (TOML); default $GPUDECK_FLEET, else this machine alone")

    p = sub.add_parser("status", help="nodes, GPUs, jobs and alerts")
    fleet_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for each node")
    p.set_defaults(run=_status)

    for name, fn, helptext in (("launch", _launch, "start a job"),
                               ("relaunch", _relaunch, "start a job again with the same spec (kills it first)"),
                               ("kill", _kill, "stop a job and verify its GPU memory came back")):
        p = sub.add_parser(name, help=helptext)
        fleet_arg(p)
        p.add_argument("job")
        if name in ("kill", "relaunch"):
            p.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
        if name == "kill":
            p.add_argument("--json", action="store_true")
        p.set_defaults(run=fn)

    p = sub.add_parser("logs", help="a job's log")
    fleet_arg(p)
    p.add_argument("job")
    p.add_argument("-n", "--lines", type=int, default=50)
    p.add_argument("--follow", action="store_true")
    p.set_defaults(run=_logs)

    # more commands live one per module in console/commands/, each with register(sub)
    import importlib
    import pkgutil

    import gpudeck.console.commands
    for mod in sorted(m.name for m in pkgutil.iter_modules(gpudeck.console.commands.__path__)):
        importlib.import_module(f"gpudeck.console.commands.{mod}").register(sub)
    return ap


def _version() -> str:
    from gpudeck.agents import __version__
    return f"gpudeck {__version__}"


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from gpudeck.remote.client import AgentError, RequestFailed
    from gpudeck.remote.fleet import FleetError

    try:
        rv = args.run(args)  # a command is a plain function or a coroutine function
        return asyncio.run(rv) if inspect.iscoroutine(rv) else rv
    except FleetError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except KeyError as exc:
        _err(exc.args[0] if exc.args else str(exc))
        return EXIT_USAGE
    except RequestFailed as exc:
        _err(f"{exc.node}: {exc}")
        return EXIT_FAIL
    except AgentError as exc:
        _err(str(exc))
        return EXIT_FAIL
    except KeyboardInterrupt:
        return 130
