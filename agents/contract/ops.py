"""The ops: what a console asks of a node agent, each one a class.

An op's fields are its arguments, typed; its ``Result`` is the type of its answer; ``on_loop``
says that the agent answers it on its event loop (fast, and it touches state the loop owns)
rather than in a thread (a kill waits out a grace period). The op's name on the wire is
``name``, spelled here and nowhere else.

    request = ops.Kill(job="gen", grace_s=5.0)        # the console
    line = wire.encode(ops.request(7, request))       # -> {"type": "request", "op": "kill", ...}
    op = ops.op_of(wire.decode(line))                 # the agent: an ops.Kill, its arguments checked
    verdict = op.answer(plain_result)                 # the console again: a KillVerdict

The agent and the watcher answer through one table keyed by op class (agents/node/agent.py);
``FleetClient.request(op)`` returns ``op.Result`` (remote/client.py).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Optional, TypeVar

from .jobs import KINDS, JobSpec, job_name_problem
from .plain import ProtocolError, from_dict, to_plain
from .vocab import RestartPolicy, Verdict
from .watching import AlertThresholds, WatchSettings
from .wire import Event, KillVerdict, LaunchResult, LogChunk, Request, Sample, Snapshot

GRACE_MAX_S = 3600.0


R = TypeVar("R")  # an op's answer: its Result


class Op(Generic[R]):
    """The base of every op; see the module's docstring. An op names its answer's type once, as
    its base's argument (``class Kill(Op[KillVerdict])``): ``Result`` at run time, and what a
    caller of ``FleetClient.request(op)`` gets to the type checker."""

    name: ClassVar[str]
    Result: ClassVar[type]  # set from the base's argument
    on_loop: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            if typing.get_origin(base) is Op:
                (result,) = typing.get_args(base)
                if not isinstance(result, type):
                    raise TypeError(f"op {cls.__name__}: its answer must be a class, got {result!r}")
                cls.Result = result
        if "Result" not in dir(cls):
            raise TypeError(f"op {cls.__name__} names no answer: derive it from Op[TheResultClass]")

    def check(self) -> None:
        """Raise ProtocolError when an argument is out of its range (types are checked on decode):
        an op that waits out a grace period (``grace_s``) waits 0 to GRACE_MAX_S seconds."""
        grace = getattr(self, "grace_s", None)
        if grace is not None and not 0 <= grace <= GRACE_MAX_S:
            raise ProtocolError(f"{self.name!r}: 'grace_s' must be a number of seconds from 0 to {GRACE_MAX_S:g}, "
                                f"got {grace!r}")

    def args(self) -> dict[str, Any]:
        plain: dict[str, Any] = to_plain(self)
        return plain

    def answer(self, result: Any) -> R:
        """A reply's plain ``result`` read back into ``Result``; ProtocolError when it does not fit."""
        answer: R = from_dict(self.Result, result, f"the reply to {self.name!r}")
        return answer


# ---------------------------------------------------------------- typed results


@dataclass(frozen=True)
class CopyDiff:
    """How a fleet file's jobs differ from those another file of the same fleet (a copy: the
    same ``[fleet] name``) last declared on the node."""

    fleet: str
    declared_from: str  # the other copy: host:/path of the file
    lacks: list[str] = field(default_factory=list)  # the node holds them for the fleet; this file lacks them
    adds: list[str] = field(default_factory=list)  # this file declares them; the other copy did not
    replaced: bool = False  # this configure replaced the other copy's declarations (a change; a look never does)

    def lines(self, node: str) -> list[str]:
        """The difference in sentences, as a command prints them."""
        out = []
        verb = "held" if self.replaced else "holds"
        if self.lacks:
            out.append(f"node {node} {verb} job(s) {', '.join(self.lacks)} of fleet {self.fleet!r}, declared by "
                       f"{self.declared_from}, which this file lacks")
        if self.adds:
            out.append(f"this file declares job(s) {', '.join(self.adds)}, which {self.declared_from} (fleet "
                       f"{self.fleet!r}) did not")
        if out and self.replaced:
            out.append(f"this file's jobs replace those of {self.declared_from} on node {node}")
        return out


