"""The fleet's figures at the top of the screen (``totals``) and its money: each node's price,
spent and to finish, each generation job's dollars per M tokens (``costs``), each job's
spend over its attempts (``spends``), and which jobs are clients of an engine of the fleet
(``engine_clients``: their tokens are the engine's, counted there). cost.py does the sums.

Part of ``FleetState`` (console/state.py), which mixes ``Costs`` in. No I/O, no UI code."""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Any, Optional

from ..agents.contract.vocab import AlertKind
from ..agents.contract.wire import Alert, JobStatus
from ..remote.client import NodeView
from ..remote.fleet import LOCAL, Fleet
from . import cost
from .formatting import round_eta, round_figures
from .rows import Totals
from .state_jobs import _ALIVE

BUSY_UTIL_PCT = 5.0
_IDLE_PAID = AlertKind.IDLE_PAID
_UNPRICED = cost.NodeCost(None, None, None)  # a node the fleet file gives no price


class Costs:
    """The totals, and what the fleet costs."""

    fleet: Fleet
    nodes: dict[str, NodeView]
    version: int
    _prices: dict[str, Optional[float]]
    _engine_clients: frozenset[str]
    _costs: Optional[tuple[tuple[Any, ...], dict[str, cost.NodeCost], dict[tuple[str, str], cost.JobCost]]]
    _spends: Optional[tuple[tuple[Any, ...], dict[str, cost.JobSpend]]]

    if TYPE_CHECKING:  # the other parts of FleetState
        def clock(self) -> float: ...
        def jobs(self) -> list[tuple[str, JobStatus]]: ...
        def alerts(self) -> list[tuple[str, Alert]]: ...

    def totals(self) -> Totals:
        up = busy = gpus = 0
        for view in self.nodes.values():
            if not view.reachable:
                continue
            up += 1
            for g in view.snapshot.gpus:  # type: ignore[union-attr]
                gpus += 1
                if g.processes or (g.util_pct or 0) >= BUSY_UTIL_PCT:
                    busy += 1
        tps: Optional[float] = None
        slowest: tuple[Optional[float], Optional[str]] = (None, None)
        running = 0
        jobs = self.jobs()
        for node, j in jobs:
            if j.state not in _ALIVE:
                continue
            running += 1
            t = self._counted_tokens_per_s(j)
            if t is not None:
                tps = (tps or 0.0) + t
            eta = j.progress.eta_s if j.progress else None
            if eta is not None and (slowest[0] is None or eta > slowest[0]):
                slowest = (eta, j.name)
        simulated = any(v.snapshot is not None and v.snapshot.gpus_simulated for v in self.nodes.values())
        money = cost.fleet_cost(self.costs()[0].values())
        return Totals(nodes_up=up, nodes_total=len(self.nodes), gpus_busy=busy, gpus_total=gpus,
                      tokens_per_s=round_figures(tps), slowest_eta_s=round_eta(slowest[0]), slowest_job=slowest[1],
                      jobs_running=running, jobs_total=len(jobs), alerts=len(self.alerts()), gpus_simulated=simulated,
                      spent=cost.round_money(money.spent), to_finish=cost.round_money(money.to_finish),
                      priced=money.nodes_priced > 0, idle_per_hour=cost.round_money(self.idle_per_hour()),
                      burned=cost.round_money(self.burned()))

    def idle_per_hour(self) -> Optional[float]:
        """The dollars an hour of the priced GPUs idle past ``[alerts] idle_paid_s``: the nodes'
        ``idle_paid`` alerts, which carry it (the node's watcher knows since when a GPU is idle;
        the console, opened later, would not). None while no GPU is."""
        figures = [a.per_hour for view in self.nodes.values() if view.reachable and view.snapshot is not None
                   for a in view.snapshot.alerts if a.kind == _IDLE_PAID and a.per_hour is not None]
        return sum(figures) if figures else None

    def costs(self) -> tuple[dict[str, cost.NodeCost], dict[tuple[str, str], cost.JobCost]]:
        """Each node's price, spent and to finish; each live generation job's dollars per M
        tokens and per useful completion, by (node, job). Computed once per state and second.
        A priced node that does not answer has no figures (None: unknown, never $0)."""
        now = self.clock()
        key = (self.version, int(now))
        if self._costs is not None and self._costs[0] == key:
            return self._costs[1], self._costs[2]
        nodes: dict[str, cost.NodeCost] = dict.fromkeys(self.nodes, _UNPRICED)
        jobs: dict[tuple[str, str], cost.JobCost] = {}
        by_node: dict[str, list[JobStatus]] = {n: [] for n, price in self._prices.items() if price is not None}
        if by_node:  # no node has a price: nothing to count
            for node, j in self.jobs():
                if node in by_node:
                    by_node[node].append(j)
        for node, js in by_node.items():
            price = self._prices[node]
            view = self.nodes.get(node)
            if view is None:  # not in use (the implicit local node of a fleet of others): not counted
                continue
            if not view.reachable:
                nodes[node] = cost.NodeCost(price, None, None)
                continue
            nodes[node] = cost.NodeCost(price, cost.node_spent(price, js, now), cost.node_to_finish(price, js))
            jobs.update(((node, name), c) for name, c in cost.generation_costs(price, js).items())
        self._costs = (key, nodes, jobs)
        return nodes, jobs

    def spends(self) -> dict[str, cost.JobSpend]:
        """Each job's dollars over its attempts on every node it ran on, by name (a moved job's
        attempts on both nodes, each at its node's price), and what the killed, failed and
        lost ones burned. Computed once per state and second; {} when no node has a price."""
        now = self.clock()
        key = (self.version, int(now))
        if self._spends is not None and self._spends[0] == key:
            return self._spends[1]
        runs: dict[str, list[tuple[str, JobStatus, Optional[float], int]]] = {}
        if any(p is not None for p in self._prices.values()):
            for node, j in self.jobs():
                view = self.nodes.get(node)
                gpus = len(view.snapshot.gpus) if view is not None and view.snapshot is not None else 0
                runs.setdefault(j.name, []).append((node, j, self._prices.get(node), gpus))
        out = {name: cost.job_spend(rs, now) for name, rs in runs.items()}
        self._spends = (key, out)
        return out

    def burned(self) -> Optional[float]:
        """What the fleet's killed, failed and lost attempts cost; None when not known."""
        known = [s.burned for s in self.spends().values() if s.burned is not None]
        return sum(known) if known else None

    def _counted_tokens_per_s(self, j: JobStatus) -> Optional[float]:
        """A job's share of the fleet's tokens/s. A client of an engine of this fleet (a
        generate job against its servers, a router before its workers) is not counted, even
        when it scrapes figures of its own: the engine already counts them."""
        if j.name in self._engine_clients:
            return None
        if j.engine is not None and j.engine.tokens_per_s is not None:
            return j.engine.tokens_per_s
        return j.progress.tokens_per_s if j.progress else None


