"""Filter and sort the rows a view shows: pure functions of rows, a filter text and a sort key."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from gpudeck.agents.jobs import ShownState
from gpudeck.console.rows import AlertRow, FleetRow, GpuRow, JobRow, NodeRow, NodeState

JOB_SORTS = ("name", "node", "state", "tokens/s", "eta", "progress")
FLEET_SORTS = ("name", "memory", "util", "problems")
ALERT_SORTS = ("newest", "node", "kind")

# sorting by state: what needs the operator first, then what runs, then what is over
STATE_ORDER = {ShownState.FAILED: 0, ShownState.LOST: 1, ShownState.STOPPING: 2, ShownState.STARTING: 3,
               ShownState.RUNNING: 4, ShownState.READY: 4, ShownState.KILLED: 5, ShownState.EXITED: 6,
               ShownState.PENDING: 7, ShownState.UNKNOWN: 8}


def job_sort_key(how: str) -> Callable[[JobRow], Any]:
    if how == "node":
        return lambda r: (r.node, r.name)
    if how == "state":
        return lambda r: (STATE_ORDER.get(r.state, 9), r.name)
    if how == "tokens/s":
        return lambda r: (-(r.tokens_per_s or 0.0), r.name)
    if how == "eta":
        return lambda r: (r.eta_s is None, -(r.eta_s or 0.0), r.name)
    if how == "progress":
        return lambda r: (r.fraction is None, r.fraction or 0.0, r.name)
    return lambda r: (r.name, r.node)


def select_jobs(rows: Sequence[JobRow], text: str = "", sort: str = "name") -> list[JobRow]:
    text = text.strip().lower()
    if text:
        rows = [r for r in rows if text in r.name.lower() or text in r.node.lower() or text in r.kind
                or text in r.state]
    return sorted(rows, key=job_sort_key(sort))


def _gpu_matches(g: GpuRow, text: str) -> bool:
    """``text`` (lower case) names a job on the GPU, an unowned "pid N", or the GPU's model."""
    return (any(text in j.lower() for j in g.jobs) or any(text in f"pid {p}" for p in g.unowned_pids)
            or text in g.name.lower())


def _gpus(block: list[FleetRow]) -> list[GpuRow]:
    return [g for g in block if isinstance(g, GpuRow)]


def select_fleet(rows: Sequence[FleetRow], text: str = "", sort: str = "name") -> list[FleetRow]:
    """Filter and sort node blocks (a node row and its GPU rows move together)."""
    blocks: list[list[FleetRow]] = []
    for r in rows:
        if isinstance(r, NodeRow) or not blocks:
            blocks.append([r])
        else:
            blocks[-1].append(r)
    text = text.strip().lower()
    if text:
        kept = []
        for b in blocks:
            node_hit = text in b[0].node.lower() or text in (getattr(b[0], "hostname", None) or "").lower()
            if node_hit:
                kept.append(b)
                continue
            gpus = [g for g in b[1:] if isinstance(g, GpuRow) and _gpu_matches(g, text)]
            if gpus:
                kept.append([b[0], *gpus])
        blocks = kept
    if sort == "memory":
        blocks.sort(key=lambda b: (-sum(g.mem_used_gib for g in _gpus(b)), b[0].node))
    elif sort == "util":
        blocks.sort(key=lambda b: (-sum(g.util_pct or 0 for g in _gpus(b)), b[0].node))
    elif sort == "problems":
        blocks.sort(key=lambda b: (b[0].state == NodeState.UP and not any(g.shared or g.unowned for g in _gpus(b)),
                                   b[0].node))
    else:
        blocks.sort(key=lambda b: b[0].node)
    return [r for b in blocks for r in b]


def select_alerts(rows: Sequence[AlertRow], text: str = "", sort: str = "newest") -> list[AlertRow]:
    text = text.strip().lower()
    if text:
        rows = [r for r in rows if text in r.message.lower() or text in r.node.lower() or text in r.kind]
    if sort == "node":
        return sorted(rows, key=lambda r: (r.node, r.kind, r.key))
    if sort == "kind":
        return sorted(rows, key=lambda r: (r.kind, r.node, r.key))
    return sorted(rows, key=lambda r: (-r.since, r.key))
