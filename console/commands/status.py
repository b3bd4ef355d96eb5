"""``gpudeck status [--json]``: nodes, GPUs, jobs and alerts, once, without the TUI."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Optional

from ...agents.contract.jobs import JobKind
from ...agents.contract.vocab import JobState, ShownState
from ...agents.contract.documents import drift_text
from .common import (EXIT_OK, EXIT_OWNED_ELSEWHERE, EXIT_UNREACHABLE, EXIT_USAGE, err, exit_codes, fleet_arg,
                     load_fleet)
from ..cost import NO_PRICE, dollars
from ..formatting import copy_text

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers
    from ...agents.contract.wire import JobStatus, Progress
    from ..cost import NodeCost
    from ..state import FleetState


ALIVE = frozenset(s for s in JobState if s.alive)


def register(sub: Subparsers) -> None:
    p = sub.add_parser("status", help="nodes, GPUs, jobs and alerts", epilog=exit_codes(
        {EXIT_UNREACHABLE: "some node could not be read: it did not answer, or its agent failed (the report says "
                           "which and why)",
         EXIT_OWNED_ELSEWHERE: "every node answered, and some job of this fleet file belongs to another fleet "
                               "there (shown, marked with its owner)"}))
    fleet_arg(p)  # no --take-over: a look takes nothing (docs/nodes.md#who-owns-a-nodes-jobs)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeout", type=float, default=15.0,
                   help="seconds to wait for each node; the agent's hello waits this or the node's "
                        "hello_timeout_s, the larger")
    p.set_defaults(run=_status)


async def _status(args: argparse.Namespace) -> int:
    from ..state import FleetState
    from ...remote.client import FleetClient

    from ..placements import PlacementStore, moved

    fleet = load_fleet(args.fleet)
    client = FleetClient(fleet, reading=True)
    try:
        state = FleetState(fleet, moves=moved(fleet, PlacementStore().of(fleet.path)))
        for view in await client.status(timeout=args.timeout):
            if view.snapshot is not None:
                state.apply(view.snapshot)
                state.set_copy(view.snapshot.node, view.copy)  # the state keys a node by its snapshot's name
            else:
                state.mark_unreachable(view.name, view.error or "unreachable", view.unreachable_since)
    finally:
        await client.close()
    for line in client.differs():  # another copy of this fleet declared its jobs there: how they differ
        err(f"warning: {line}")
    if args.json:
        print(json.dumps(state.to_json(), indent=1))
    else:
        print(render_status(state))
    # 2: a cluster's login cannot be used at all (no squeue there): the fleet file's mistake
    setup = [(name, view.snapshot.cluster.setup_error) for name, view in state.nodes.items()
             if view.snapshot is not None and view.snapshot.cluster is not None and view.snapshot.cluster.setup_error]
    for name, problem in setup:
        err(f"cluster {name}: {problem}")
    if setup:
        return EXIT_USAGE
    # 3: some node could not be read (unreachable, or its agent failed; the report says why): a partial look
    if any(not view.reachable for view in state.nodes.values()):
        return EXIT_UNREACHABLE
    # 7: every node answered, and another fleet owns some of this file's jobs (not a node down)
    return EXIT_OWNED_ELSEWHERE if any(state.owned_elsewhere(name) for name in state.nodes) else EXIT_OK


def render_status(state: FleetState) -> str:
    """The plain-text report: each node and its GPUs, then the jobs, then the dollars, then the alerts."""
    lines = _node_lines(state)
    jobs = _job_lines(state)
    money = state.totals()
    if money.priced:
        jobs.append(f"fleet: {dollars(money.spent)} spent, {dollars(money.to_finish)} to finish at the current rate"
                    + (f"; {dollars(money.idle_per_hour)}/h idle" if money.idle_per_hour is not None else "")
                    + (f"; {dollars(money.burned)} burned by killed, failed and lost attempts" if money.burned else ""))
    if jobs:
        lines.append("")
        lines.extend(jobs)
    alerts = state.alerts()
    if alerts:
        lines.append("")
        lines.extend(f"ALERT {node}: {a.message}" for node, a in alerts)
    return "\n".join(lines)


def _health_lines(p: Progress, now: float) -> list[str]:
    """A job's S3 backlog, its servers resting and why it cannot write, when it reports them."""
    from ..formatting import human_duration
    from ...agents.contract.units import human_bytes

    out = []
    u = p.uploads
    if u is not None:
        size = f" ({human_bytes(u.pending_bytes)})" if u.pending_bytes else ""
        oldest = f", the oldest for {human_duration(now - u.oldest_pending_at)}" if u.pending and \
            u.oldest_pending_at is not None else ""
        last = f"last upload {human_duration(now - u.last_upload_at)} ago" if u.last_upload_at is not None else \
            "nothing uploaded yet"
        out.append(f"  s3: {u.pending} file(s){size} waiting{oldest}; {last}"
                   + (f"; last error: {u.last_error}" if u.pending and u.last_error else ""))
    if p.servers:
        down = [s for s in p.servers if s.down]
        out.append(f"  servers: {len(down)}/{len(p.servers)} resting"
                   + "".join(f"; {s.url} {s.state}" + (f" ({s.last_error})" if s.last_error else "") for s in down))
    if p.blocked:
        out.append(f"  blocked: {p.blocked}")
    return out


