"""What the fleet costs, from the fleet file's ``price_per_hour`` and the nodes' snapshots.

Pure functions, no I/O; FleetState calls them, and the header, the jobs view and
`status --json` show what they return. A node without a price has no figures: None, shown
as "—", never $0. The rules (docs/console.md, "Dollars"):

- **Spent**, per node: its price times the hours from the earliest first start of its live
  jobs to now; when none is live, from the earliest first start of its jobs to their last
  end (the time its jobs ran). A job's first start is where its run began: restarts and
  relaunches go on from it.
- **To finish**, per node: its price times the slowest ETA among its live jobs; $0 when none
  is live; unknown when live jobs have no ETA yet.
- A node that does not answer has neither figure (unknown: None, "—"); the fleet's figures
  are the sums over the priced nodes that know theirs.
- **Per generation job**: dollars per million output tokens are the node's price over the
  output tokens per hour of the node's live generation jobs together (each job's share of the
  price is in proportion to its tokens, so the figure is the same for each of them); dollars
  per useful completion are the job's share over its useful completions per hour: its
  completions per hour times the share of its records that are useful (neither cut at
  max_tokens, nor empty, nor failed: generate's ``useful`` of ``useful_of``).
- **Per attempt**: its hours (start to end, or to now while it runs) x its node's price (per
  node-hour) x the GPUs it held / the node's GPUs. A job's spend sums its attempts on every
  node it ran on (a move: the old node's at its price, the new one's at its own); **burned** is
  what its attempts killed, failed or lost cost (the node keeps a job's attempts in its
  state.json: ``JobStatus.attempts``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ..agents.contract.jobs import JobKind
from ..agents.contract.vocab import JobState
from ..agents.contract.wire import AttemptSpan, JobStatus, Progress

HOUR_S = 3600.0
NO_PRICE = "—"  # a node the fleet file gives no price, or a figure not known (a node down): never $0
_ALIVE = frozenset(s for s in JobState if s.alive)


@dataclass(frozen=True, slots=True)
class NodeCost:
    price_per_hour: Optional[float]
    spent: Optional[float]
    to_finish: Optional[float]


@dataclass(frozen=True, slots=True)
class JobCost:
    per_m_tokens: Optional[float]  # dollars per million output tokens
    per_useful: Optional[float]  # dollars per useful completion


@dataclass(frozen=True, slots=True)
class FleetCost:
    spent: Optional[float]  # summed over the priced nodes; None when no node has a price
    to_finish: Optional[float]  # summed over the priced nodes that know theirs
    nodes_priced: int


def first_start(j: JobStatus) -> Optional[float]:
    return j.first_started_at or j.started_at


def node_spent(price: Optional[float], jobs: Iterable[JobStatus], now: float) -> Optional[float]:
    if price is None:
        return None
    starts = [(j, s) for j in jobs if (s := first_start(j)) is not None]
    live = [s for j, s in starts if j.state in _ALIVE]
    if live:
        start, end = min(live), now
    elif starts:
        start = min(s for _, s in starts)
        end = max(j.ended_at or start for j, _ in starts)
    else:
        return 0.0  # priced, and nothing has run: a real zero
    return price * max(0.0, end - start) / HOUR_S


def node_to_finish(price: Optional[float], jobs: Iterable[JobStatus]) -> Optional[float]:
    if price is None:
        return None
    live = [j for j in jobs if j.state in _ALIVE]
    if not live:
        return 0.0
    etas = [j.progress.eta_s for j in live if j.progress is not None and j.progress.eta_s is not None]
    return price * max(etas) / HOUR_S if etas else None


def cost_per_m_tokens(price_per_hour: Optional[float], tokens_per_s: Optional[float]) -> Optional[float]:
    """Dollars per million output tokens at ``tokens_per_s`` for ``price_per_hour``."""
    if price_per_hour is None or tokens_per_s is None or not tokens_per_s > 0:
        return None
    return price_per_hour / (tokens_per_s * HOUR_S / 1e6)


def cost_per_useful(share_per_hour: Optional[float], rate_per_s: Optional[float],
                    useful: Optional[float]) -> Optional[float]:
    """Dollars per useful completion: ``share_per_hour`` over ``rate_per_s`` completions a
    second of which the share ``useful`` (0..1) are useful."""
    if share_per_hour is None or rate_per_s is None or not rate_per_s > 0 or useful is None or not useful > 0:
        return None
    return share_per_hour / (rate_per_s * HOUR_S * useful)


def useful_share(p: Optional[Progress]) -> Optional[float]:
    """The share of a job's records that are useful; None when the job does not count them."""
    if p is None or p.useful is None or not p.useful_of:
        return None
    return min(1.0, p.useful / p.useful_of)


