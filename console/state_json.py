"""The documented shape of ``gpudeck status --json`` (docs/commands.md), from the state.

Part of ``FleetState`` (console/state.py), which mixes ``StateJson`` in. No I/O, no UI code."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Optional

from ..agents.contract.wire import Alert, Engine, JobStatus, Progress
from ..remote.client import NodeView
from ..remote.fleet import Fleet
from . import cost
from .placements import Placement
from .rows import NodeState, Totals
from .state_jobs import _ALIVE, job_tokens_per_s, shown_state


class StateJson:
    """``to_json``: the fleet, its nodes, its jobs and its alerts."""

    fleet: Fleet
    nodes: dict[str, NodeView]

    if TYPE_CHECKING:  # the other parts of FleetState
        def clock(self) -> float: ...
        def jobs(self) -> list[tuple[str, JobStatus]]: ...
        def alerts(self) -> list[tuple[str, Alert]]: ...
        def costs(self) -> tuple[dict[str, cost.NodeCost], dict[tuple[str, str], cost.JobCost]]: ...
        def spends(self) -> dict[str, cost.JobSpend]: ...
        def idle_per_hour(self) -> Optional[float]: ...
        def burned(self) -> Optional[float]: ...
        def totals(self) -> Totals: ...
        def node_state(self, view: NodeView) -> NodeState: ...
        def owned_elsewhere(self, node: str) -> dict[str, str]: ...
        def moved_from(self, node: str, job: str) -> Optional[Placement]: ...

    def to_json(self) -> dict[str, Any]:
        """The documented shape of ``gpudeck status --json``."""
        node_costs, job_costs = self.costs()
        spends = self.spends()
        s3_bytes = cost.fleet_s3(j for _, j in self.jobs())
        now = self.clock()
        nodes = [self._node_json(name, view, node_costs.get(name)) for name, view in self.nodes.items()]
        jobs = []
        for node, j in self.jobs():
            p = j.progress
            jobs.append({
                "name": j.name, "node": node, "owner": j.fleet, "owned_elsewhere": not self.fleet.owns(j.fleet),
                "kind": j.kind, "state": shown_state(j), "pids": j.pids or
                ([j.pid] if j.pid and j.state in _ALIVE else []),
                "gpus": j.gpus, "attempt": j.attempt, "exit_code": j.exit_code, "ended_at": j.ended_at,
                "done": p.done if p else None, "total": p.total if p else None,
                "tokens_per_s": job_tokens_per_s(j), "eta_s": p.eta_s if p else None,
                "quality": p.quality if p else {},
                "quality_window": dataclasses.asdict(p.window) if p and p.window else None,
                "last_tokens_per_s": p.last_tokens_per_s if p else None,
                "last_rate_at": p.last_rate_at if p else None,
                "engine": dataclasses.asdict(j.engine) if j.engine else None,
                "last_kill": dataclasses.asdict(j.last_kill) if j.last_kill else None,
                "restart": j.restart, "restarts": j.restarts, "max_restarts": j.max_restarts,
                "next_restart_at": j.next_restart_at, "restart_note": j.restart_note,
                "argv": j.argv, "spec_changes": j.spec_changes, "waiting": j.waiting, "adopted": j.adopted,
                "fenced": j.fenced,
                "error": j.error, "moved_from": _moved_json(self.moved_from(node, j.name)),
                "task": dataclasses.asdict(j.task) if j.task else None,
                "staging": dataclasses.asdict(j.staging) if j.staging else None,
                **cost.job_json(j, job_costs.get((node, j.name))), **cost.spend_json(spends.get(j.name)),
                **cost.s3_json(p, self.fleet.s3_price_per_gb_month),
                **_health_json(p),
                **_startup_json(p, now if j.state in _ALIVE else None, j.engine),
            })
        alerts = [{"node": n, **dataclasses.asdict(a)} for n, a in self.alerts()]
        money = cost.fleet_cost(node_costs.values())
        fleet = {"spent": cost.money_json(money.spent), "to_finish": cost.money_json(money.to_finish),
                 "nodes_priced": money.nodes_priced, "idle_per_hour": cost.money_json(self.idle_per_hour()),
                 "burned": cost.money_json(self.burned()),
                 "s3_bytes": s3_bytes, "s3_price_per_gb_month": self.fleet.s3_price_per_gb_month,
                 "s3_cost_per_month": cost.money_json(cost.s3_monthly(s3_bytes, self.fleet.s3_price_per_gb_month)),
                 "tokens_per_s": self.totals().tokens_per_s}
        return {"fleet": fleet, "nodes": nodes, "jobs": jobs, "alerts": alerts}

    def _node_json(self, name: str, view: NodeView, node_cost: Any) -> dict[str, Any]:
        """A node of ``gpudeck status --json``."""
        snap = view.snapshot
        return {
            "name": name,
            "state": self.node_state(view),
            "reachable": view.reachable,
            "owned_elsewhere": self.owned_elsewhere(name),
            "copy_differs": dataclasses.asdict(view.copy) if view.copy is not None else None,
            "error": str(view.error) if view.error is not None else None,
            "unreachable_since": view.unreachable_since,
            "gpus": [dataclasses.asdict(g) for g in snap.gpus] if snap else [],
            "gpu_error": snap.gpu_error if snap else None,
            "gpus_simulated": snap.gpus_simulated if snap else False,
            "containment": snap.containment if snap else None,
            "host": dataclasses.asdict(snap.host) if snap else None,
            "cluster": dataclasses.asdict(snap.cluster) if snap and snap.cluster else None,
            **cost.node_json(node_cost),
        }


def _moved_json(place: Optional[Placement]) -> Optional[dict[str, Any]]:
    """A moved job's ``moved_from`` in ``status --json``: the node it left, when, and the attempt id."""
    if place is None:
        return None
    return {"node": place.moved_from, "at": place.at, "attempt_id": place.attempt_id}