def _node_lines(state: FleetState) -> list[str]:
    lines = []
    costs = state.costs()[0]
    for name, view in state.nodes.items():
        snap = view.snapshot
        if snap is None:
            since = (f" since {time.strftime('%H:%M:%S', time.localtime(view.unreachable_since))}"
                     if view.unreachable_since else "")
            word = "AGENT_FAILED" if view.agent_failed else "UNREACHABLE"  # it answered: its agent's reason
            lines.append(f"{name}: {word}{since} ({view.error})" + _node_money(costs.get(name), priced_only=True))
            continue
        h = snap.host
        elsewhere = state.owned_elsewhere(name)
        if elsewhere:  # the node answers: its own words, not "unreachable"
            lines.append(f"{name}: OWNED_ELSEWHERE: {_elsewhere_text(elsewhere)}")
        differs = copy_text(view.copy)
        if differs:  # another copy of this fleet declared other jobs there: said each look, until they agree
            lines.append(f"{name}: COPY DIFFERS: {differs}")
        if snap.cluster is not None:
            c = snap.cluster
            polled = f"last poll {c.poll_ms:.0f} ms" if c.poll_ms is not None else "not polled yet"
            lines.append(f"{name}: Slurm cluster via {c.login} ({h.hostname}), partition {c.partition or 'default'}, "
                         f"squeue every {c.poll_s:g} s, {polled}, {c.observers} observer(s)"
                         + (f"; {c.config.get('ProctrackType')}" if c.config.get('ProctrackType') else ""))
            for problem in (c.setup_error, c.error):
                if problem:
                    lines.append(f"  PROBLEM: {problem}")
            for g in snap.gpus:
                owners = ", ".join(sorted({p.job or f"pid {p.pid}?" for p in g.processes})) or "-"
                lines.append(f"  GPU {g.host}:{g.index} {g.name}: {g.mem_used_mib / 1024:.1f}/"
                             f"{g.mem_total_mib / 1024:.1f} GiB util {_n(g.util_pct)}%  {owners}")
            continue
        lines.append(f"{name} ({h.hostname}): cpu {h.cpu_pct:.0f}% of {h.cpu_count}, "
                     f"mem {h.mem_used_bytes / 2**30:.1f}/{h.mem_total_bytes / 2**30:.1f} GiB, load {h.load1:.2f}, "
                     f"containment {snap.containment or '-'}" + (", GPUs SIMULATED" if snap.gpus_simulated else "")
                     + _node_money(costs.get(name)))
        if not snap.gpus:
            lines.append(f"  no GPUs: {snap.gpu_error}")
        for g in snap.gpus:
            owners = ", ".join(sorted({p.job or f"pid {p.pid}?" for p in g.processes})) or "-"
            lines.append(f"  GPU{g.index} {g.name}: {g.mem_used_mib / 1024:.1f}/{g.mem_total_mib / 1024:.1f} GiB "
                         f"util {_n(g.util_pct)}% {_n(g.temp_c)}C {_n(g.power_w)}W  {owners}")
    return lines


def _elsewhere_text(elsewhere: dict[str, str]) -> str:
    from ...agents.contract.ownership import owner_text

    by_owner: dict[str, list[str]] = {}
    for job, owner in sorted(elsewhere.items()):
        by_owner.setdefault(owner, []).append(job)
    return "; ".join(f"job(s) {', '.join(jobs)} of this fleet file belong to {owner_text(owner)}" for owner, jobs in
                     by_owner.items()) + (" (shown as that fleet has them; give this file the same [fleet] name if "
                                          "it is a copy, or change them with --take-over)")


