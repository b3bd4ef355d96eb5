"""Filter and sort the rows a view shows: pure functions of rows, a filter text and a sort key."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..agents.contract.vocab import ShownState
from .rows import AlertRow, EventRow, FleetRow, GpuRow, JobRow, NodeRow, NodeState, ProcRow

JOB_SORTS = ("name", "node", "state", "tokens/s", "eta", "progress", "rate", "cost")
FLEET_SORTS = ("name", "memory", "util", "problems")
ALERT_SORTS = ("newest", "node", "kind")
# the keys whose natural order runs from the most down (the fastest, the longest ETA, the
# newest): marked ▼, as a spreadsheet marks a descending column; the others run up (▲)
DESCENDING_SORTS = frozenset({"tokens/s", "rate", "cost", "eta", "memory", "util", "newest"})


def sorted_descending(how: str, reverse: bool) -> bool:
    """Whether a view sorted by ``how`` (``reverse``: the other way round) runs down (▼)."""
    return (how in DESCENDING_SORTS) != reverse

# sorting by state: what needs the operator first, then what runs, then what is over
STATE_ORDER = {ShownState.FAILED: 0, ShownState.LOST: 1, ShownState.BLOCKED: 1, ShownState.STOPPING: 2, ShownState.STARTING: 3,
               ShownState.RUNNING: 4, ShownState.READY: 4, ShownState.KILLED: 5, ShownState.CANCELLED: 5,
               ShownState.FENCED: 5, ShownState.EXITED: 6,
               ShownState.QUEUED: 7, ShownState.NOT_STARTED: 7, ShownState.UNKNOWN: 8}


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
    if how == "rate":
        return lambda r: (-(r.rate_per_s or 0.0), r.name)
    if how == "cost":  # the dearest first; a job with no figure ($/MTOK "—" or "-") last
        return lambda r: (r.cost_per_m_tokens is None, -(r.cost_per_m_tokens or 0.0), r.name)
    return lambda r: (r.name, r.node)


def select_jobs(rows: Sequence[JobRow], text: str = "", sort: str = "name", reverse: bool = False) -> list[JobRow]:
    text = text.strip().lower()
    if text:
        rows = [r for r in rows if text in r.name.lower() or text in r.node.lower() or text in r.kind
                or text in r.state]
    return sorted(rows, key=job_sort_key(sort), reverse=reverse)


def _gpu_matches(g: GpuRow, text: str) -> bool:
    """``text`` (lower case) names a job on the GPU, an unowned "pid N", or the GPU's model."""
    return (any(text in j.lower() for j in g.jobs) or any(text in f"pid {p}" for p in g.unowned_pids)
            or text in g.name.lower())


def _gpus(block: list[FleetRow]) -> list[GpuRow]:
    return [g for g in block if isinstance(g, GpuRow)]


def _proc_matches(p: ProcRow, text: str) -> bool:
    return text in (p.job or "").lower() or text in (p.command or "").lower() or text in f"pid {p.pid}"


def select_fleet(rows: Sequence[FleetRow], text: str = "", sort: str = "name", reverse: bool = False,
                 processes: bool = True) -> list[FleetRow]:
    """Filter and sort node blocks (a node row and its GPU rows move together)."""
    blocks: list[list[FleetRow]] = []
    for r in rows:
        if not processes and isinstance(r, ProcRow):
            continue
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
            hit = {(g.node, g.index) for g in b[1:] if isinstance(g, GpuRow) and _gpu_matches(g, text)}
            hit |= {(p.node, p.gpu) for p in b[1:] if isinstance(p, ProcRow) and _proc_matches(p, text)}
            if hit:  # a GPU that matches, with its processes; a process that matches, with its GPU
                kept.append([b[0], *(r for r in b[1:] if (r.node, getattr(r, "index", getattr(r, "gpu", -1))) in hit)])
        blocks = kept
    if sort == "memory":
        blocks.sort(key=lambda b: (-sum(g.mem_used_gib for g in _gpus(b)), b[0].node))
    elif sort == "util":
        blocks.sort(key=lambda b: (-sum(g.util_pct or 0 for g in _gpus(b)), b[0].node))
    elif sort == "problems":
        blocks.sort(key=lambda b: (isinstance(b[0], NodeRow) and b[0].state == NodeState.UP
                                   and not any(g.shared or g.unowned for g in _gpus(b)), b[0].node))
    else:
        blocks.sort(key=lambda b: b[0].node)
    if reverse:
        blocks.reverse()
    return [r for b in blocks for r in b]


def select_alerts(rows: Sequence[AlertRow], text: str = "", sort: str = "newest",
                  reverse: bool = False) -> list[AlertRow]:
    text = text.strip().lower()
    if text:
        rows = [r for r in rows if text in r.message.lower() or text in r.node.lower() or text in r.kind]
    if sort == "node":
        return sorted(rows, key=lambda r: (r.node, r.kind, r.key), reverse=reverse)
    if sort == "kind":
        return sorted(rows, key=lambda r: (r.kind, r.node, r.key), reverse=reverse)
    # newest first; an alert whose node said no start (an older agent) after every dated one
    return sorted(rows, key=lambda r: (r.since is None, -(r.since or 0.0), r.key), reverse=reverse)


def select_events(rows: Sequence[EventRow], text: str = "") -> list[EventRow]:
    """The timeline stays in time order; a filter keeps the events whose node, kind, job or
    message holds ``text``."""
    text = text.strip().lower()
    if not text:
        return list(rows)
    return [r for r in rows if text in r.message.lower() or text in r.node.lower() or text in r.kind
            or text in (r.job or "").lower()]
