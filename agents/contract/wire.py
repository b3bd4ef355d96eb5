"""The wire between the console and a node agent: typed messages as JSON lines.

Both sides import this module and nothing else to talk to each other. Every line is one
JSON object with a ``type`` field. The agent speaks first with a :class:`Hello`; the
console checks ``protocol`` and ``version`` before it sends anything.

Console -> agent: :class:`Request`.  Agent -> console: :class:`Hello`, :class:`History`,
:class:`Snapshot`, :class:`Reply`. A request carries one op (:mod:`.ops`: each op a class,
its arguments typed) and a reply's ``result`` is that op's ``Result`` in plain form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from . import VERSION as __version__
from .plain import ProtocolError, from_dict, quick_init, to_plain  # the wire's own API too
from .vocab import AlertKind, EngineState, EventKind, JobState, RestartPolicy
from .jobs import JobKind
from .staging import Staging

PROTOCOL = 1

# The agent's stderr, a line per log record (agents/node/start.py). What stops an agent before its
# hello (a home others may write to, a lock it cannot take) is logged at ERROR, so the console
# can lead with that line rather than with a guess (remote/link.py stated_cause).
STDERR_FORMAT = "agent %(levelname)s %(message)s"
STDERR_ERROR = "agent ERROR "


def stated_cause(stderr: list[str]) -> Optional[str]:
    """The agent's own last word on why it stopped (its last ERROR line), or None."""
    for line in reversed(stderr):
        if line.startswith(STDERR_ERROR) and line[len(STDERR_ERROR):].strip():
            return line[len(STDERR_ERROR):].strip()
    return None


# ---------------------------------------------------------------- snapshot parts


@quick_init  # built every tick (agents/contract/plain.py)
@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mib: float
    job: Optional[str] = None  # owning job, None when no job owns the pid
    cpu_pct: Optional[float] = None  # the process's CPU use since the last reading (100 = one core)
    command: Optional[str] = None  # its command line, cut to COMMAND_CHARS
    started_at: Optional[float] = None  # its start (unix time): an adopt sends it back, so a reused pid is refused


@quick_init  # built every tick (agents/contract/plain.py)
@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    mem_used_mib: float
    mem_total_mib: float
    util_pct: Optional[float] = None
    temp_c: Optional[float] = None
    power_w: Optional[float] = None
    processes: list[GpuProcess] = field(default_factory=list)
    host: Optional[str] = None  # on a cluster: the compute node the GPU is on (its index is that node's)


@quick_init  # built every tick (agents/contract/plain.py)
@dataclass(frozen=True)
class Disk:
    path: str
    free_bytes: int
    total_bytes: int


@quick_init  # built every tick (agents/contract/plain.py)
@dataclass(frozen=True)
class Host:
    hostname: str
    cpu_pct: float
    cpu_count: int
    mem_used_bytes: int
    mem_total_bytes: int
    load1: float
    load5: float
    load15: float
    disks: list[Disk] = field(default_factory=list)


@quick_init  # built every tick (agents/contract/plain.py)
@dataclass(frozen=True)
class Engine:
    """What an inference server's /metrics says, reduced to what an operator acts on."""

    url: str
    state: EngineState
    flavor: Optional[str] = None  # sglang | vllm | llamacpp | router
    tokens_per_s: Optional[float] = None
    generation_tokens: Optional[float] = None
    running: Optional[float] = None
    queued: Optional[float] = None
    kv_usage: Optional[float] = None  # the fullest memory pool (hybrid models: mamba or SWA too)
    accept_length: Optional[float] = None  # None when speculative decoding is off
    error: Optional[str] = None
    kv_pool: Optional[str] = None  # "mamba" or "swa" when that pool, not full attention, is the fullest
    # its start-up while it does not answer yet, as its own log lines and /health say it
    # (agents/sense/loading.py): the phase (starting, loading, capturing) and since when (unix time,
    # the node's clock); how far, where the engine prints it (its percentage, and "2/15" of its
    # bar's steps), and when that figure last moved
    phase: Optional[str] = None
    phase_since: Optional[float] = None
    phase_pct: Optional[float] = None
    phase_step: Optional[str] = None
    phase_moved_at: Optional[float] = None
    ready_s: Optional[float] = None  # once it answered: its attempt's start to its first ready answer (seconds)


