"""FleetState: pure data built from snapshots. No I/O, no UI code.

Widgets and headless commands both read it. ``apply`` takes one node's snapshot;
``mark_unreachable`` records why a node cannot be read.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from agents.jobs import JobSpec
from agents.protocol import Alert, JobStatus, Snapshot
from remote.fleet import LOCAL, Fleet


@dataclass
class NodeView:
    name: str
    snapshot: Optional[Snapshot] = None
    error: Optional[str] = None
    unreachable_since: Optional[float] = None

    @property
    def reachable(self) -> bool:
        return self.snapshot is not None and self.error is None


@dataclass
class FleetState:
    fleet: Fleet
    nodes: dict[str, NodeView] = field(default_factory=dict)

    def apply(self, snap: Snapshot) -> None:
        view = self.nodes.setdefault(snap.node, NodeView(snap.node))
        view.snapshot, view.error, view.unreachable_since = snap, None, None

    def mark_unreachable(self, node: str, error: str, since: Optional[float] = None) -> None:
        view = self.nodes.setdefault(node, NodeView(node))
        view.error = error
        view.unreachable_since = view.unreachable_since or since or time.time()

    # ------------------------------------------------------------ derived views

    def jobs(self) -> list[tuple[str, JobStatus]]:
        """Every job of the fleet with its node; declared jobs on unreachable nodes included."""
        out: list[tuple[str, JobStatus]] = []
        seen: set[str] = set()
        for name, view in self.nodes.items():
            if view.snapshot is None:
                continue
            for j in view.snapshot.jobs:
                out.append((name, j))
                seen.add(j.name)
        for spec in self.fleet.jobs:
            if spec.name not in seen:
                out.append((spec.node or LOCAL, _unknown(spec)))
        return out

    def alerts(self) -> list[tuple[str, Alert]]:
        out = []
        for name, view in self.nodes.items():
            if view.error is not None:
                out.append((name, Alert("unreachable", f"node {name} unreachable: {view.error}")))
            if view.snapshot is not None:
                out.extend((name, a) for a in view.snapshot.alerts)
        return out

    def to_json(self) -> dict[str, Any]:
        """The documented shape of ``gpudeck status --json``."""
        nodes = []
        for name, view in self.nodes.items():
            snap = view.snapshot
            nodes.append({
                "name": name,
                "reachable": view.reachable,
                "error": view.error,
                "unreachable_since": view.unreachable_since,
                "gpus": [dataclasses.asdict(g) for g in snap.gpus] if snap else [],
                "gpu_error": snap.gpu_error if snap else None,
                "host": dataclasses.asdict(snap.host) if snap else None,
            })
        jobs = []
        for node, j in self.jobs():
            p = j.progress
            jobs.append({
                "name": j.name, "node": node, "kind": j.kind, "state": j.state, "pids": j.pids or
                ([j.pid] if j.pid and j.state in ("running", "starting", "stopping") else []),
                "gpus": j.gpus, "attempt": j.attempt, "exit_code": j.exit_code,
                "done": p.done if p else None, "total": p.total if p else None,
                "tokens_per_s": job_tokens_per_s(j), "eta_s": p.eta_s if p else None,
                "quality": p.quality if p else {},
                "engine": dataclasses.asdict(j.engine) if j.engine else None,
            })
        alerts = [{"node": n, **dataclasses.asdict(a)} for n, a in self.alerts()]
        return {"nodes": nodes, "jobs": jobs, "alerts": alerts}


def job_tokens_per_s(j: JobStatus) -> Optional[float]:
    if j.progress is not None and j.progress.tokens_per_s is not None:
        return j.progress.tokens_per_s
    if j.engine is not None:
        return j.engine.tokens_per_s
    return None


def _unknown(spec: JobSpec) -> JobStatus:
    return JobStatus(name=spec.name, kind=spec.kind, state="unknown", gpus=list(spec.gpus))


def human_duration(seconds: Optional[float]) -> str:
    """5d 3h, 2h 05m, 4m 10s, 12s; '-' when unknown."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m:02d}m"
    if m:
        return f"{m}m {s:02d}s"
    return f"{s}s"
