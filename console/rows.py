"""The rows widgets render, one per table line, and the header's totals.

FleetState builds them; widgets only draw them. Two equal rows draw the same line, so a
table redraws a row only when its row changed: every figure in a row is rounded to what a
cell shows (see ``formatting``).

Rows are values: nothing changes a row once built. The rows built every second (node, GPU,
process and job rows, thousands at fleet scale) are not ``frozen`` dataclasses only because
a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: 1.25 us
for 14 fields against 0.2 us (``bench/console_scale.py`` builds 2,300 of them a second).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from ..agents.contract.vocab import AlertKind, EngineState, ShownState
from ..agents.contract.vocab import NodeState as NodeState  # re-exported: the tables read it here
from ..agents.contract.jobs import JobKind
from ..agents.contract.wire import Gpu, JobPlan, KillVerdict, QualityWindow, ServerHealth, Uploads
from .chart import Chart
from .formatting import round_int

SPARK_BUCKET_S = 15.0  # one sparkline cell: 15 s of tokens/s


@dataclass(frozen=True, slots=True)
class Totals:
    """The header's line: the fleet in one glance."""

    nodes_up: int
    nodes_total: int
    gpus_busy: int
    gpus_total: int
    tokens_per_s: Optional[float]
    slowest_eta_s: Optional[float]
    slowest_job: Optional[str]
    jobs_running: int
    jobs_total: int
    alerts: int
    gpus_simulated: bool = False  # a node's GPUs are the demo's stand-in, not NVML
    spent: Optional[float] = None  # dollars since the jobs started, over the priced nodes (console/cost.py)
    to_finish: Optional[float] = None  # dollars to finish at the current rate, over the priced nodes
    priced: bool = False  # some node has a price_per_hour: the header shows the dollars
    idle_per_hour: Optional[float] = None  # dollars an hour of priced GPUs idle past [alerts] idle_paid_s; None: none
    burned: Optional[float] = None  # dollars of the attempts killed, failed or lost (console/cost.py); None: not known


@dataclass(slots=True)
class NodeRow:
    key: str
    node: str
    state: NodeState
    hostname: Optional[str] = None
    cpu_pct: Optional[int] = None
    cpu_count: Optional[int] = None
    mem_used_gib: Optional[float] = None
    mem_total_gib: Optional[float] = None
    load1: Optional[float] = None
    gpu_count: int = 0
    gpu_error: Optional[str] = None
    error: Optional[str] = None
    since: Optional[float] = None  # unreachable since (unix time)
    down_for_s: Optional[int] = None
    retry_in_s: Optional[int] = None
    owned_elsewhere: tuple[tuple[str, str], ...] = ()  # (job, owner): this file's jobs another fleet owns
    copy_differs: Optional[str] = None  # how this file's jobs differ from another copy's there (formatting.copy_text)


@dataclass(slots=True)
class GpuRow:
    key: str
    node: str
    index: int
    name: str
    mem_used_gib: float
    mem_total_gib: float
    util_pct: Optional[int]
    temp_c: Optional[int]
    power_w: Optional[int]
    jobs: tuple[str, ...]  # the jobs holding it (what k and enter act on)
    unowned_pids: tuple[int, ...] = ()  # processes holding memory that belong to no job
    shared: bool = False  # two jobs on this GPU
    stale: bool = False  # the node is unreachable: last known reading
    util_spark: tuple[Optional[float], ...] = ()  # utilization history, oldest first

    @property
    def unowned(self) -> bool:
        """A process no job owns holds memory on it."""
        return bool(self.unowned_pids)

    @classmethod
    def of(cls, node: str, g: Gpu, stale: bool, util_spark: tuple[Optional[float], ...] = ()) -> "GpuRow":
        procs = g.processes
        if len(procs) == 1:  # the usual case, kept quick: 2,048 of these a second at fleet scale
            p = procs[0]
            jobs: tuple[str, ...] = (p.job,) if p.job else ()
            unowned: tuple[int, ...] = () if p.job else (p.pid,)
        else:
            jobs = tuple(sorted({p.job for p in procs if p.job}))
            unowned = tuple(p.pid for p in procs if p.job is None)
        if g.host is not None:  # a cluster's GPU: its index is its compute node's
            return cls(f"gpu:{node}:{g.host}:{g.index}", node, g.index, f"{g.host}: {g.name}",
                       round(g.mem_used_mib / 1024, 1), round(g.mem_total_mib / 1024, 1), round_int(g.util_pct),
                       round_int(g.temp_c), round_int(g.power_w), jobs, unowned, len(jobs) > 1, stale, ())
        return cls(f"gpu:{node}:{g.index}", node, g.index, g.name, round(g.mem_used_mib / 1024, 1),
                   round(g.mem_total_mib / 1024, 1), round_int(g.util_pct), round_int(g.temp_c),
                   round_int(g.power_w), jobs, unowned, len(jobs) > 1, stale, util_spark)


@dataclass(slots=True)
class ProcRow:
    """One process on a GPU, under its GPU's line in the fleet view."""

    key: str
    node: str
    gpu: int
    pid: int
    used_gib: float
    job: Optional[str]
    cpu_pct: Optional[int]
    command: Optional[str]
    stale: bool = False


FleetRow = Union[NodeRow, GpuRow, ProcRow]