def _health_json(p: Optional[Progress]) -> dict[str, Any]:
    """A job's uploads, servers and ``blocked`` in ``status --json`` (docs/commands.md)."""
    if p is None:
        return {"uploads": None, "servers": [], "servers_resting": None, "servers_total": None, "blocked": None}
    return {"uploads": dataclasses.asdict(p.uploads) if p.uploads is not None else None,
            "servers": [dataclasses.asdict(s) for s in p.servers],
            "servers_resting": p.servers_down if p.servers else None,
            "servers_total": len(p.servers) if p.servers else None, "blocked": p.blocked}


def _startup_json(p: Optional[Progress], now: Optional[float], e: Optional[Engine] = None) -> dict[str, Any]:
    """A job's start-up in ``status --json``: its phase (while it is alive), the seconds in
    it, and its last start's seconds to the first durable output; an engine's phase, how far
    (``phase_pct``, where it prints one) and its time to ready, where its job says none."""
    if (p is None or p.phase is None) and e is not None and (e.phase is not None or e.ready_s is not None):
        alive = now is not None and e.phase is not None
        return {"phase": e.phase if alive else None, "phase_pct": e.phase_pct if alive else None,
                "phase_s": _seconds_in(now, e.phase_since) if alive else None, "startup_s": e.ready_s}
    if p is None or now is None:
        return {"phase": None, "phase_pct": None, "phase_s": None, "startup_s": p.startup_s if p is not None else None}
    return {"phase": p.phase, "phase_pct": None, "phase_s": _seconds_in(now, p.phase_since), "startup_s": p.startup_s}


def _seconds_in(now: Optional[float], since: Optional[float]) -> Optional[float]:
    """The seconds from ``since`` to ``now``, to a tenth; None where either is unknown."""
    return round(max(0.0, now - since), 1) if now is not None and since is not None else None