@dataclass(frozen=True)
class ServerHealth:
    """One server a job sends its requests to, as the job reports it (generate's progress.json
    ``servers``): ok, failing (failed lately, not resting yet), resting, or probing (one
    request after a rest)."""

    url: str
    state: str  # ok | failing | resting | probing
    outstanding: int = 0
    ok: int = 0  # answers so far
    failed: int = 0  # failed attempts so far
    last_error: Optional[str] = None
    down_since: Optional[float] = None  # the first failure of the run it is in (unix time); None: answering

    @property
    def down(self) -> bool:
        """Resting, or failing out of all: not answering now."""
        return self.state != "ok"


@dataclass(frozen=True)
class Uploads:
    """A job's uploads to S3 (generate's progress.json ``uploads``, extract's ``s3``)."""

    pending: int = 0  # closed files waiting to go up (those waiting for a retry too)
    uploaded: int = 0  # files uploaded by this attempt
    failures: int = 0  # failed attempts so far (each retried)
    last_error: Optional[str] = None
    done_set_pending: bool = False  # the done-set changed since it last went up
    pending_bytes: Optional[int] = None  # the bytes of the pending files
    oldest_pending_at: Optional[float] = None  # when the oldest pending file was closed (unix time)
    last_upload_at: Optional[float] = None  # the last file that went up (unix time; across attempts)
    # what the job's prefix holds: its run's one listing at the start (what earlier runs left
    # too) plus what it uploaded since; None: the listing failed, or a worker that does not say
    stored_objects: Optional[int] = None
    stored_bytes: Optional[int] = None
    stored_listed_at: Optional[float] = None  # when that listing was taken (unix time)


@dataclass(frozen=True)
class QualityWindow:
    """generate's last completions judged (its progress.json ``window``): how many of the last
    ``n`` (at most ``size``) had each quality problem, and the id of the newest that had it.
    The problems (agents/workers/generate/quality.py defines them): ``cut_at_max_tokens``,
    ``empty_answer``, ``no_answer``, ``repetition``. The watcher sets each share against its
    ``[alerts]`` ``*_pct`` threshold once ``n`` is 100 or more."""

    size: int
    n: int
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)

    def share(self, problem: str) -> Optional[float]:
        """The share (0..1) of the window with ``problem``; None for an empty window."""
        return self.counts.get(problem, 0) / self.n if self.n > 0 else None


@quick_init  # built every tick (agents/contract/plain.py)
@dataclass(frozen=True)
class Progress:
    done: int
    total: Optional[int] = None
    tokens: Optional[int] = None
    rate_per_s: Optional[float] = None  # items per second over the rate window
    tokens_per_s: Optional[float] = None
    eta_s: Optional[float] = None
    updated_at: Optional[float] = None  # when the job last reported (unix time)
    quality: dict[str, int] = field(default_factory=dict)
    error: Optional[str] = None  # a progress file that could not be read
    # a job that is not running has no live rate or ETA: its last live figure, and when
    last_tokens_per_s: Optional[float] = None
    last_rate_at: Optional[float] = None
    # records that are neither cut at max_tokens, nor empty, nor failed, of the records counted
    # (generate's progress.json: counted as their ids reach the done-set)
    useful: Optional[int] = None
    useful_of: Optional[int] = None
    # what the job reports of its S3 uploads and its servers, and why it cannot write (a full
    # disk: generation paused); None and [] from a job that does not say
    uploads: Optional[Uploads] = None
    servers: list[ServerHealth] = field(default_factory=list)
    blocked: Optional[str] = None
    # the job's start-up phase and since when (unix time, the node's clock), and how long its
    # last start took to its first durable output (ProgressDoc's fields of the same names)
    phase: Optional[str] = None
    phase_since: Optional[float] = None
    startup_s: Optional[float] = None
    # generate: its last completions' quality problems (the [alerts] *_pct thresholds judge them)
    window: Optional[QualityWindow] = None

    @property
    def servers_down(self) -> int:
        return sum(1 for s in self.servers if s.down)


