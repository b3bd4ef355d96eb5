"""The nodes as the console shows them: each node's state (``node_state``), its row and its
GPUs' and processes' rows in the fleet table (``fleet_rows``), the alerts (the nodes' own,
and each node this console cannot reach), and which of this file's jobs another fleet owns.

Part of ``FleetState`` (console/state.py), which mixes ``NodeViews`` in. No I/O, no UI code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ..agents.contract.vocab import AlertKind
from ..agents.contract.wire import Alert
from ..remote.client import NodeView
from ..remote.fleet import Fleet
from .formatting import copy_text
from .rows import AlertRow, FleetRow, GpuRow, NodeRow, NodeState, ProcRow
from .series import Recent


class NodeViews:
    """The fleet table's rows, the nodes' states and the alerts."""

    fleet: Fleet
    nodes: dict[str, NodeView]
    _gpu_util: dict[str, Recent]
    _fleet_rows: dict[str, tuple[tuple[Any, ...], list[FleetRow]]]

    if TYPE_CHECKING:  # the other parts of FleetState
        def clock(self) -> float: ...

    def _declared_on(self, node: str) -> set[str]:
        return {s.name for s in self.fleet.jobs_on(node)}

    def owned_elsewhere(self, node: str) -> dict[str, str]:
        """This fleet file's jobs on ``node`` that the node says another fleet owns: job -> owner."""
        view = self.nodes.get(node)
        if view is None or view.snapshot is None:
            return {}
        declared = self._declared_on(node)
        return {j.name: j.fleet for j in view.snapshot.jobs
                if j.fleet and j.name in declared and not self.fleet.owns(j.fleet)}

    def node_state(self, view: NodeView) -> NodeState:
        if not view.reachable:
            if view.error is None:
                return NodeState.CONNECTING
            # it answered, and its agent would not serve: its own state, never "unreachable"
            return NodeState.AGENT_FAILED if view.agent_failed else NodeState.UNREACHABLE
        return NodeState.OWNED_ELSEWHERE if self.owned_elsewhere(view.name) else NodeState.UP

    def alerts(self) -> list[tuple[str, Alert]]:
        """The nodes' alerts as they sent them (each with since when it is up on its node, the
        same in every console), and each node this console cannot reach, since it could not."""
        out = []
        for name, view in self.nodes.items():
            if view.error is not None and view.agent_failed:
                out.append((name, Alert(AlertKind.AGENT_FAILED, f"node {name}: its agent failed: {view.error.reason}",
                                        since=view.unreachable_since)))
            elif view.error is not None:
                out.append((name, Alert(AlertKind.UNREACHABLE, f"node {name} unreachable: {view.error.reason}",
                                        since=view.unreachable_since)))
            if view.snapshot is not None:
                out.extend((name, a) for a in view.snapshot.alerts)
        return out

    def alert_rows(self) -> list[AlertRow]:
        out = []
        for node, a in self.alerts():
            key = "|".join(str(x) for x in (node, *a.ident()))
            out.append(AlertRow(key=key, node=node, kind=AlertKind(a.kind), message=a.message, job=a.job, gpu=a.gpu,
                                pid=a.pid, since=a.since))
        return out

    def fleet_rows(self) -> list[FleetRow]:
        """A node row, then one row per GPU, for every node."""
        now = self.clock()
        out: list[FleetRow] = []
        for name, view in self.nodes.items():
            snap = view.snapshot
            down_for = int(now - view.unreachable_since) if view.unreachable_since else None
            retry = None
            if view.retry_in_s is not None and view.told_at is not None:
                retry = max(0, int(round(view.told_at + view.retry_in_s - now)))
            key = (snap.seq if snap else None, snap.t if snap else None, str(view.error), down_for, retry, view.copy)
            cached = self._fleet_rows.get(name)
            if cached is not None and cached[0] == key:
                out.extend(cached[1])
                continue
            rows = self._node_rows(view, down_for, retry)
            self._fleet_rows[name] = (key, rows)
            out.extend(rows)
        return out

    def _node_rows(self, view: NodeView, down_for: Optional[int], retry: Optional[int]) -> list[FleetRow]:
        snap = view.snapshot
        name = view.name
        state = self.node_state(view)
        if snap is None:
            return [NodeRow(key=f"node:{name}", node=name, state=state, error=_reason(view),
                            since=view.unreachable_since, down_for_s=down_for, retry_in_s=retry)]
        h = snap.host
        rows: list[FleetRow] = [NodeRow(
            key=f"node:{name}", node=name, state=state, hostname=h.hostname, cpu_pct=int(round(h.cpu_pct)),
            cpu_count=h.cpu_count, mem_used_gib=round(h.mem_used_bytes / 2**30, 1),
            mem_total_gib=round(h.mem_total_bytes / 2**30, 1), load1=round(h.load1, 1), gpu_count=len(snap.gpus),
            gpu_error=snap.gpu_error, error=_reason(view), since=view.unreachable_since, down_for_s=down_for,
            retry_in_s=retry, owned_elsewhere=tuple(sorted(self.owned_elsewhere(name).items())),
            copy_differs=copy_text(view.copy))]
        stale = not view.reachable
        recent = self._gpu_util.get(name)
        for g in snap.gpus:
            rows.append(GpuRow.of(name, g, stale, recent.values(g.index) if recent is not None else ()))
            for p in g.processes:
                rows.append(ProcRow(f"proc:{name}:{g.host + ':' if g.host else ''}{g.index}:{p.pid}", name, g.index, p.pid,
                                    round(p.used_mib / 1024, 1), p.job,
                                    None if p.cpu_pct is None else int(round(p.cpu_pct)), p.command, stale))
        return rows


def _reason(view: NodeView) -> Optional[str]:
    """Why a node cannot be read, as its row shows it (the row names the node)."""
    return view.error.reason if view.error is not None else None