def generation_costs(price: Optional[float], jobs: Iterable[JobStatus]) -> dict[str, JobCost]:
    """Each live generation job of one node that makes tokens: its dollars per M tokens and
    per useful completion."""
    if price is None:
        return {}
    gens = [(j, j.progress.tokens_per_s) for j in jobs
            if j.kind == JobKind.GENERATE and j.state in _ALIVE and j.progress is not None
            and j.progress.tokens_per_s is not None and j.progress.tokens_per_s > 0]
    node_tps = sum(t for _, t in gens)
    out = {}
    for j, tps in gens:
        p = j.progress
        share = price * tps / node_tps  # type: ignore[operator]
        out[j.name] = JobCost(cost_per_m_tokens(price, node_tps),
                              cost_per_useful(share, p.rate_per_s if p else None, useful_share(p)))
    return out


def fleet_cost(nodes: Iterable[NodeCost]) -> FleetCost:
    """The sums over the priced nodes that know their figures; None where none does (every
    priced node unreachable, say): unknown, never $0."""
    priced = [n for n in nodes if n.price_per_hour is not None]
    if not priced:
        return FleetCost(None, None, 0)
    spent = [n.spent for n in priced if n.spent is not None]
    left = [n.to_finish for n in priced if n.to_finish is not None]
    return FleetCost(sum(spent) if spent else None, sum(left) if left else None, len(priced))


def round_money(v: Optional[float]) -> Optional[float]:
    """Three significant figures: what a cell shows, so equal rows draw alike."""
    return None if v is None else float(f"{v:.3g}")


def dollars(v: Optional[float]) -> str:
    """$12,345 / $123 / $3.10 / $0.0042; NO_PRICE ("—") when unknown, as for a node without a price."""
    if v is None:
        return NO_PRICE
    if v >= 1000:
        return f"${v:,.0f}"
    if v >= 100:
        return f"${v:.0f}"
    if v >= 0.1 or v == 0:
        return f"${v:.2f}"
    digits = min(6, 1 - math.floor(math.log10(v)))  # two significant figures
    return f"${v:.{digits}f}"


def _two(x: float) -> str:
    """Two significant digits, three above 100: 41, 4.1, 0.41, 410."""
    return f"{x:.0f}" if x >= 100 else f"{x:.2g}"


def money_fit(v: Optional[float], width: int) -> str:
    """``dollars(v)`` in ``width`` cells, its meaningful digits kept: a figure too long for its
    column is said per thousand or per million of its unit (``$0.000041`` per completion reads
    ``$41/M``: per million completions), or in thousands or millions (``$12k``); never cut."""
    s = dollars(v)
    if v is None or len(s) <= width:
        return s
    if v < 1:
        steps = [(v * 1e3, "/k"), (v * 1e6, "/M")]
        picked = [f"${_two(x)}{unit}" for x, unit in steps if x >= 1] or [f"${_two(v * 1e6)}/M"]
    else:
        picked = [f"${_two(v / scale)}{unit}" for scale, unit in ((1e6, "M"), (1e3, "k")) if v >= scale]
    return next((p for p in picked if len(p) <= width), s)  # nothing fits: the table cuts it (under 5 cells)


# ---------------------------------------------------------------- spend per attempt, and burned

# an attempt that ended so is "burned": killed, failed or lost (what it cost bought no finished run)
BURNED = frozenset({JobState.KILLED, JobState.FAILED, JobState.LOST})


@dataclass(frozen=True, slots=True)
class AttemptCost:
    node: str
    attempt: int
    started_at: Optional[float]
    ended_at: Optional[float]
    state: Optional[str]
    gpus: int
    node_gpus: int
    dollars: Optional[float]  # None: not known (no price, no start, an end never recorded)


@dataclass(frozen=True, slots=True)
class JobSpend:
    """A job's dollars over its attempts on every node it ran on, each at its node's price."""

    spent: Optional[float]  # None: no attempt's dollars known
    burned: Optional[float]  # of it, the attempts killed, failed or lost; None: as spent
    attempts: tuple[AttemptCost, ...]


def attempt_dollars(span: AttemptSpan, price: Optional[float], node_gpus: int, now: float) -> Optional[float]:
    """An attempt's dollars: its hours x its node's price (per node-hour) x the GPUs it held /
    the node's GPUs. A live one counts to ``now``; one whose end was never recorded, nothing."""
    if price is None or node_gpus <= 0 or span.started_at is None:
        return None
    if span.ended_at is None:
        if span.state is None or not span.state.alive:
            return None
        end = now
    else:
        end = span.ended_at
    return max(0.0, end - span.started_at) / HOUR_S * price * min(span.gpus, node_gpus) / node_gpus