@dataclass(frozen=True)
class JobPlan:
    """A job's ``plan.json`` (written by `gpudeck plan` beside its output) against how the
    job goes (agents/jobs/planwatch.py)."""

    path: str
    planned_wall_s: Optional[float] = None  # the plan's projected_wall_s
    projected_wall_s: Optional[float] = None  # now: the time since ``since``, plus the ETA
    drift_pct: Optional[float] = None  # how far projected is off planned, in percent (+: slower)
    since: Optional[float] = None  # the job's first start, or the plan's writing when that came later
    written_at: Optional[float] = None  # when the plan was written
    error: Optional[str] = None  # plan.json could not be read; the last good figures are kept


# ---------------------------------------------------------------- typed results of requests


@dataclass(frozen=True)
class GpuHolder:
    """A process that still holds GPU memory after a kill."""

    pid: int
    gpu: int
    mib: float


@dataclass(frozen=True)
class KillVerdict:
    """What a kill did, verified: ``ok`` only when no process of the job is left and the GPUs
    no longer show its memory. Kept in the job's state on the node and shown with the job."""

    job: str
    ok: bool
    message: str  # one line for the operator: "freed 54.0 GiB in 2.1 s", "still held by pid 515 ..."
    signal: Optional[str] = None  # the last signal sent: SIGTERM or SIGKILL; None when nothing was sent
    seconds: Optional[float] = None
    freed_gib: Optional[float] = None
    pids: list[int] = field(default_factory=list)  # the job's processes when the kill began
    survivors: list[int] = field(default_factory=list)  # those still alive at the end
    gpu_holders: list[GpuHolder] = field(default_factory=list)
    already: Optional[str] = None  # the job had already ended: the state it ended in
    exit_code: Optional[int] = None
    at: Optional[float] = None  # when the verdict was reached (unix time)
    # a cluster task: the state the kill left it in, as the scheduler read back (killed: it ran;
    # cancelled: it waited and never ran); its row keeps it once the scheduler forgets the task
    state: Optional[JobState] = None


@dataclass(frozen=True)
class LaunchResult:
    job: str
    pid: int
    attempt: int
    log: str  # the job's log file on the node
    argv: list[str] = field(default_factory=list)  # the command line the node really ran
    kill: Optional[KillVerdict] = None  # a relaunch of a live job: the kill that came first
    changed: list[str] = field(default_factory=list)  # a relaunch: what the fleet file changed since the last launch
    job_id: Optional[str] = None  # on a cluster: the scheduler's id (an array "14", a task "14_3"); pid is then 0


@dataclass(frozen=True)
class LogChunk:
    job: str
    text: str
    offset: int  # the byte offset after this text: where a follow reads on
    path: str
    skipped: int = 0  # bytes left out before this text: a follower too far behind skips to the live end


@dataclass(frozen=True)
class TaskInfo:
    """A cluster job's task as the scheduler shows it (agents/cluster/): its row is
    ``<job>/<index>``, its GPUs are the compute node's indices (Slurm's IDX)."""

    job: str  # the fleet's job
    index: int  # the array task id: the shard it runs
    job_id: Optional[str] = None  # the raw id (srun --jobid, scontrol listpids)
    array_id: Optional[str] = None  # A in A_T (scancel, requeue)
    host: Optional[str] = None  # the compute node
    scheduler_state: Optional[str] = None  # RUNNING, PENDING, CANCELLED... as the scheduler says it
    reason: Optional[str] = None  # a pending task's reason (JobArrayTaskLimit, BeginTime...)
    reason_text: Optional[str] = None  # that reason in one line
    restarts: int = 0  # the scheduler's requeues (SLURM_RESTART_COUNT)
    elapsed_s: Optional[float] = None
    limit_s: Optional[float] = None  # its time limit; None: none
    note: Optional[str] = None  # what the wrapper saw: "requeued itself on SIGUSR1 (time limit or preemption)"
    # squeue; "attempts": left squeue, read from the wrapper's file; "kept": left squeue, the last
    # state Slurm (or gpudeck's scancel verdict) gave it, newer than any attempt
    source: str = "squeue"
    observed: bool = False  # an observer beside it reports its GPUs and host