@dataclass(frozen=True)
class Configured:
    jobs: list[str]  # the jobs the node now holds, in the fleet file's order
    changed: dict[str, list[str]] = field(default_factory=dict)  # job -> what its relaunch would change
    # the file's jobs another fleet owns on the node (a reading configure): job -> owner
    owned_elsewhere: dict[str, str] = field(default_factory=dict)
    taken: dict[str, str] = field(default_factory=dict)  # jobs taken over (--take-over): job -> former owner
    differs: list[str] = field(default_factory=list)  # how the file's jobs differ from another copy's on the node
    copy: Optional[CopyDiff] = None  # the same, as data (None: no other copy declared the fleet's jobs last)
    # a look while another copy of the fleet declared its jobs last: the node kept that copy's
    # declarations, and its watcher's saved jobs and settings
    kept_copy: bool = False


@dataclass(frozen=True)
class HistoryPoint:
    """One GPU's or one job's figures at ``t``: a sample (``n`` 1), or a bucket's (``t`` its start)
    mean, with its ``lo`` and ``hi``. The figures by name: a GPU's :data:`GPU_FIGURES`, a job's
    :data:`JOB_FIGURES` and a generate job's :data:`QUALITY_FIGURES`. A figure the node had no
    reading of is absent."""

    t: float
    gpu: Optional[str] = None  # its index ("3"), or "host:3" on a cluster
    job: Optional[str] = None
    state: Optional[str] = None  # a job's state: the bucket's last
    n: int = 1  # samples in the bucket
    mean: dict[str, Optional[float]] = field(default_factory=dict)
    lo: dict[str, Optional[float]] = field(default_factory=dict)  # empty for a sample: its mean
    hi: dict[str, Optional[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class HistoryPage:
    samples: list[Sample] = field(default_factory=list)  # resolution None: compact samples, for sparklines
    points: list[HistoryPoint] = field(default_factory=list)  # a resolution asked: per GPU and per job
    resolution: Optional[str] = None  # the one the points have: 1s, 1m or 1h
    node: str = ""


@dataclass(frozen=True)
class EventPage:
    node: str
    seq: int  # the newest event's seq when the page was read: a follower asks after it next time
    events: list[Event] = field(default_factory=list)


@dataclass(frozen=True)
class SupervisorState:
    """What the node's supervisor knows of the watcher (agents/watch/supervise.py)."""

    kind: str = "none"  # systemd | cron | none
    present: bool = False  # its entry (unit, crontab lines) is there
    healthy: bool = False  # and the supervisor runs it: the unit is active, a cron daemon is alive
    detail: str = ""  # what the operator reads: the unit's name and state, the lines, what an admin must run


@dataclass(frozen=True)
class Ping:
    at: float
    fail: bool = False  # sent to the URL's /fail
    answer: str = ""


@dataclass(frozen=True)
class HeartbeatStatus:
    target: str  # the URL, redacted
    every: float
    on: bool
    failing: Optional[str] = None
    last: Optional[Ping] = None
    in_flight_s: Optional[float] = None


@dataclass(frozen=True)
class TargetStatus:
    target: str
    pending: int = 0
    failing: Optional[str] = None
    in_flight_s: Optional[float] = None


@dataclass(frozen=True)
class OutboxStatus:
    pending: int = 0
    targets: list[TargetStatus] = field(default_factory=list)


@dataclass(frozen=True)
class WatchedJob:
    name: str
    restart: Optional[RestartPolicy] = None
    restarts: int = 0
    max_restarts: Optional[int] = None
    next_restart_at: Optional[float] = None
    restart_note: Optional[str] = None
    restart_on_stall: Optional[str] = None
    deadline: Optional[str] = None


@dataclass(frozen=True)
class WatchStatus:
    node: str
    pid: int
    watching: bool
    detached: bool
    log: str
    since: Optional[float] = None
    fleet: Optional[str] = None
    supervisor: SupervisorState = field(default_factory=SupervisorState)
    heartbeat: Optional[HeartbeatStatus] = None
    notify: list[str] = field(default_factory=list)
    outbox: OutboxStatus = field(default_factory=OutboxStatus)
    alerts: AlertThresholds = field(default_factory=AlertThresholds)
    active: list[str] = field(default_factory=list)
    jobs: list[WatchedJob] = field(default_factory=list)
    # consoles connected to the agent that answered, the asker's own included: an agent that is
    # not the detached watcher hands over only when the last one closes
    consoles: int = 0
    args: list[str] = field(default_factory=list)  # the answering agent's own arguments (agent_args)
    want_args: Optional[list[str]] = None  # the arguments the next watcher starts with, when kept


@dataclass(frozen=True)
class Acked:
    job: str
    cleared: bool  # this ack cleared the gave_up; False: it had been acknowledged already
    message: str


@dataclass(frozen=True)
class StagedCopy:
    """One copy a stage made on the node (agents/staging/record.py): where to, from where, its
    bytes, the job that made it and when, and whether its files are all there now (a reboot
    empties /dev/shm)."""

    to: str
    source: str
    bytes: int = 0
    job: Optional[str] = None
    staged_at: Optional[float] = None
    present: bool = True


@dataclass(frozen=True)
class Unstaged:
    """What ``unstage`` removed, and what it kept and why ("<to>: in use by job x (running)")."""

    removed: list[StagedCopy] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    freed_bytes: int = 0


@dataclass(frozen=True)
class Noted:
    """An operator's note written into a node's timeline."""

    node: str
    seq: int  # its event's
    t: float
    notified: bool  # queued for the node's [[notify]] targets (asked for, and some target takes notes)


@dataclass(frozen=True)
class Adopted:
    """What a node recorded of a process it adopted as a job (the environment's names only:
    its values are secrets)."""

    job: str
    pid: int
    pgid: Optional[int]
    gpus: list[int]
    argv: list[str]
    cwd: str
    env_names: list[str] = field(default_factory=list)
    started_at: Optional[float] = None  # the process's start (unix time)


@dataclass(frozen=True)
class Check:
    """One line of `gpudeck doctor`: what was checked, what it found, and what to do."""

    name: str  # python, torch, nvml, sglang, model, disk, s3, clock, containment, open files, processes
    verdict: Verdict
    detail: str  # what was found, with the figures and what an estimate assumed
    fix: str = ""  # the one thing to do; "" when there is nothing to do
    job: Optional[str] = None  # the job it is about (model, disk, s3, sglang), else None
    seconds: Optional[float] = None  # how long the check took


@dataclass(frozen=True)
class DoctorReport:
    node: str
    checks: list[Check] = field(default_factory=list)
    at: float = 0.0  # the node's clock when it answered

    @property
    def worst(self) -> Verdict:
        return max((c.verdict for c in self.checks), key=lambda v: v.rank, default=Verdict.OK)


# ---------------------------------------------------------------- the ops


@dataclass(frozen=True)
class Status(Op[Snapshot]):
    """The node now: a snapshot, at once."""

    name: ClassVar[str] = "status"
    on_loop: ClassVar[bool] = True


@dataclass(frozen=True)
class Configure(Op[Configured]):
    """The fleet file's jobs for this node (and its watch settings); a relaunch's changes."""

    name: ClassVar[str] = "configure"
    on_loop: ClassVar[bool] = True
    jobs: list[JobSpec] = field(default_factory=list)
    fleet: str = ""  # the fleet's identity: its [fleet] name, else "host:/path" (agents/jobs/owners.py)
    take_over: bool = False  # jobs another fleet file declared become this one's
    source: str = ""  # the fleet file, "host:/path": owners of that key migrate to a [fleet] name
    reading: bool = False  # a look (status, doctor, ...): never refused, takes and drops nothing
    watch: Optional[WatchSettings] = None  # [[notify]], [alerts], [heartbeat]; None: unchanged


HISTORY_RESOLUTIONS = ("auto", "1s", "1m", "1h")


HISTORY_KEPT_S = 90 * 86400  # how far back a node's history goes (agents/history/db.py's last tier)

# A history point's figures by name (HistoryPoint's mean, lo, hi), the one table of them: the
# node's database keeps them in this order (agents/history/db.py), the console reads them by
# these names. A GPU's; a job's; and a generate job's quality shares, the % of its last
# completions with each problem (its progress.json's window), only in a row of a job that
# reports a window.
GPU_FIGURES = ("mem_mib", "util_pct", "temp_c", "power_w")
JOB_FIGURES = ("tokens_per_s", "done", "running", "queued", "kv_usage", "tokens")
QUALITY_FIGURES = ("cut_pct", "empty_pct", "no_answer_pct", "repetition_pct")


@dataclass(frozen=True)
class ReadHistory(Op[HistoryPage]):
    """The node's history from ``since`` to ``until`` (unix times; ``until`` None: now). With no
    ``resolution``: compact samples for the sparklines (every sample of the last hour, a
    minute's means before it). With one (``auto``, ``1s``, ``1m``, ``1h``): points per GPU and per
    job, only ``gpu``'s or ``job``'s when given, only the GPUs' with ``gpus_only`` (a node's
    chart). Answered in a thread: a long read never holds up a tick."""

    name: ClassVar[str] = "history"
    since: float = 0.0
    until: Optional[float] = None
    resolution: Optional[str] = None
    job: Optional[str] = None  # routes the op to the job's node (FleetClient.request)
    gpu: Optional[int] = None
    gpus_only: bool = False  # every GPU's points and no job's

    def check(self) -> None:
        if self.resolution is not None and self.resolution not in HISTORY_RESOLUTIONS:
            raise ProtocolError(f"'history': 'resolution' must be one of {', '.join(HISTORY_RESOLUTIONS)}, "
                                f"got {self.resolution!r}")
        if self.until is not None and self.until < self.since:
            raise ProtocolError(f"'history': 'until' ({self.until!r}) is before 'since' ({self.since!r})")
        if self.gpu is not None and self.gpu < 0:
            raise ProtocolError(f"'history': 'gpu' must be an index (0 or more), got {self.gpu!r}")
        if self.gpus_only and self.job is not None:
            raise ProtocolError(f"'history': 'gpus_only' leaves the jobs out; it takes no 'job' (got {self.job!r})")


@dataclass(frozen=True)
class ReadEvents(Op[EventPage]):
    """The node's timeline: the newest ``limit`` events after ``since`` and ``after_seq``."""

    name: ClassVar[str] = "events"
    since: float = 0.0
    after_seq: int = 0
    limit: int = 5000


@dataclass(frozen=True)
class Watch(Op[WatchStatus]):
    """The watcher's state; ``on`` starts or stops watching, registered with ``supervise``."""

    name: ClassVar[str] = "watch"
    on_loop: ClassVar[bool] = True
    on: Optional[bool] = None
    supervise: Optional[str] = None  # auto | systemd | cron | none
    # with ``on``: the node's agent arguments by the fleet file now (``--interval``,
    # ``--textfile-dir``...): the supervisor's line and the next watcher start with them
    node_args: Optional[list[str]] = None


@dataclass(frozen=True)
class Ack(Op[Acked]):
    """Acknowledge a job that gave up restarting: its ``gave_up`` alert clears (and the
    heartbeat's /fail with it); nothing is started. Refused for a job that has not given up."""

    name: ClassVar[str] = "ack"
    on_loop: ClassVar[bool] = True
    job: str


NOTE_MAX_CHARS = 2000


@dataclass(frozen=True)
class Note(Op[Noted]):
    """An operator's note: a ``note`` event in the node's timeline, about ``job`` when given
    (the job need not be the node's: a note about a move names both ends), sent to the node's
    ``[[notify]]`` targets only with ``notify``; ``by``: who wrote it (user@host)."""

    name: ClassVar[str] = "note"
    on_loop: ClassVar[bool] = True
    text: str
    job: Optional[str] = None  # about this job; with no node given, the op goes to the job's node
    notify: bool = False
    by: Optional[str] = None

    def check(self) -> None:
        if not self.text.strip():
            raise ProtocolError("'note': 'text' is empty: say something")
        if len(self.text) > NOTE_MAX_CHARS:
            raise ProtocolError(f"'note': 'text' is {len(self.text):,} characters, more than {NOTE_MAX_CHARS:,}: "
                                f"a note is a line of the timeline, not a document")
        if any(ord(c) < 32 and c not in "\t" for c in self.text):
            raise ProtocolError("'note': 'text' holds a line break or another control character: a note is one "
                                "line")


@dataclass(frozen=True)
class Launch(Op[LaunchResult]):
    name: ClassVar[str] = "launch"
    job: str


@dataclass(frozen=True)
class Kill(Op[KillVerdict]):
    """SIGTERM to the job's processes, SIGKILL after ``grace_s``, then proof that its GPU memory
    came back."""

    name: ClassVar[str] = "kill"
    job: str
    grace_s: float = 10.0


@dataclass(frozen=True)
class Relaunch(Op[LaunchResult]):
    name: ClassVar[str] = "relaunch"
    job: str
    grace_s: float = 10.0


@dataclass(frozen=True)
class KillPid(Op[KillVerdict]):
    """A process no job owns (an unowned GPU process), killed as a job is."""

    name: ClassVar[str] = "kill_pid"
    pid: int
    grace_s: float = 10.0

    def check(self) -> None:
        if self.pid <= 0:
            raise ProtocolError(f"'kill_pid' needs a 'pid' (a positive integer), got {self.pid!r}")
        super().check()


@dataclass(frozen=True)
class Adopt(Op[Adopted]):
    """A process gpudeck did not start, made the job ``job``: its command line, working
    directory, environment, process group and GPUs recorded, so that it is shown, killed with
    verification and relaunched (the same command, directory and environment, contained) as a
    job. ``started_at`` is the start the console saw (GpuProcess.started_at): a pid that now
    names another process is refused. Refused: another user's process, a process a job
    already owns, a name the node already holds."""

    name: ClassVar[str] = "adopt"
    pid: int
    job: str
    started_at: Optional[float] = None
    progress_file: Optional[str] = None  # where the process reports progress (relative: to its cwd)
    kind: str = "command"

    def check(self) -> None:
        if self.pid <= 0:
            raise ProtocolError(f"'adopt' needs a 'pid' (a positive integer), got {self.pid!r}")
        problem = job_name_problem(self.job)
        if problem:
            raise ProtocolError(f"'adopt' 'job': {problem}")
        if self.kind not in KINDS:
            raise ProtocolError(f"'adopt' 'kind' must be one of {', '.join(KINDS)}, got {self.kind!r}")


@dataclass(frozen=True)
class Logs(Op[LogChunk]):
    """The job's log: its last ``lines`` lines, or what follows byte ``offset``."""

    name: ClassVar[str] = "logs"
    job: str
    lines: int = 100
    offset: Optional[int] = None


@dataclass(frozen=True)
class Doctor(Op[DoctorReport]):
    """The node checked before a run, against the jobs the fleet file declares for it; each
    check runs with its own timeout of ``timeout_s`` (agents/node/doctor.py)."""

    name: ClassVar[str] = "doctor"
    console_time: Optional[float] = None  # the console's clock when it sent the op; None: no clock check
    venv: str = ""  # the node's gpudeck venv (Node.agent_venv); "": only the agent's own python is checked
    import_warn_s: float = 20.0  # an import of torch or SGLang slower than this is a warning
    timeout_s: float = 120.0  # each check's; a check that takes longer fails, saying so

    def check(self) -> None:
        for key in ("import_warn_s", "timeout_s"):
            value = getattr(self, key)
            if not 0 < value <= DOCTOR_MAX_S:
                raise ProtocolError(f"'doctor': {key!r} must be a number of seconds above 0, at most "
                                    f"{DOCTOR_MAX_S:g}, got {value!r}")


DOCTOR_MAX_S = 1800.0


@dataclass(frozen=True)
class Unstage(Op[Unstaged]):
    """Remove the node's staged copies (every one, or those at ``paths``); a copy a live job
    stages or uses is kept, and said."""

    name: ClassVar[str] = "unstage"
    paths: list[str] = field(default_factory=list)


ALL: tuple[type[Op[Any]], ...] = (Status, Configure, ReadHistory, ReadEvents, Watch, Ack, Note, Launch, Kill, Relaunch,
                             KillPid, Adopt, Logs, Doctor, Unstage)
OPS: dict[str, type[Op[Any]]] = {cls.name: cls for cls in ALL}


def request(id: int, op: Op[Any]) -> Request:
    return Request(id=id, op=op.name, args=op.args())


def op_of(req: Request) -> Op[Any]:
    """The op a request asks for, its arguments checked by the op's own types; ProtocolError
    (or a job spec's SpecError) says what is wrong."""
    cls = OPS.get(req.op)
    if cls is None:
        raise ProtocolError(f"unknown op {req.op!r}; expected one of {', '.join(OPS)}")
    known = {f.name for f in dataclasses.fields(typing.cast(Any, cls))}
    unknown = sorted(set(req.args) - known)
    if unknown:
        raise ProtocolError(f"{req.op!r} takes no argument {unknown[0]!r}"
                            + (f"; it takes {', '.join(sorted(known))}" if known else "; it takes none"))
    op: Op[Any] = from_dict(cls, req.args, req.op)
    op.check()
    return op