def job_spend(runs: Iterable[tuple[str, JobStatus, Optional[float], int]], now: float) -> JobSpend:
    """``runs``: the job as each node has it (node, its status there, the node's price, its
    GPUs): across a move, the attempts of both nodes, each at its own node's price."""
    costs = []
    for node, j, price, node_gpus in runs:
        for s in j.attempts:
            costs.append(AttemptCost(node=node, attempt=s.attempt, started_at=s.started_at, ended_at=s.ended_at,
                                     state=s.state.value if s.state is not None else None, gpus=s.gpus,
                                     node_gpus=node_gpus, dollars=attempt_dollars(s, price, node_gpus, now)))
    costs.sort(key=lambda c: (c.started_at or 0.0, c.node, c.attempt))
    known = [c for c in costs if c.dollars is not None]
    burned = [c.dollars for c in known if c.state in _BURNED_VALUES]
    spent = sum(c.dollars for c in known) if known else None  # type: ignore[misc]
    return JobSpend(spent=spent, burned=sum(burned) if known else None, attempts=tuple(costs))  # type: ignore[arg-type]


_BURNED_VALUES = frozenset(s.value for s in BURNED)


def spend_json(s: Optional[JobSpend]) -> dict[str, Any]:
    """A job's spend in `status --json`: ``spent`` and ``burned`` in dollars, and its attempts."""
    if s is None:
        return {"spent": None, "burned": None, "attempts": []}
    return {"spent": money_json(s.spent), "burned": money_json(s.burned),
            "attempts": [{"node": a.node, "attempt": a.attempt, "started_at": a.started_at, "ended_at": a.ended_at,
                          "state": a.state, "gpus": a.gpus, "node_gpus": a.node_gpus,
                          "dollars": money_json(a.dollars)} for a in s.attempts]}


# ---------------------------------------------------------------- what S3 holds, and costs a month

GB = 1e9


def s3_monthly(stored_bytes: Optional[int], price_per_gb_month: float) -> Optional[float]:
    """The dollars a month of ``stored_bytes`` in S3 at ``price_per_gb_month`` (None: not known)."""
    return None if stored_bytes is None else stored_bytes / GB * price_per_gb_month


def s3_json(p: Optional[Progress], price_per_gb_month: float) -> dict[str, Any]:
    """A job's S3 inventory in `status --json`: what its prefix holds (its run's one listing at
    the start, plus what it uploaded since: its progress.json's ``uploads``) and the monthly cost."""
    u = p.uploads if p is not None else None
    stored = u.stored_bytes if u is not None else None
    return {"s3_objects": u.stored_objects if u is not None else None, "s3_bytes": stored,
            "s3_listed_at": u.stored_listed_at if u is not None else None,
            "s3_cost_per_month": money_json(s3_monthly(stored, price_per_gb_month))}


def fleet_s3(jobs: Iterable[JobStatus]) -> Optional[int]:
    """The bytes the jobs' prefixes hold, each job once (a moved job: its newest listing's)."""
    newest: dict[str, tuple[float, int]] = {}
    for j in jobs:
        u = j.progress.uploads if j.progress is not None else None
        if u is None or u.stored_bytes is None:
            continue
        at = u.stored_listed_at or 0.0
        if j.name not in newest or at > newest[j.name][0]:
            newest[j.name] = (at, u.stored_bytes)
    return sum(b for _, b in newest.values()) if newest else None


# ---------------------------------------------------------------- `status --json`

def money_json(v: Optional[float]) -> Optional[float]:
    return None if v is None else float(f"{v:.6g}")


def node_json(c: Optional[NodeCost]) -> dict[str, Any]:
    return {"price_per_hour": c.price_per_hour if c else None, "spent": money_json(c.spent) if c else None,
            "to_finish": money_json(c.to_finish) if c else None}


def job_json(j: JobStatus, c: Optional[JobCost]) -> dict[str, Any]:
    p, plan = j.progress, j.plan
    return {"rate_per_s": p.rate_per_s if p else None, "first_started_at": j.first_started_at,
            "useful": p.useful if p else None, "useful_of": p.useful_of if p else None,
            "cost_per_m_tokens": money_json(c.per_m_tokens) if c else None,
            "cost_per_useful_completion": money_json(c.per_useful) if c else None,
            "plan": plan.path if plan else None, "plan_error": plan.error if plan else None,
            "planned_wall_s": plan.planned_wall_s if plan else None,
            "projected_wall_s": plan.projected_wall_s if plan else None,
            "drift_pct": plan.drift_pct if plan else None}
