"""Describe: a row of any view (job, node, GPU, process, alert, event) with every field whole.

The tables cut what does not fit (a column has the width it has); this is where it is read in
full: an alert's whole reason and when it began, a job's flags, its command line, where it was
moved and what its node's timeline says of it. Pure functions of a row and the FleetState, as
plain (label, text) lines: the describe screen (screens/describe.py) draws them, wrapped.

A row type this module does not know yet (a newer field, a newer row) is described all the
same: every field of its dataclass, by name.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from dataclasses import dataclass
from typing import Any, Optional

from .cost import dollars
from .formatting import human_duration
from .rows import AlertRow, EventRow, GpuRow, JobRow, NodeRow, ProcRow

HISTORY = 30  # the newest events of a job (or a node, a GPU) the describe lists


@dataclass(frozen=True)
class Described:
    title: str  # "job gen on gpu-a"
    fields: tuple[tuple[str, str], ...]  # (label, whole text), in reading order
    job: Optional[str] = None  # a job's: the describe screen has its chart and log too ...
    node: Optional[str] = None  # ... from its node


def when(t: Optional[float], now: float) -> str:
    """``2025-11-30 12:00:00 (1h 2m ago)``: a time whole, with its date and its age."""
    if t is None:
        return "not said"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    ago = now - t
    return f"{stamp} ({human_duration(ago)} ago)" if ago >= 1 else f"{stamp} (now)" if ago > -1 else \
        f"{stamp} (in {human_duration(-ago)})"


def describe(row: Any, state: Any) -> Described:
    """The describe of ``row`` (a row of any view), with what the state knows beside it."""
    now = state.clock()
    if isinstance(row, JobRow):
        return _job(row, state, now)
    if isinstance(row, AlertRow):
        return _alert(row, state, now)
    if isinstance(row, EventRow):
        return _event(row, now)
    if isinstance(row, GpuRow):
        return _gpu(row, state, now)
    if isinstance(row, ProcRow):
        return _proc(row)
    if isinstance(row, NodeRow):
        return _node(row, state, now)
    return Described(type(row).__name__, tuple(_fields(row, now)))


def _fields(row: Any, now: float, skip: tuple[str, ...] = ("key",)) -> list[tuple[str, str]]:
    """Every field of a row's dataclass, by name: what a newer field says, said whole."""
    out = []
    for f in dataclasses.fields(row):
        if f.name in skip:
            continue
        v = getattr(row, f.name)
        out.append((f.name.replace("_", " "), _text(f.name, v, now)))
    return out


def _text(name: str, v: Any, now: float) -> str:
    if v is None or v == ():
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and (name in ("since", "t", "at") or name.endswith("_at")):
        return when(v, now)
    if hasattr(v, "value"):  # an enum: its word
        return str(v.value)
    if isinstance(v, tuple):
        return ", ".join(_text("", x, now) for x in v)
    return str(v)


def _history(state: Any, now: float, job: Optional[str] = None, node: Optional[str] = None,
             gpu: Optional[int] = None) -> list[tuple[str, str]]:
    """The newest events of a job (or a node, a GPU) in the timeline, oldest first."""
    rows = [r for r in state.timeline.rows()
            if (job is None or r.job == job) and (node is None or r.node == node) and (gpu is None or r.gpu == gpu)]
    out = [(time.strftime("%m-%d %H:%M:%S", time.localtime(r.t)), f"{r.node}  {r.kind}  {r.message}")
           for r in rows[-HISTORY:]]
    if len(rows) > HISTORY:
        out.insert(0, ("", f"(the newest {HISTORY} of {len(rows)}: the events view lists them all)"))
    return out


def _job_figures(row: JobRow, detail: Any) -> list[tuple[str, str]]:
    """A job's tokens/s, items done, rate and ETA, its plan and its price."""
    f = [("tokens/s", "-" if row.tokens_per_s is None else f"{row.tokens_per_s:,}")]
    if row.done is not None:
        total = f" of {row.total:,}" if row.total is not None else ""
        share = f" ({100 * row.fraction:.1f}%)" if row.fraction is not None else ""
        f.append(("done", f"{row.done:,}{total}{share}"))
        f.append(("rate", "-" if row.rate_per_s is None else f"{row.rate_per_s} items/s"))
        f.append(("ETA", human_duration(row.eta_s)))
    if row.planned_s is not None:
        plan = f"planned {human_duration(row.planned_s)}, heading for {human_duration(row.projected_s)}"
        if row.drift_pct is not None:
            plan += f" ({row.drift_pct:+d}%{', past the fleet limit' if row.plan_off else ''})"
        if detail is not None and detail.plan is not None:
            plan += f"  {detail.plan.path}" + (f"  {detail.plan.error}" if detail.plan.error else "")
        f.append(("plan", plan))
    if row.priced or row.cost_per_m_tokens is not None:
        f.append(("$/M tokens", dollars(row.cost_per_m_tokens) + _exact(row.cost_per_m_tokens)))
        f.append(("$/useful", dollars(row.cost_per_useful) + _exact(row.cost_per_useful)))
    return f


