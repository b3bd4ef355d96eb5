"""`gpudeck history [-f FLEET] [--node N] [--job J] [--gpu I] [--since 12h] [--until 1h]
[--resolution auto] [--json|--csv]`: what the GPUs and jobs did, from each node's own history
(``<home>/history.db``, agents/historydb.py), read through its agent (the ``history`` op)."""

from __future__ import annotations

import csv
import json
import sys
import time
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers
    from ...agents.contract.ops import HistoryPoint


def register(sub: Subparsers) -> None:
    from .common import EXIT_FAIL, exit_codes, fleet_arg

    p = sub.add_parser("history", help="what the GPUs and jobs did: memory, utilization, temperature, power, "
                                       "tokens/s, requests, KV use, over hours or days",
                       description="Each node keeps its GPUs' and jobs' figures for 90 days: every sample for "
                                   "an hour, a minute's min/mean/max for 7 days, an hour's for 90 days "
                                   "(<home>/history.db). This reads them through the node's agent.",
                       epilog=exit_codes({EXIT_FAIL: "no node answered, or a node refused (its history is off)"}))
    fleet_arg(p)
    p.add_argument("--node", action="append", default=[], metavar="N", help="this node (repeat for more; "
                                                                             "default: those in use)")
    p.add_argument("--job", metavar="J", default=None, help="this job only (on its node)")
    p.add_argument("--gpu", metavar="I", type=int, default=None, help="this GPU index only")
    p.add_argument("--since", default="12h", help='how far back: "12h", "30m", "7d" (default 12h)')
    p.add_argument("--until", default=None, help='up to how long ago: "1h" (default: now)')
    p.add_argument("--resolution", choices=("auto", "1s", "1m", "1h"), default="auto",
                   help="every sample, minutes or hours (default auto: the finest the range allows, "
                        "at most 720 points a series)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object per point and line")
    out.add_argument("--csv", action="store_true", help="CSV with a header line")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each node")
    p.set_defaults(run=_history)


def ago(text: Optional[str], flag: str, now: float) -> Optional[float]:
    """``text`` ("12h") as the unix time that long before ``now``; None stays None. Further
    back than the nodes keep anything (90 days) reads from there, and says so: a time before
    that finds nothing more, and one past SQLite's integers cannot be asked at all."""
    from ...agents.contract.errors import OperatorError
    from ...agents.contract.units import parse_duration
    from ...agents.contract.ops import HISTORY_KEPT_S

    if text is None:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise OperatorError(str(exc), flag) from None
    assert seconds is not None
    kept = HISTORY_KEPT_S
    if seconds > kept:
        print(f"{flag} {text}: the nodes keep {kept // 86400} days of history; reading from "
              f"{kept // 86400} days back", file=sys.stderr)
        seconds = kept
    return now - seconds


async def _history(args: argparse.Namespace) -> int:
    from ...agents.contract import ops
    from ...agents.contract.errors import OperatorError
    from ...remote.client import AgentError, FleetClient, RequestFailed
    from .common import load_fleet
    from .watch import _nodes

    fleet = load_fleet(args.fleet)
    now = time.time()
    since = ago(args.since, "--since", now)
    until = ago(args.until, "--until", now)
    assert since is not None
    if until is not None and until < since:
        raise OperatorError(f"--until {args.until} is before --since {args.since}", "--until")
    if args.gpu is not None and args.gpu < 0:
        raise OperatorError(f"--gpu must be an index (0 or more), got {args.gpu}", "--gpu")
    op = ops.ReadHistory(since=since, until=until, resolution=args.resolution, job=args.job, gpu=args.gpu)
    if args.node:
        targets: list[Optional[str]] = [n.name for n in _nodes(fleet, args.node)]
    elif args.job:
        targets = [None]  # the job's node (FleetClient.request routes it)
    else:
        targets = [n.name for n in _nodes(fleet, [])]
    client = FleetClient(fleet, reading=True)  # a look: another fleet's jobs there are no reason to refuse
    pages = []
    failed = 0
    try:
        for node in targets:
            try:
                pages.append(await client.request(op, node=node, timeout=args.timeout))
            except (AgentError, RequestFailed, OSError) as exc:
                failed += 1
                print(f"gpudeck: {node or args.job}: {str(exc) or 'no answer'}", file=sys.stderr, flush=True)
    finally:
        await client.close()
    rows = sorted(((p.node, pt) for p in pages for pt in p.points),
                  key=lambda r: (r[1].t, r[0], r[1].gpu is None, r[1].gpu or "", r[1].job or ""))
    if args.json:
        from ...agents.contract.plain import to_plain
        for node, pt in rows:
            print(json.dumps({"node": node, **to_plain(pt)}, separators=(",", ":")))
    elif args.csv:
        write_csv(rows)
    else:
        resolution = ", ".join(sorted({p.resolution or "" for p in pages}))
        if rows:
            print(f"# {len(rows)} points at {resolution}; a bucket's mean, [lo..hi] where they differ")
        for node, pt in rows:
            print(table_line(node, pt))
        if not rows and pages:
            print(f"gpudeck: no history on {', '.join(p.node for p in pages)} from "
                  f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(since))}", file=sys.stderr)
    return 1 if failed else 0


def _num(v: Optional[float]) -> str:
    if v is None:
        return "-"
    if abs(v) >= 100 or float(v).is_integer():
        return f"{v:.0f}"
    return f"{v:.3g}" if abs(v) < 1 else f"{v:.1f}"


def table_line(node: str, pt: HistoryPoint) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(pt.t))
    what = f"gpu {pt.gpu}" if pt.gpu is not None else f"job {pt.job}"
    figures = []
    from ...agents.contract.ops import GPU_FIGURES, JOB_FIGURES

    for name in (GPU_FIGURES if pt.gpu is not None else JOB_FIGURES):
        if name not in pt.mean:
            continue
        text = f"{name}={_num(pt.mean[name])}"
        lo, hi = pt.lo.get(name), pt.hi.get(name)
        if lo is not None and hi is not None and lo != hi:
            text += f"[{_num(lo)}..{_num(hi)}]"
        figures.append(text)
    state = f" {pt.state}" if pt.state else ""
    return f"{when} {node:<12} {what:<16}{state} {' '.join(figures)}"


def write_csv(rows: list[tuple[str, HistoryPoint]]) -> None:
    w = csv.writer(sys.stdout, lineterminator="\n")
    from ...agents.contract.ops import GPU_FIGURES, JOB_FIGURES

    figures = GPU_FIGURES + JOB_FIGURES
    w.writerow(["time", "node", "gpu", "job", "state", "n"]
               + [f"{f}_{k}" for f in figures for k in ("mean", "lo", "hi")])
    for node, pt in rows:
        line = [f"{pt.t:.3f}", node, pt.gpu or "", pt.job or "", pt.state or "", pt.n]
        for f in figures:
            mean = pt.mean.get(f)
            line += ["" if mean is None else mean, pt.lo.get(f, mean) if mean is not None else "",
                     pt.hi.get(f, mean) if mean is not None else ""]
        w.writerow(line)