@dataclass(frozen=True)
class ClusterInfo:
    """The cluster agent's own figures: the scheduler it polls, and what a poll costs."""

    kind: str
    login: str
    partition: Optional[str] = None
    poll_s: float = 30.0
    polls: int = 0  # squeue calls so far
    polled_at: Optional[float] = None
    poll_ms: Optional[float] = None  # the last poll: squeue and parsing
    config: dict[str, str] = field(default_factory=dict)  # ProctrackType, MinJobAge, KillWait, MaxArraySize...
    observers: int = 0
    error: Optional[str] = None  # the last poll failed: why
    setup_error: Optional[str] = None  # this login cannot be used at all (no squeue: not a Slurm login node)


@dataclass(frozen=True)
class AttemptSpan:
    """One attempt of a job on this node, for its spend (console/cost.py): when it ran (unix
    times; ``ended_at`` None while it runs), how it ended, and how many of the node's GPUs it
    held (its spec's ``gpus`` at its launch)."""

    attempt: int
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    state: Optional[JobState] = None
    exit_code: Optional[int] = None
    gpus: int = 0


@quick_init  # built every tick (agents/contract/plain.py)
@dataclass(frozen=True)
class JobStatus:
    name: str
    kind: JobKind
    state: JobState
    gpus: list[int] = field(default_factory=list)
    gpu_uuids: list[str] = field(default_factory=list)
    pid: Optional[int] = None
    pgid: Optional[int] = None
    pids: list[int] = field(default_factory=list)
    attempt: int = 0
    exit_code: Optional[int] = None
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    progress: Optional[Progress] = None
    engine: Optional[Engine] = None
    log_path: Optional[str] = None
    argv: list[str] = field(default_factory=list)  # the command line the node ran for this attempt
    last_kill: Optional[KillVerdict] = None  # the last kill's verdict, kept across agents
    error: Optional[str] = None  # this job could not be read this tick (the others still were)
    # the restart policy (agents/watch/restarts.py): restarts so far (a restart that made no
    # progress counts twice), the limit, when the next one is due, and why the last one happened
    restart: Optional[RestartPolicy] = None
    restarts: int = 0
    max_restarts: Optional[int] = None
    next_restart_at: Optional[float] = None
    restart_note: Optional[str] = None  # "gave up after 5 restarts", "restarted: exit code 137"
    # when the job first started: its first launch, or its first after it last ended with exit
    # code 0 (restarts and relaunches go on from it); and its plan against how it goes
    first_started_at: Optional[float] = None
    plan: Optional[JobPlan] = None
    # the fleet file's spec differs from the one this attempt ran with: what a relaunch changes
    spec_changes: list[str] = field(default_factory=list)
    fleet: Optional[str] = None  # the fleet file that owns the job (agents/jobs/owners.py); None: not known
    task: Optional[TaskInfo] = None  # a cluster job's task (the row is <job>/<index>)
    waiting: Optional[str] = None  # a job with `after` not started yet: what it waits for, or why it is blocked
    adopted: bool = False  # this attempt is a process gpudeck did not start (`gpudeck adopt`)
    fenced: Optional[str] = None  # state fenced: where the job went, as its worker read it beside the output
    staging: Optional[Staging] = None  # its stage's copy (agents/staging/), from the attempt's staging.json
    # every attempt of the job on this node (the last MAX_ATTEMPTS_KEPT), the current one last:
    # what the console's spend per attempt and "burned" are made of
    attempts: list[AttemptSpan] = field(default_factory=list)


@dataclass(frozen=True)
class Event:
    """One line of a node's timeline, ``<home>/events.jsonl`` (agents/watch/events.py)."""

    t: float
    seq: int
    node: str
    kind: EventKind
    message: str
    job: Optional[str] = None
    gpu: Optional[int] = None
    key: Optional[str] = None  # the condition it raises or resolves ("stalled:gen", "gpu_health:xid:0")
    details: dict[str, Any] = field(default_factory=dict)