def _job_lines(state: FleetState) -> list[str]:
    from ..formatting import human_duration
    from ..state import job_tokens_per_s

    from ..state import collapse_pending, shown_state
    from ...agents.contract.staging import staging_text

    jobs = collapse_pending(state.jobs())
    if not jobs:
        return []
    costs, job_costs = state.costs()
    lines = [f"{'JOB':<20} {'NODE':<12} {'KIND':<14} {'STATE':<11} {'GPUS':<6} {'ATT':>3} "
             f"{'DONE':>16} {'TOK/S':>9} {'ETA':>8}"]
    for node, j in jobs:
        p = j.progress
        done = f"{p.done}/{p.total}" if p and p.total is not None else (str(p.done) if p else "-")
        tps = job_tokens_per_s(j)
        lines.append(f"{j.name:<20} {node:<12} {j.kind:<14} {shown_state(j).text:<11} "
                     f"{','.join(map(str, j.gpus)) or '-':<6} {j.attempt:>3} {done:>16} "
                     f"{(f'{tps:.0f}' if tps is not None else '-'):>9} "
                     f"{human_duration(p.eta_s if p and tps is not None else None):>8}")
        if tps is None and p is not None and p.last_tokens_per_s is not None:
            lines.append(f"  last {p.last_tokens_per_s:.0f} tok/s at {_clock(p.last_rate_at)}")
        if j.waiting:  # its `after`, whole: what it waits for, or why it is blocked (the TUI's FLAGS)
            lines.append(f"  {j.waiting}")
        if j.fleet and not state.fleet.owns(j.fleet):  # owns() any job of no owner
            from ...agents.contract.ownership import owner_text
            lines.append(f"  owned by {owner_text(j.fleet)}, not by this fleet file")
        if j.plan is not None:
            lines.append(f"  plan: {drift_text(j.plan.planned_wall_s, j.plan.projected_wall_s)}"
                         + (f" ({j.plan.error})" if j.plan.error else ""))
        if j.kind == JobKind.GENERATE and j.state in ALIVE:
            c = job_costs.get((node, j.name))
            if costs[node].price_per_hour is None:
                lines.append(f"  cost: {NO_PRICE} (node {node} has no price_per_hour)")
            else:
                lines.append(f"  cost: {dollars(c.per_m_tokens if c else None)} per M output tokens, "
                             f"{dollars(c.per_useful if c else None)} per useful completion")
        if j.staging is not None and (j.state in ALIVE and j.staging.active or j.staging.state == "failed"):
            lines.append(f"  {staging_text(j.staging)}" + (f": {j.staging.item}" if j.staging.item else ""))
        lines.extend(_startup_lines(j, state.clock()))
        if p is not None:
            lines.extend(_health_lines(p, state.clock()))
        if j.task is not None:
            lines.extend(_task_lines(j))
        if j.error:
            lines.append(f"  cannot be read: {j.error}")
        if j.last_kill is not None:
            k = j.last_kill
            lines.append(f"  last kill at {_clock(k.at)}: {'ok' if k.ok else 'INCOMPLETE'}: {k.message}")
        place = state.moved_from(node, j.name)
        if place is not None:
            lines.append(f"  moved from {place.moved_from} at {_clock(place.at)} (attempt id {place.attempt_id})")
    return lines


def _startup_lines(j: JobStatus, now: float) -> list[str]:
    """A live job's start-up, said so that a long one is not taken for a stall: its own words
    (progress.json's phase), an engine's loading (its log lines or /health), or its time to ready."""
    from ..formatting import engine_startup_text, human_duration, ready_text, startup_text
    from ...agents.contract.stall import STARTUP_CAP_S

    if j.state not in ALIVE:
        return []
    starting = startup_text(j.progress, now)
    if starting:
        return [f"  start-up: {starting} (no stall is counted while it says so, up to "
                f"{human_duration(STARTUP_CAP_S)})"]
    engine = j.engine
    loading = engine_startup_text(engine, now)
    if loading and engine is not None:  # a text: an engine that says it loads
        step = f" ({engine.phase_step})" if engine.phase_step else ""
        return [f"  start-up: {loading}{step}, from the engine's own "
                f"{'log lines' if engine.phase_pct is not None else '/health'}"]
    ready = ready_text(j.engine)
    return [f"  {ready}"] if ready else []


def _task_lines(j: JobStatus) -> list[str]:
    """What the scheduler says of a cluster job's task: why it waits, what the wrapper saw."""
    from ..state import shown_state

    t = j.task
    if t is None:  # not a cluster's task: nothing the scheduler said
        return []
    out = []
    where = f"Slurm {t.array_id}_{t.index}" if t.array_id else "Slurm"
    if t.scheduler_state:
        where += f" {t.scheduler_state}" + (f" on {t.host}" if t.host and j.state in ALIVE else "")
    if t.reason:
        where += f", {t.reason}" + (f": {t.reason_text}" if t.reason_text else "")
    if t.restarts:
        where += f", requeued {t.restarts}x"
    if t.source == "attempts":
        where = "left Slurm's queue; from the wrapper's record"
    elif shown_state(j) is ShownState.QUEUED:  # the task waits in Slurm's queue
        where = f"queued by Slurm: {where}"
    out.append(f"  {where}" + (f" ({t.note})" if t.note else ""))
    return out


def _node_money(c: Optional[NodeCost], priced_only: bool = False) -> str:
    if c is None or c.price_per_hour is None:
        return "" if priced_only else f", price {NO_PRICE}"
    return (f", ${c.price_per_hour:g}/h: {dollars(c.spent)} spent, {dollars(c.to_finish)} to finish")


def _clock(t: Optional[float]) -> str:
    return time.strftime("%H:%M", time.localtime(t)) if t else "?"


def _n(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.0f}"