# the hosts that mean "this node" in a URL a job on it is given
_LOOPBACK = frozenset(("127.0.0.1", "localhost", "0.0.0.0", "::1", "::"))


def _endpoint(url: str, node: str, hosts: dict[str, str]) -> Optional[tuple[str, int]]:
    """The (node, port) a job on ``node`` reaches through ``url``; None when the URL names a
    host that is no node of the fleet (or is not a URL)."""
    try:
        u = urllib.parse.urlsplit(url.strip())
        port = u.port or {"http": 80, "https": 443}.get(u.scheme)
    except ValueError:  # a port out of range or not a number
        return None
    host = (u.hostname or "").lower()
    if port is None or not host:
        return None
    target = node if host in _LOOPBACK else hosts.get(host)
    return (target, port) if target is not None else None


def engine_clients(fleet: Fleet) -> frozenset[str]:
    """The jobs whose ``servers`` / ``workers`` reach an engine of this fleet (a job with figures
    to scrape), however the URL is spelled: localhost or 127.0.0.1 or the node's host, a
    trailing slash or a path, the engine's ``port`` or its ``metrics_url``'s. Their tokens are
    the engine's, counted there."""
    hosts = {n.host.lower(): n.name for n in fleet.nodes if n.host}
    hosts.update((n.name.lower(), n.name) for n in fleet.nodes)
    engines: set[tuple[str, int]] = set()
    for s in fleet.jobs:
        if s.scrape_url is None:
            continue
        node = s.node or LOCAL
        if s.host.lower() not in _LOOPBACK:  # an engine bound to one address: reached through it too
            hosts.setdefault(s.host.lower(), node)
        try:
            metrics_port = urllib.parse.urlsplit(s.scrape_url).port
        except ValueError:
            metrics_port = None
        engines.update((node, port) for port in (s.port, metrics_port) if port)
    out = set()
    for s in fleet.jobs:
        if any(_endpoint(u, s.node or LOCAL, hosts) in engines for u in s.upstreams):
            out.add(s.name)
    return frozenset(out)