@dataclass(slots=True)
class JobRow:
    key: str  # "node/name"
    name: str
    node: str
    kind: JobKind
    state: ShownState  # the job's state; an engine job that answers shows READY
    gpus: tuple[int, ...]
    attempt: int
    tokens_per_s: Optional[float]
    spark: tuple[Optional[float], ...]
    done: Optional[int]
    total: Optional[int]
    rate_per_s: Optional[float]
    eta_s: Optional[float]
    flags: tuple[str, ...]
    exit_code: Optional[int] = None
    engine_state: Optional[EngineState] = None
    running: Optional[int] = None
    queued: Optional[int] = None
    kv_usage: Optional[float] = None
    accept_length: Optional[float] = None
    stale: bool = False  # its node is unreachable
    pid: Optional[int] = None
    planned_s: Optional[float] = None  # its plan.json's wall time ...
    projected_s: Optional[float] = None  # ... against the one it heads for now ...
    drift_pct: Optional[int] = None  # ... and how far apart (+: slower than planned) ...
    plan_off: bool = False  # ... slower than the fleet's [alerts] plan_drift_pct allows (never for faster)
    priced: bool = False  # its node has a price_per_hour (else its costs show "—")
    cost_per_m_tokens: Optional[float] = None  # a live generation job: dollars per M output tokens ...
    cost_per_useful: Optional[float] = None  # ... and per useful completion
    uploads_pending: Optional[int] = None  # files waiting to go to S3 (None: the job uploads nothing) ...
    uploads_bytes: Optional[int] = None  # ... their bytes ...
    last_upload_s: Optional[float] = None  # ... and how long ago the last one went up
    servers_down: Optional[int] = None  # servers resting or failing (None: the job reports no servers) ...
    servers_total: Optional[int] = None  # ... of all it sends to
    moved: Optional[str] = None  # "moved from gpu1 02:10" (console/placements.py), or on the old node "moved to gpu2"
    ready: Optional[str] = None  # an engine's time to ready, once it answered: "ready in 1m 52s"
    # a start-up with a figure, for the DONE cell and the bar: an engine loading ("loading 13%", from its
    # own log lines, agents/sense/loading.py) or a stage copying ("staging 42%", agents/staging/); its fraction
    startup: Optional[str] = None
    startup_frac: Optional[float] = None
    task_id: Optional[str] = None  # a cluster task: the scheduler's id of it (Slurm's A_T, what scancel takes)
    target: Optional[str] = None  # what the keys act on when it is not ``name``: a folded run of pending tasks
    # (``extract/[2-5]``, no job of that name) opens and acts on its first task, ``extract/2``

    @property
    def acts_on(self) -> str:
        """The job or task a key on this row acts on (never a folded row's range, which no node knows)."""
        return self.target or self.name

    @property
    def fraction(self) -> Optional[float]:
        if self.done is None or not self.total:
            return None
        return min(1.0, self.done / self.total)

    @property
    def alive(self) -> bool:
        return self.state.alive


@dataclass(frozen=True, slots=True)
class AlertRow:
    key: str
    node: str
    kind: AlertKind
    message: str
    job: Optional[str]
    gpu: Optional[int]
    since: Optional[float]  # when it began on its node (unreachable: since this console cannot reach it); None: not said
    pid: Optional[int] = None  # the process an alert is about (a GPU process of no job)


@dataclass(frozen=True, slots=True)
class EventRow:
    """One line of a node's timeline (``<home>/events.jsonl``), as the events view shows it.
    ``kind`` is an EventKind's value, kept as text: a newer agent may say one this console
    does not know. ``message`` has its URLs redacted (``timeline.event_row``)."""

    key: str  # "node:seq": one event, whoever asked for it and how often
    t: float
    seq: int
    node: str
    kind: str
    message: str
    job: Optional[str] = None
    gpu: Optional[int] = None
    cond: Optional[str] = None  # the condition it raises or resolves ("stalled:gen", "gpu_health:xid:0")
    of: Optional[str] = None  # a ``resolved`` event: the kind of what cleared


@dataclass(frozen=True, slots=True)
class JobDetail:
    """Everything the details screen shows about one job."""

    row: JobRow
    pids: tuple[int, ...]
    started_at: Optional[float]
    ended_at: Optional[float]
    log_path: Optional[str]
    quality: tuple[tuple[str, int], ...]
    progress_error: Optional[str]
    engine_url: Optional[str]
    engine_error: Optional[str]
    command: Optional[str]
    spark: tuple[Optional[float], ...]  # a longer series than the table's
    bucket_s: float = SPARK_BUCKET_S  # seconds per spark value
    last_kill: Optional[KillVerdict] = None  # the last kill's verdict, kept on the node
    argv: tuple[str, ...] = ()  # the command line the node really ran
    last_tokens_per_s: Optional[float] = None  # a job that is not running: its last live rate ...
    last_rate_at: Optional[float] = None  # ... and when
    error: Optional[str] = None  # the node could not read this job
    done_series: tuple[Optional[float], ...] = ()  # items done per bucket, as ``spark``
    running_series: tuple[Optional[float], ...] = ()  # an engine's running requests ...
    queued_series: tuple[Optional[float], ...] = ()  # ... its queue ...
    kv_series: tuple[Optional[float], ...] = ()  # ... and its KV-cache use (0..1)
    plan: Optional[JobPlan] = None  # its plan.json against how it goes, or why plan.json cannot be read
    useful: Optional[float] = None  # the share of its records that are useful (generate), 0..1
    chart: Optional[Chart] = None  # its chart over the range picked (chart.py), with its axes
    servers: tuple[ServerHealth, ...] = ()  # the servers it sends to, as it reports them (generate)
    uploads: Optional[Uploads] = None  # its uploads to S3, as it reports them
    at: Optional[float] = None  # when this was put together (the console's clock): ages are counted from it
    window: Optional[QualityWindow] = None  # generate: its last completions' quality problems
    spend: Optional[Any] = None  # cost.JobSpend: its attempts' dollars on every node, and what was burned
    s3_price_per_gb_month: Optional[float] = None  # the fleet file's: what its S3 inventory costs a month