def _job_quality_and_engine(row: JobRow, detail: Any) -> list[tuple[str, str]]:
    f: list[tuple[str, str]] = []
    if detail is not None and (detail.quality or detail.progress_error):
        f.append(("quality", " · ".join(f"{k} {v}" for k, v in detail.quality) or "clean"))
        if detail.progress_error:
            f.append(("progress file", detail.progress_error))
    if row.engine_state is not None:
        f.append(("engine", f"{row.engine_state.value}  running {row.running}  queued {row.queued}  "
                            f"KV {'-' if row.kv_usage is None else f'{100 * row.kv_usage:.0f}%'}  "
                            f"{detail.engine_url if detail else ''}".rstrip()))
        if detail is not None and detail.engine_error:
            f.append(("engine error", detail.engine_error))
    return f


def _job(row: JobRow, state: Any, now: float) -> Described:
    name = row.acts_on
    status = next((j for n, j in state.jobs() if n == row.node and j.name == name), None)
    detail = state.job_detail(f"{row.node}/{name}") if status is not None else None
    f: list[tuple[str, str]] = [("job", name), ("node", row.node), ("kind", row.kind.value)]
    state_text = row.state.text + (f" (exit code {row.exit_code})" if row.exit_code is not None else "")
    if row.stale:
        state_text += "  (its node cannot be reached: the last state it said)"
    f += [("state", state_text), ("attempt", str(row.attempt))]
    if row.task_id:
        f.append(("Slurm task", row.task_id))
    if status is not None:
        f.append(("pid", "-" if status.pid is None else f"{status.pid}"
                  + (f" (processes {', '.join(map(str, status.pids))})" if len(status.pids) > 1 else "")))
    f.append(("GPUs", ", ".join(map(str, row.gpus)) or "none"))
    if detail is not None:
        f += [("started", when(detail.started_at, now)), ("ended", when(detail.ended_at, now))]
    if status is not None and status.first_started_at is not None:
        f.append(("first started", when(status.first_started_at, now)))
    f += _job_figures(row, detail)
    f.append(("flags", "\n".join(_whole_flags(row, status)) or "none"))
    f += _job_quality_and_engine(row, detail)
    if row.uploads_pending is not None:
        f.append(("S3 waiting", f"{row.uploads_pending} files"))
    if row.servers_total is not None:
        f.append(("servers", f"{row.servers_down} of {row.servers_total} resting or failing"))
    if status is not None and status.restart is not None:
        limit = f" of {status.max_restarts}" if status.max_restarts is not None else ""
        f.append(("restarts", f"{status.restarts}{limit} ({status.restart.value})"
                  + (f"; {status.restart_note}" if status.restart_note else "")))
    f += _placement(row, state, status, now)
    if detail is not None and detail.last_kill is not None:
        k = detail.last_kill
        f.append(("last kill", f"{'ok' if k.ok else 'INCOMPLETE'}: {k.message} at {when(k.at, now)}"))
    if detail is not None and (detail.argv or detail.command):
        f.append(("command line", shlex.join(detail.argv) if detail.argv else detail.command or ""))
    if detail is not None and detail.log_path:
        f.append(("log", detail.log_path))
    if status is not None and status.spec_changes:
        f.append(("fleet file changed", "\n".join(status.spec_changes)))
    if status is not None and status.fleet:
        f.append(("owner", status.fleet))
    if detail is not None and detail.error:
        f.append(("error", detail.error))
    f += _history(state, now, job=name)
    return Described(f"job {name} on {row.node}", tuple(f), job=name, node=row.node)


def _exact(v: Optional[float]) -> str:
    return "" if v is None else f"  (${v:.6g})"


def _whole_flags(row: JobRow, status: Any) -> list[str]:
    """The row's flags, with the ones the table shortens said whole."""
    out = []
    waiting = getattr(status, "waiting", None)
    for flag in row.flags:
        if waiting and flag.endswith("…") and waiting.startswith(flag[:-1]):
            flag = waiting  # the table cuts a long `after` at 60 characters
        out.append(flag)
    if row.moved:
        out.append(row.moved)
    return out