@quick_init  # built every tick (agents/contract/plain.py)
@dataclass(frozen=True)
class Alert:
    kind: AlertKind
    message: str
    job: Optional[str] = None
    gpu: Optional[int] = None
    pid: Optional[int] = None
    per_hour: Optional[float] = None  # idle_paid: the dollars an hour the idle GPUs cost
    # when it began on the node (unix time), kept by the node per alert across ticks and, where
    # its rule's state is on disk, across a new agent: every console shows the same time. None
    # only from an agent older than this field (the console then says it does not know)
    since: Optional[float] = None

    def ident(self) -> tuple[Any, ...]:
        """What makes an alert the same one from tick to tick: its kind and what it is about (a
        disk's alerts, by the path their message opens with)."""
        by_path = self.kind in (AlertKind.DISK_FULL, AlertKind.DISK_FILLING)
        return (self.kind, self.job, self.gpu, self.pid, self.message.split(":", 1)[0] if by_path else None)


# ---------------------------------------------------------------- messages


@dataclass(frozen=True)
class Hello:
    node: str
    version: str
    protocol: int
    pid: int
    started_at: float
    home: str
    gpu_error: Optional[str] = None
    watching: bool = False  # `gpudeck watch start`: the agent stays when its last console leaves
    detached: bool = False  # this agent is the watcher itself: no console's session, stdio on a log file
    type: str = "hello"


@quick_init  # built every tick (agents/contract/plain.py)
@dataclass(frozen=True)
class Snapshot:
    node: str
    seq: int
    t: float
    host: Host
    gpus: list[Gpu]
    jobs: list[JobStatus]
    alerts: list[Alert] = field(default_factory=list)
    gpu_error: Optional[str] = None  # why the GPU list is empty (no driver, NVML off)
    containment: Optional[str] = None  # how job attempts are contained: cgroup | token (agents/jobs/contain.py)
    gpus_simulated: bool = False  # the GPUs are the demo's stand-in (agents/simgpu.py), not NVML
    cluster: Optional[ClusterInfo] = None  # a cluster agent's snapshot: its scheduler and polls
    type: str = "snapshot"


@quick_init  # built every tick (agents/contract/plain.py)
@dataclass(frozen=True)
class Sample:
    """One compact history point: enough to redraw sparklines after a reconnect."""

    t: float
    gpu_mem_mib: list[float] = field(default_factory=list)
    gpu_util: list[Optional[float]] = field(default_factory=list)
    job_tokens_per_s: dict[str, Optional[float]] = field(default_factory=dict)
    job_done: dict[str, int] = field(default_factory=dict)
    job_tokens: dict[str, int] = field(default_factory=dict)  # the counters behind the rates


@dataclass(frozen=True)
class History:
    node: str
    samples: list[Sample]
    type: str = "history"


@dataclass(frozen=True)
class Request:
    id: int
    op: str
    args: dict[str, Any] = field(default_factory=dict)
    type: str = "request"


@dataclass(frozen=True)
class Reply:
    id: int
    ok: bool
    result: dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None
    usage: bool = False  # a refusal that is the fleet file's or the command's mistake (the console exits 2)
    refusal: Optional[str] = None  # a refusal's kind, where a command gives it an exit code of its own (adopt)
    type: str = "reply"


Message = Union[Hello, Snapshot, History, Request, Reply]
MESSAGE_TYPES: dict[str, type] = {
    "hello": Hello,
    "snapshot": Snapshot,
    "history": History,
    "request": Request,
    "reply": Reply,
}

# ---------------------------------------------------------------- encoding

def encode(msg: Message) -> bytes:
    """One message as one JSON line."""
    return (json.dumps(to_plain(msg), separators=(",", ":")) + "\n").encode()


def decode(line: Union[bytes, str]) -> Message:
    """Parse one line into a typed message; raise ProtocolError saying what is wrong."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    except RecursionError:  # a hostile or broken peer: never a crash of the reader
        raise ProtocolError("JSON nested too deep") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"expected a JSON object, got {type(obj).__name__}")
    kind = obj.get("type")
    cls = MESSAGE_TYPES.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise ProtocolError(f"unknown message type {kind!r}; expected one of {sorted(MESSAGE_TYPES)}")
    msg: Message = from_dict(cls, obj)
    return msg


def hello(node: str, pid: int, started_at: float, home: str, gpu_error: Optional[str],
          watching: bool = False, detached: bool = False) -> Hello:
    return Hello(node=node, version=__version__, protocol=PROTOCOL, pid=pid, started_at=started_at, home=home,
                 gpu_error=gpu_error, watching=watching, detached=detached)
