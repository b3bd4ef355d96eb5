"""FleetState: pure data built from snapshots. No I/O, no UI code.

Widgets and headless commands both read it. ``apply`` takes one node's snapshot,
``apply_history`` backfills the sparkline series after a reconnect, ``mark_unreachable``
records why a node cannot be read. The ``*_rows`` methods and ``totals`` turn the state
into frozen rows that widgets only render: two equal rows draw the same line, so a table
redraws a row only when its row changed.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from gpudeck.agents.jobs import JobSpec
from gpudeck.agents.protocol import Alert, Gpu, History, JobStatus, Snapshot
from gpudeck.remote.fleet import LOCAL, Fleet

SPARK_BUCKET_S = 15.0  # one sparkline cell: 15 s of tokens/s
SPARK_KEEP = 240  # buckets kept per job: one hour
DISK_FILL_WINDOW_S = 600.0  # free-space trend measured over ten minutes
DISK_FILL_HORIZON_S = 24 * 3600.0  # alert when a disk fills within a day
DISK_FILL_MIN_SPAN_S = 120.0  # ... measured over two minutes at least
BUSY_UTIL_PCT = 5.0
ALIVE = ("running", "starting", "stopping")
ENGINE_CLIENT_KINDS = ("generate", "router")


@dataclass
class NodeView:
    name: str
    snapshot: Optional[Snapshot] = None
    error: Optional[str] = None
    unreachable_since: Optional[float] = None
    retry_in_s: Optional[float] = None  # the reconnect loop's next try, when it said
    told_at: Optional[float] = None  # when the error was recorded

    @property
    def reachable(self) -> bool:
        return self.snapshot is not None and self.error is None


# ---------------------------------------------------------------- rows widgets render


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


@dataclass(frozen=True, slots=True)
class NodeRow:
    key: str
    node: str
    state: str  # up | connecting | unreachable
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


@dataclass(frozen=True, slots=True)
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
    holders: tuple[str, ...]  # job names, and "pid N" for memory no job owns
    jobs: tuple[str, ...]  # the job names alone (what k and enter act on)
    shared: bool = False  # two jobs on this GPU
    unowned: bool = False  # a process no job owns
    stale: bool = False  # the node is unreachable: last known reading


FleetRow = Union[NodeRow, GpuRow]


@dataclass(frozen=True, slots=True)
class JobRow:
    key: str  # "node/name"
    name: str
    node: str
    kind: str
    state: str  # job state; an engine job that answers shows "ready"
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
    engine_state: Optional[str] = None
    running: Optional[int] = None
    queued: Optional[int] = None
    kv_usage: Optional[float] = None
    accept_length: Optional[float] = None
    stale: bool = False  # its node is unreachable
    pid: Optional[int] = None

    @property
    def fraction(self) -> Optional[float]:
        if self.done is None or not self.total:
            return None
        return min(1.0, self.done / self.total)

    @property
    def alive(self) -> bool:
        return self.state in ALIVE or self.state == "ready"


@dataclass(frozen=True, slots=True)
class AlertRow:
    key: str
    node: str
    kind: str
    message: str
    job: Optional[str]
    gpu: Optional[int]
    since: float  # when the console first saw it


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


# ---------------------------------------------------------------- series


class Series:
    """tokens/s of one job in fixed time buckets (mean per bucket), oldest dropped first."""

    __slots__ = ("bucket_s", "keep", "_buckets")

    def __init__(self, bucket_s: float = SPARK_BUCKET_S, keep: int = SPARK_KEEP) -> None:
        self.bucket_s, self.keep = bucket_s, keep
        self._buckets: dict[int, list[float]] = {}  # bucket -> [sum, count]

    def add(self, t: float, value: Optional[float]) -> None:
        if value is None:
            return
        b = int(t // self.bucket_s)
        cell = self._buckets.get(b)
        if cell is None:
            self._buckets[b] = [value, 1.0]
            if len(self._buckets) > self.keep:
                del self._buckets[min(self._buckets)]
        else:
            cell[0] += value
            cell[1] += 1

    def last(self, n: int, now: float) -> tuple[Optional[float], ...]:
        """The ``n`` buckets that end with ``now``'s; a bucket without data is None."""
        end = int(now // self.bucket_s)
        out = []
        for b in range(end - n + 1, end + 1):
            cell = self._buckets.get(b)
            out.append(None if cell is None else _round(cell[0] / cell[1]))
        return tuple(out)

    def __len__(self) -> int:
        return len(self._buckets)


class DiskTrend:
    """Bytes used on one file system over the last minutes: how fast it fills."""

    __slots__ = ("_points",)

    def __init__(self) -> None:
        self._points: deque[tuple[float, int]] = deque()

    def add(self, t: float, used: int) -> None:
        if self._points and used < self._points[-1][1] - (1 << 30):
            self._points.clear()  # a GiB or more was deleted: the old trend says nothing now
        self._points.append((t, used))
        while len(self._points) > 2 and t - self._points[1][0] >= DISK_FILL_WINDOW_S:
            self._points.popleft()

    def rate(self) -> Optional[float]:
        """Bytes per second, once the trend spans long enough to mean something."""
        if len(self._points) < 2:
            return None
        (t0, v0), (t1, v1) = self._points[0], self._points[-1]
        if t1 - t0 < DISK_FILL_MIN_SPAN_S:
            return None
        return (v1 - v0) / (t1 - t0)


# ---------------------------------------------------------------- the state


@dataclass
class FleetState:
    fleet: Fleet
    nodes: dict[str, NodeView] = field(default_factory=dict)
    clock: Callable[[], float] = time.time
    spark_width: int = 12
    spark_bucket_s: float = SPARK_BUCKET_S

    def __post_init__(self) -> None:
        self._specs: dict[str, JobSpec] = {j.name: j for j in self.fleet.jobs}
        self._series: dict[tuple[str, str], Series] = {}
        self._last_t: dict[str, float] = {}  # newest sample time per node, live or backfilled
        self._disk_trend: dict[tuple[str, str], DiskTrend] = {}
        self._first_seen: dict[tuple, float] = {}
        self._fleet_rows: dict[str, tuple[tuple, list[FleetRow]]] = {}
        self._engine_ports = {s.port for s in self.fleet.jobs if s.port and (s.scrape_url or s.kind == "sglang-server")}
        self.version = 0  # bumped on every change: views skip work when it has not moved

    # ------------------------------------------------------------ input

    def expect(self, nodes: Iterable[str]) -> None:
        """Nodes the console will connect to: shown as connecting until they answer."""
        for name in nodes:
            self.nodes.setdefault(name, NodeView(name))
        self.version += 1

    def apply(self, snap: Snapshot) -> None:
        view = self.nodes.setdefault(snap.node, NodeView(snap.node))
        view.snapshot, view.error, view.unreachable_since = snap, None, None
        view.retry_in_s = view.told_at = None
        if snap.t > self._last_t.get(snap.node, 0.0):
            self._last_t[snap.node] = snap.t
            for j in snap.jobs:
                if j.state in ("running", "starting"):
                    self._series_of(snap.node, j.name).add(snap.t, job_tokens_per_s(j))
        for d in snap.host.disks:
            trend = self._disk_trend.get((snap.node, d.path))
            if trend is None:
                trend = self._disk_trend[(snap.node, d.path)] = DiskTrend()
            trend.add(snap.t, d.total_bytes - d.free_bytes)
        self.version += 1

    def apply_history(self, history: History) -> None:
        """Fill the sparklines with what the agent saw while the console was away."""
        last = self._last_t.get(history.node, 0.0)
        newest = last
        for s in history.samples:
            if s.t <= last:
                continue  # seen live already
            for job, tps in s.job_tokens_per_s.items():
                self._series_of(history.node, job).add(s.t, tps)
            newest = max(newest, s.t)
        self._last_t[history.node] = newest
        self.version += 1

    def mark_unreachable(self, node: str, error: str, since: Optional[float] = None,
                         retry_in_s: Optional[float] = None) -> None:
        view = self.nodes.setdefault(node, NodeView(node))
        view.error = error
        view.unreachable_since = view.unreachable_since or since or self.clock()
        view.retry_in_s = retry_in_s
        view.told_at = self.clock()
        self.version += 1

    def _series_of(self, node: str, job: str) -> Series:
        s = self._series.get((node, job))
        if s is None:
            s = self._series[(node, job)] = Series(self.spark_bucket_s)
        return s

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
        now = self.clock()
        for name, view in self.nodes.items():
            if view.error is not None:
                reason = view.error.removeprefix(f"node {name}: ")
                out.append((name, Alert("unreachable", f"node {name} unreachable: {reason}")))
            if view.snapshot is not None:
                out.extend((name, a) for a in view.snapshot.alerts)
                if view.error is None:
                    out.extend((name, a) for a in self._disk_fill_alerts(name, view.snapshot, now))
        return out

    def _disk_fill_alerts(self, node: str, snap: Snapshot, now: float) -> list[Alert]:
        out = []
        for d in snap.host.disks:
            trend = self._disk_trend.get((node, d.path))
            rate = trend.rate() if trend is not None else None
            if rate and rate > 0 and d.free_bytes > 0 and d.free_bytes / rate < DISK_FILL_HORIZON_S:
                out.append(Alert("disk_filling", f"{d.path}: {d.free_bytes / 2**30:.1f} GiB free, filling at "
                                                 f"{rate / 2**20:.1f} MiB/s: full in {human_duration(d.free_bytes / rate)}"))
        return out

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
            if j.state not in ALIVE:
                continue
            running += 1
            t = self._counted_tokens_per_s(j)
            if t is not None:
                tps = (tps or 0.0) + t
            eta = j.progress.eta_s if j.progress else None
            if eta is not None and (slowest[0] is None or eta > slowest[0]):
                slowest = (eta, j.name)
        return Totals(nodes_up=up, nodes_total=len(self.nodes), gpus_busy=busy, gpus_total=gpus,
                      tokens_per_s=_round(tps), slowest_eta_s=_round_eta(slowest[0]), slowest_job=slowest[1],
                      jobs_running=running, jobs_total=len(jobs), alerts=len(self.alerts()))

    def _counted_tokens_per_s(self, j: JobStatus) -> Optional[float]:
        """A job's share of the fleet's tokens/s. A client of an engine of this fleet (a
        generate job against its servers) is not counted: the engine already counts them."""
        if j.engine is not None and j.engine.tokens_per_s is not None:
            return j.engine.tokens_per_s
        spec = self._specs.get(j.name)
        if spec is not None and (spec.kind in ENGINE_CLIENT_KINDS or spec.options.get("servers")):
            ports = {_port(u) for u in spec.options.get("servers", []) + spec.options.get("workers", [])}
            if ports & self._engine_ports:
                return None
        return j.progress.tokens_per_s if j.progress else None

    # ------------------------------------------------------------ rows

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
            key = (snap.seq if snap else None, snap.t if snap else None, view.error, down_for, retry)
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
        state = "up" if view.reachable else ("unreachable" if view.error else "connecting")
        if snap is None:
            return [NodeRow(key=f"node:{name}", node=name, state=state, error=view.error,
                            since=view.unreachable_since, down_for_s=down_for, retry_in_s=retry)]
        h = snap.host
        rows: list[FleetRow] = [NodeRow(
            key=f"node:{name}", node=name, state=state, hostname=h.hostname, cpu_pct=int(round(h.cpu_pct)),
            cpu_count=h.cpu_count, mem_used_gib=round(h.mem_used_bytes / 2**30, 1),
            mem_total_gib=round(h.mem_total_bytes / 2**30, 1), load1=round(h.load1, 1), gpu_count=len(snap.gpus),
            gpu_error=snap.gpu_error, error=view.error, since=view.unreachable_since, down_for_s=down_for,
            retry_in_s=retry)]
        stale = not view.reachable
        for g in snap.gpus:
            rows.append(_gpu_row(name, g, stale))
        return rows

    def job_rows(self) -> list[JobRow]:
        now = self.clock()
        return [self._job_row(node, j, now) for node, j in self.jobs()]

    def _job_row(self, node: str, j: JobStatus, now: float, spark_width: Optional[int] = None) -> JobRow:
        p, e = j.progress, j.engine
        view = self.nodes.get(node)
        stale = view is None or not view.reachable
        series = self._series.get((node, j.name))
        width = spark_width or self.spark_width
        spark = series.last(width, now) if series is not None else (None,) * width
        state = j.state
        if e is not None and state == "running" and e.state == "ready":
            state = "ready"
        flags = quality_flags(p.quality if p else {})
        if p is not None and p.error:
            flags += ("progress?",)
        if e is not None and e.state == "failed":
            flags += ("engine!",)
        if view is not None and view.snapshot is not None:
            if any(a.kind == "stalled" and a.job == j.name for a in view.snapshot.alerts):
                flags += ("stalled",)
        return JobRow(
            key=f"{node}/{j.name}", name=j.name, node=node, kind=j.kind, state=state, gpus=tuple(j.gpus),
            attempt=j.attempt, tokens_per_s=_round(job_tokens_per_s(j)) if j.state in ALIVE else None,
            spark=spark, done=p.done if p else None, total=p.total if p else None,
            rate_per_s=_round(p.rate_per_s) if p and j.state in ALIVE else None,
            eta_s=_round_eta(p.eta_s) if p and j.state in ALIVE else None, flags=flags, exit_code=j.exit_code,
            engine_state=e.state if e else None,
            running=int(e.running) if e and e.running is not None else None,
            queued=int(e.queued) if e and e.queued is not None else None,
            kv_usage=round(e.kv_usage, 3) if e and e.kv_usage is not None else None,
            accept_length=round(e.accept_length, 2) if e and e.accept_length is not None else None,
            stale=stale, pid=j.pid if j.state in ALIVE else None)

    def job_detail(self, key: str, spark_width: int = 60) -> Optional[JobDetail]:
        node, _, name = key.partition("/")
        for n, j in self.jobs():
            if n == node and j.name == name:
                now = self.clock()
                row = self._job_row(n, j, now)
                series = self._series.get((n, j.name))
                spec = self._specs.get(j.name)
                try:
                    command = spec.describe() if spec else None
                except (ImportError, AttributeError, ValueError) as exc:  # a worker not installed here
                    command = f"({type(exc).__name__}: {exc})"
                p, e = j.progress, j.engine
                return JobDetail(
                    row=row, pids=tuple(j.pids), started_at=j.started_at, ended_at=j.ended_at,
                    log_path=j.log_path, quality=tuple(sorted((p.quality if p else {}).items())),
                    progress_error=p.error if p else None, engine_url=e.url if e else None,
                    engine_error=e.error if e else None, command=command,
                    spark=series.last(spark_width, now) if series else (None,) * spark_width,
                    bucket_s=self.spark_bucket_s)
        return None

    def alert_rows(self) -> list[AlertRow]:
        now = self.clock()
        out = []
        live: set[tuple] = set()
        for node, a in self.alerts():
            ident = (node, a.kind, a.job, a.gpu, a.pid, a.message if a.kind in ("disk_full",) else None)
            live.add(ident)
            since = self._first_seen.setdefault(ident, now)
            key = "|".join(str(x) for x in ident[:5])
            out.append(AlertRow(key=key, node=node, kind=a.kind, message=a.message, job=a.job, gpu=a.gpu,
                                since=since))
        for ident in [i for i in self._first_seen if i not in live]:
            del self._first_seen[ident]
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


# ---------------------------------------------------------------- filter and sort (pure)

JOB_SORTS = ("name", "node", "state", "tokens/s", "eta", "progress")
FLEET_SORTS = ("name", "memory", "util", "problems")
ALERT_SORTS = ("newest", "node", "kind")


def job_sort_key(how: str) -> Callable[[JobRow], Any]:
    if how == "node":
        return lambda r: (r.node, r.name)
    if how == "state":
        return lambda r: (_STATE_ORDER.get(r.state, 9), r.name)
    if how == "tokens/s":
        return lambda r: (-(r.tokens_per_s or 0.0), r.name)
    if how == "eta":
        return lambda r: (r.eta_s is None, -(r.eta_s or 0.0), r.name)
    if how == "progress":
        return lambda r: (r.fraction is None, r.fraction or 0.0, r.name)
    return lambda r: (r.name, r.node)


_STATE_ORDER = {"failed": 0, "lost": 1, "stopping": 2, "starting": 3, "running": 4, "ready": 4, "killed": 5,
                "exited": 6, "pending": 7, "unknown": 8}


def select_jobs(rows: Sequence[JobRow], text: str = "", sort: str = "name") -> list[JobRow]:
    text = text.strip().lower()
    if text:
        rows = [r for r in rows if text in r.name.lower() or text in r.node.lower() or text in r.kind
                or text in r.state]
    return sorted(rows, key=job_sort_key(sort))


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
            gpus = [g for g in b[1:] if isinstance(g, GpuRow) and
                    (any(text in h.lower() for h in g.holders) or text in g.name.lower())]
            if gpus:
                kept.append([b[0], *gpus])
        blocks = kept

    def gpus(b: list[FleetRow]) -> list[GpuRow]:
        return [g for g in b if isinstance(g, GpuRow)]

    if sort == "memory":
        blocks.sort(key=lambda b: (-sum(g.mem_used_gib for g in gpus(b)), b[0].node))
    elif sort == "util":
        blocks.sort(key=lambda b: (-sum(g.util_pct or 0 for g in gpus(b)), b[0].node))
    elif sort == "problems":
        blocks.sort(key=lambda b: (b[0].state == "up" and not any(g.shared or g.unowned for g in gpus(b)),
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


# ---------------------------------------------------------------- helpers

QUALITY_NAMES = {"empty_answer": "empty", "no_reasoning": "no-reason", "cut_at_max_tokens": "cut",
                 "errors": "err", "error": "err"}


def quality_flags(quality: dict[str, int]) -> tuple[str, ...]:
    return tuple(f"{QUALITY_NAMES.get(k, k)} {v}" for k, v in sorted(quality.items()) if v)


def _gpu_row(node: str, g: Gpu, stale: bool) -> GpuRow:
    procs = g.processes
    if len(procs) == 1:  # the usual case, kept quick: 2,048 of these a second at fleet scale
        p = procs[0]
        jobs: tuple[str, ...] = (p.job,) if p.job else ()
        holders = jobs or (f"pid {p.pid}",)
        unowned = p.job is None
    else:
        jobs = tuple(sorted({p.job for p in procs if p.job}))
        holders = jobs + tuple(f"pid {p.pid}" for p in procs if p.job is None)
        unowned = any(p.job is None for p in procs)
    return GpuRow(f"gpu:{node}:{g.index}", node, g.index, g.name, round(g.mem_used_mib / 1024, 1),
                  round(g.mem_total_mib / 1024, 1), _int(g.util_pct), _int(g.temp_c), _int(g.power_w),
                  holders, jobs, len(jobs) > 1, unowned, stale)


def _int(v: Optional[float]) -> Optional[int]:
    return None if v is None else int(round(v))


def _round(v: Optional[float]) -> Optional[float]:
    """Three significant figures at most: what a cell can show, so equal rows draw alike."""
    if v is None:
        return None
    a = abs(v)
    if a >= 100:
        return float(round(v))
    if a >= 10:
        return round(v, 1)
    return round(v, 2)


def _round_eta(v: Optional[float]) -> Optional[float]:
    if v is None:
        return None
    return float(round(v)) if v < 3600 else float(round(v / 60) * 60)


def _port(url: str) -> Optional[int]:
    try:
        return int(url.rsplit(":", 1)[1].split("/", 1)[0])
    except (IndexError, ValueError):
        return None


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