def _placement(row: JobRow, state: Any, status: Any, now: float) -> list[tuple[str, str]]:
    """Where the job is declared, where it runs, and its moves (this laptop's placements.json;
    a fenced attempt: where its worker read the job went)."""
    out = []
    spec = next((s for s in state.fleet.jobs if s.name == row.acts_on), None)
    if spec is not None:
        path = f" ({state.fleet.path})" if state.fleet.path else ""
        out.append(("fleet file", f"on {spec.node or 'local'}{path}"))
    else:
        out.append(("fleet file", "not declared (adopted, or another fleet file's)"))
    place = state.moves.get(row.acts_on)
    if place is not None:
        out.append(("placement", f"moved from {place.moved_from} to {place.node} at {when(place.at, now)}; the fleet "
                                 f"file names {place.fleet_node}; attempt id {place.attempt_id}"))
    if status is not None and status.fenced:
        out.append(("fenced", status.fenced))
    return out


def _alert(row: AlertRow, state: Any, now: float) -> Described:
    f = [("alert", row.kind.value.replace("_", " ")), ("severity", "severe" if row.kind.severe else "warning"),
         ("node", row.node), ("began", when(row.since, now)),
         ("for", human_duration(now - row.since) if row.since is not None else "not said")]
    if row.job:
        f.append(("job", row.job))
    if row.gpu is not None:
        f.append(("GPU", str(row.gpu)))
    if row.pid is not None:
        f.append(("pid", str(row.pid)))
    f.append(("reason", row.message))
    f += _history(state, now, job=row.job, node=row.node) if row.job else []
    return Described(f"alert {row.kind.value} on {row.node}", tuple(f))


def _event(row: EventRow, now: float) -> Described:
    f = [("time", when(row.t, now)), ("node", row.node), ("kind", row.kind), ("job", row.job or "-"),
         ("GPU", "-" if row.gpu is None else str(row.gpu)), ("condition", row.cond or "-")]
    if row.of:
        f.append(("clears", row.of))
    f += [("seq", str(row.seq)), ("message", row.message)]
    return Described(f"event {row.kind} on {row.node}", tuple(f))


def _gpu(row: GpuRow, state: Any, now: float) -> Described:
    f = [("node", row.node), ("GPU", str(row.index)), ("model", row.name),
         ("memory", f"{row.mem_used_gib:.1f} of {row.mem_total_gib:.1f} GiB"),
         ("utilization", "-" if row.util_pct is None else f"{row.util_pct}%"),
         ("temperature", "-" if row.temp_c is None else f"{row.temp_c} °C"),
         ("power", "-" if row.power_w is None else f"{row.power_w} W"),
         ("jobs", ", ".join(row.jobs) or "none"),
         ("processes of no job", ", ".join(f"pid {p}" for p in row.unowned_pids) or "none")]
    if row.shared:
        f.append(("shared", "two jobs on one GPU"))
    if row.stale:
        f.append(("stale", "its node cannot be reached: the last reading"))
    for p in state.fleet_rows():
        if isinstance(p, ProcRow) and p.node == row.node and p.gpu == row.index:
            f.append((f"pid {p.pid}", f"{p.used_gib:.1f} GiB  {p.job or 'no job'}  {p.command or '?'}"))
    f += _history(state, now, node=row.node, gpu=row.index)
    return Described(f"GPU {row.index} of {row.node}", tuple(f))


def _proc(row: ProcRow) -> Described:
    f = [("node", row.node), ("GPU", str(row.gpu)), ("pid", str(row.pid)), ("GPU memory", f"{row.used_gib:.1f} GiB"),
         ("CPU", "-" if row.cpu_pct is None else f"{row.cpu_pct}%"), ("job", row.job or "none: a process of no job"),
         ("command line", row.command or "not said")]
    return Described(f"pid {row.pid} on {row.node}", tuple(f))


def _node(row: NodeRow, state: Any, now: float) -> Described:
    f = _fields(row, now, skip=("key", "node"))
    spec = next((n for n in state.fleet.nodes if n.name == row.node), None)
    if spec is not None:
        f.insert(0, ("fleet file", ", ".join(f"{k} {v}" for k, v in (("host", spec.host), ("spare", spec.spare),
                                                                     ("price/h", spec.price_per_hour))
                                             if v not in (None, False)) or "local"))
    jobs = [j.name for n, j in state.jobs() if n == row.node]
    f.append(("jobs", ", ".join(jobs) or "none"))
    f += _history(state, now, node=row.node)
    return Described(f"node {row.node}", tuple(f))
