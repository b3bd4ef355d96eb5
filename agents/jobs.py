"""The job vocabulary: what a job is, the states it goes through and the kinds it comes in.

This module is the one home of :class:`JobState`, :class:`JobKind` and :class:`ShownState`.
They are string enums, so the JSON on the wire and on disk holds their plain values. Each
kind's fleet-file options, short name and engine flag are declared once, in :data:`KIND_INFO`
beside the kind. Nothing else spells a state or a kind as a string.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional


class JobState(str, enum.Enum):
    PENDING = "pending"  # declared, never launched on this node
    STARTING = "starting"  # launched; an engine that does not answer yet
    RUNNING = "running"
    STOPPING = "stopping"  # a kill is under way
    EXITED = "exited"  # ended by itself with code 0
    FAILED = "failed"  # ended by itself with a non-zero code
    KILLED = "killed"  # ended by a kill we sent
    LOST = "lost"  # gone with no exit code and no kill: a reboot, an OOM of the wrapper...

    def __str__(self) -> str:
        return self.value

    @property
    def alive(self) -> bool:
        return self in _ALIVE


_ALIVE = frozenset({JobState.STARTING, JobState.RUNNING, JobState.STOPPING})


class ShownState(str, enum.Enum):
    """What the console shows in a job's state column: its :class:`JobState`, or ``ready`` for
    an engine job whose server answers, or ``unknown`` for a job on a node that cannot be read."""

    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    EXITED = "exited"
    FAILED = "failed"
    KILLED = "killed"
    LOST = "lost"
    READY = "ready"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, state: JobState) -> "ShownState":
        return cls(state.value)

    @property
    def alive(self) -> bool:
        return self in (ShownState.STARTING, ShownState.RUNNING, ShownState.STOPPING, ShownState.READY)


class EngineState(str, enum.Enum):
    """An inference server as its /metrics answers: not listening, listening but not serving,
    serving, or answering in a way that says it is broken."""

    LOADING = "loading"  # connection refused: the process loads the model
    STARTING = "starting"  # 503, or health not yet 200
    READY = "ready"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value

    @property
    def answers(self) -> bool:
        """Past start-up: a job whose engine is LOADING or STARTING shows as starting."""
        return self in (EngineState.READY, EngineState.FAILED)


class AlertKind(str, enum.Enum):
    """What an alert is about. The node raises most; the console adds the ones only it can see."""

    SHARED_GPU = "shared_gpu"  # two jobs on one GPU
    UNOWNED_GPU_PROCESS = "unowned_gpu_process"  # GPU memory no job owns
    JOB_DIED = "job_died"
    STALLED = "stalled"  # alive, no progress
    DISK_FULL = "disk_full"
    ENGINE_FAILED = "engine_failed"
    NO_SUCH_GPU = "no_such_gpu"  # a job declares a GPU index the node does not have
    DISK_FILLING = "disk_filling"  # the console's trend: full within a day
    UNREACHABLE = "unreachable"  # the console cannot read the node
    # raised by the watcher (agents/watch/): GPU health, thresholds, deadlines, restarts
    GPU_XID = "gpu_xid"  # an XID error reported by the driver
    GPU_ECC = "gpu_ecc"  # volatile uncorrected ECC errors
    GPU_PAGES = "gpu_pages"  # retired pages or row remapping pending (a reset is due)
    GPU_THROTTLE = "gpu_throttle"  # thermal, power-brake or hardware slowdown
    GPU_IDLE = "gpu_idle"  # a running job's GPU at 0% use for idle_gpu_s
    GPU_HOT = "gpu_hot"  # at or above gpu_temp_c
    DEADLINE = "deadline"  # the projected finish passes the job's deadline, or slipped
    PLAN_DRIFT = "plan_drift"  # the projected wall time is more than [alerts] plan_drift_pct over the job's plan.json
    GAVE_UP = "gave_up"  # the restart policy stopped restarting the job

    def __str__(self) -> str:
        return self.value

    @property
    def severe(self) -> bool:
        return self in (AlertKind.SHARED_GPU, AlertKind.JOB_DIED, AlertKind.UNREACHABLE, AlertKind.DISK_FULL,
                        AlertKind.GPU_XID, AlertKind.GPU_ECC, AlertKind.GAVE_UP)


class RestartPolicy(str, enum.Enum):
    """A job's ``restart`` in the fleet file: what the watcher does when the job ends by itself."""

    NEVER = "never"
    ON_FAILURE = "on-failure"  # ended with a non-zero code, or lost
    ALWAYS = "always"  # ended any way but by an operator's kill

    def __str__(self) -> str:
        return self.value

    def wants(self, state: "JobState") -> bool:
        """Whether a job that ended in ``state`` is to be started again."""
        if self is RestartPolicy.ALWAYS:
            return state in (JobState.EXITED, JobState.FAILED, JobState.LOST)
        if self is RestartPolicy.ON_FAILURE:
            return state in (JobState.FAILED, JobState.LOST)
        return False


class EventKind(str, enum.Enum):
    """What a line of the node's timeline (``<home>/events.jsonl``) or a notification is about."""

    DIED = "died"
    RESTARTED = "restarted"
    GAVE_UP = "gave_up"
    STALLED = "stalled"
    FINISHED = "finished"
    GPU_HEALTH = "gpu_health"
    DISK = "disk"
    TEMPERATURE = "temperature"
    DEADLINE = "deadline"
    PLAN_DRIFT = "plan_drift"
    NODE_UNREACHABLE = "node_unreachable"  # sent by a console, never by the node itself
    RESOLVED = "resolved"  # a condition above that has cleared
    # the timeline only, never notified
    STATE = "state"  # a job changed state
    ACTION = "action"  # a launch, kill, relaunch (the audit log's actions)
    ALERT = "alert"  # any other alert that came up
    NOTIFIED = "notified"  # a notification was delivered
    NOTIFY_FAILED = "notify_failed"  # a delivery attempt failed (it is retried)
    WATCH = "watch"  # the watcher started, stopped, took over

    def __str__(self) -> str:
        return self.value


NOTIFY_EVENTS = (EventKind.DIED, EventKind.RESTARTED, EventKind.GAVE_UP, EventKind.STALLED, EventKind.FINISHED,
                 EventKind.GPU_HEALTH, EventKind.DISK, EventKind.TEMPERATURE, EventKind.DEADLINE,
                 EventKind.PLAN_DRIFT, EventKind.NODE_UNREACHABLE, EventKind.RESOLVED)


class NotifyFormat(str, enum.Enum):
    """The body a ``[[notify]]`` target gets."""

    JSON = "json"  # the event as a JSON object
    SLACK = "slack"  # {"text": ...} for a Slack (or Mattermost, Discord /slack) incoming webhook
    NTFY = "ntfy"  # plain text with Title, Priority and Tags headers (ntfy.sh)

    def __str__(self) -> str:
        return self.value


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: Any) -> float:
    """``"30m"``, ``"45s"``, ``"2h"``, ``"1d"``, ``"500ms"`` or a number of seconds, as seconds;
    ValueError says what was expected."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _DURATION.fullmatch(text) if isinstance(text, str) else None
        if not m:
            raise ValueError(f"expected a duration such as \"30m\", \"45s\", \"2h\" or \"1d\", got {text!r}")
        value = float(m.group(1)) * _UNITS[m.group(2)]
    if not value > 0 or value != value:
        raise ValueError(f"expected a duration above 0, got {text!r}")
    return value


def human_duration(seconds: Optional[float]) -> str:
    """5d 3h, 2h 05m, 4m 10s, 12s; '-' when unknown. The one spelling of a duration, for the
    node's messages and every view of the console."""
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


def parse_deadline(text: Any) -> float:
    """``"2026-12-05T00:00:00Z"`` (ISO 8601; no zone: UTC) as unix time; ValueError otherwise."""
    import datetime as dt

    if not isinstance(text, str):
        raise ValueError(f"expected a date and time such as \"2026-12-05T00:00:00Z\", got {text!r}")
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"expected a date and time such as \"2026-12-05T00:00:00Z\", got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.timestamp()


class JobKind(str, enum.Enum):
    COMMAND = "command"  # any program
    SGLANG_SERVER = "sglang-server"  # python -m sglang.launch_server, built from the spec
    GENERATE = "generate"  # the built-in generation worker
    EXTRACT = "extract"  # the built-in hidden-state extraction worker
    ROUTER = "router"  # sglang-router in front of several servers

    def __str__(self) -> str:
        return self.value

    @property
    def info(self) -> "KindInfo":
        return KIND_INFO[self]

    @property
    def short(self) -> str:
        return KIND_INFO[self].short

    @property
    def options(self) -> frozenset[str]:
        return KIND_INFO[self].options

    @property
    def engine_client(self) -> bool:
        return KIND_INFO[self].engine_client

    @property
    def worker_module(self) -> Optional[str]:
        """The module whose ``build_argv(spec, python)`` makes this kind's command line."""
        return KIND_INFO[self].worker_module


@dataclass(frozen=True)
class KindInfo:
    short: str  # the console's KIND column
    options: frozenset[str] = frozenset()  # fleet-file keys of this kind kept in JobSpec.options
    engine_client: bool = False  # it talks to engines: the console shows their figures on it
    worker_module: Optional[str] = None  # see JobKind.worker_module


KIND_INFO: dict[JobKind, KindInfo] = {
    JobKind.COMMAND: KindInfo(short="cmd"),
    JobKind.SGLANG_SERVER: KindInfo(short="sglang"),
    JobKind.GENERATE: KindInfo(
        short="gen", engine_client=True, worker_module="gpudeck.agents.workers.generate",
        options=frozenset({"servers", "prompts", "out", "s3", "concurrency", "max_tokens", "model_name",
                           "temperature", "top_p", "thinking", "force", "s3_endpoint", "give_up_after"})),
    JobKind.EXTRACT: KindInfo(
        short="extract", worker_module="gpudeck.agents.workers.extract",
        options=frozenset({"data", "out", "layers", "max_tokens_per_batch", "device", "dtype", "s3", "force",
                           "s3_endpoint", "chat_template", "part", "writers", "compress"})),
    JobKind.ROUTER: KindInfo(short="router", engine_client=True, worker_module="gpudeck.agents.workers.router",
                             options=frozenset({"workers", "router_args"})),
}
KINDS = tuple(k.value for k in JobKind)


# A job name is a directory name on the node and a word in every view: 1 to 64 characters,
# letters, digits and . _ - + @ :, starting with a letter or a digit.
JOB_NAME_MAX = 64
JOB_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+@:-]*")


def job_name_problem(name: object) -> Optional[str]:
    """What is wrong with a job name, or None when it is a good one."""
    if not isinstance(name, str) or not name:
        return "a job name must be a non-empty string"
    if len(name) > JOB_NAME_MAX:
        return f"a job name is at most {JOB_NAME_MAX} characters; this one has {len(name)}"
    if not JOB_NAME_RE.fullmatch(name):
        return ("a job name holds only letters, digits and . _ - + @ : and starts with a letter or a digit; "
                f"{name[:JOB_NAME_MAX]!r} does not")
    return None


class SpecError(ValueError):
    """A job spec that cannot run; the message names the job and the field."""


SHELL = "/bin/sh"


def shell_command(text: str) -> list[str]:
    """A ``command`` given as a string runs with ``/bin/sh -c``, as a Dockerfile's shell form
    does: ``;``, ``&&``, pipes, redirections and ``$VARS`` mean what they mean in a shell. (A
    list runs as it is, with no shell.) An unclosed quote is refused here, not at launch."""
    try:
        shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"'command' is not a valid shell command line ({exc}); "
                         f"write it as a list of strings to avoid quoting") from None
    if not text.strip():
        return []
    return [SHELL, "-c", text]


@dataclass(frozen=True)
class JobSpec:
    name: str
    kind: JobKind = JobKind.COMMAND
    node: Optional[str] = None
    command: list[str] = field(default_factory=list)  # argv; a string runs with /bin/sh -c (shell_command)
    gpus: list[int] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: Optional[str] = None
    python: Optional[str] = None  # interpreter for built-in kinds; default: the agent's
    # progress: a progress.json the job writes, or a done-set file (one finished id per line)
    progress: Optional[str] = None
    done_set: Optional[str] = None
    total: Optional[int] = None
    stall_after_s: float = 600.0
    log_max_mb: float = 256.0  # job.log is cut past this; job.log.1 keeps the newest half
    # engines
    metrics_url: Optional[str] = None
    model: Optional[str] = None
    port: Optional[int] = None
    host: str = "127.0.0.1"
    tp: Optional[int] = None
    dp: Optional[int] = None
    args: list[str] = field(default_factory=list)  # extra arguments for built-in kinds
    # what the watcher does when the job ends by itself (agents/watch/restarts.py)
    restart: str = RestartPolicy.NEVER.value  # never | on-failure | always
    max_restarts: int = 5
    restart_backoff_s: float = 10.0  # before the first restart; doubling, at most 10 minutes
    restart_on_stall: Optional[str] = None  # "30m": a live job without progress that long is killed and restarted
    deadline: Optional[str] = None  # "2026-12-05T00:00:00Z": alert when the projected finish passes it
    # generate / extract / router (used by later kinds; carried through untouched)
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problem = job_name_problem(self.name)
        if problem:
            raise SpecError(f"job {str(self.name)[:JOB_NAME_MAX]!r}...: {problem}" if isinstance(self.name, str)
                            and len(self.name) > JOB_NAME_MAX else f"job {self.name!r}: {problem}")
        if self.kind not in KINDS:
            raise SpecError(f"job {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        object.__setattr__(self, "kind", JobKind(self.kind))
        if isinstance(self.command, str):
            try:
                object.__setattr__(self, "command", shell_command(self.command))
            except ValueError as exc:
                raise SpecError(f"job {self.name!r}: {exc}") from None
        for key in ("command", "args"):
            value = getattr(self, key)
            if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
                raise SpecError(f"job {self.name!r}: {key!r} must be a list of strings")
        if not isinstance(self.env, dict) or not all(isinstance(v, str) for v in self.env.values()):
            raise SpecError(f"job {self.name!r}: 'env' must be a table of strings")
        if not isinstance(self.gpus, list):
            raise SpecError(f"job {self.name!r}: 'gpus' must be a list of GPU indices")
        if self.kind is JobKind.COMMAND and not self.command:
            raise SpecError(f"job {self.name!r}: kind 'command' needs a 'command'")
        if self.kind is JobKind.SGLANG_SERVER and not self.port:
            raise SpecError(f"job {self.name!r}: kind 'sglang-server' needs a 'port'")
        if self.kind is JobKind.SGLANG_SERVER and not self.model and not self.command:
            raise SpecError(f"job {self.name!r}: kind 'sglang-server' needs a 'model' (or its own 'command')")
        if any(not isinstance(g, int) or isinstance(g, bool) or g < 0 for g in self.gpus):
            raise SpecError(f"job {self.name!r}: 'gpus' must be GPU indices (integers >= 0)")
        self._check_watch_fields()

    def _check_watch_fields(self) -> None:
        policies = ", ".join(p.value for p in RestartPolicy)
        if not isinstance(self.restart, str) or self.restart not in {p.value for p in RestartPolicy}:
            raise SpecError(f"job {self.name!r}: 'restart' must be one of {policies}, got {self.restart!r}")
        if not isinstance(self.max_restarts, int) or isinstance(self.max_restarts, bool) or self.max_restarts < 0:
            raise SpecError(f"job {self.name!r}: 'max_restarts' must be an integer >= 0, got {self.max_restarts!r}")
        backoff = self.restart_backoff_s
        if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or not 0 <= backoff <= 86400:
            raise SpecError(f"job {self.name!r}: 'restart_backoff_s' must be seconds from 0 to 86400, got {backoff!r}")
        for key, parse in (("restart_on_stall", parse_duration), ("deadline", parse_deadline)):
            value = getattr(self, key)
            if value is not None:
                try:
                    parse(value)
                except ValueError as exc:
                    raise SpecError(f"job {self.name!r}: {key!r}: {exc}") from None

    @property
    def restart_policy(self) -> RestartPolicy:
        return RestartPolicy(self.restart)

    @property
    def stall_restart_s(self) -> Optional[float]:
        return parse_duration(self.restart_on_stall) if self.restart_on_stall is not None else None

    @property
    def deadline_t(self) -> Optional[float]:
        return parse_deadline(self.deadline) if self.deadline is not None else None

    # -- wire form
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["kind"] = self.kind.value
        return d

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> "JobSpec":
        if not isinstance(obj, dict):
            raise SpecError(f"a job spec must be an object, got {type(obj).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(obj) - known
        if unknown:
            raise SpecError(f"job {obj.get('name')!r}: unknown field(s) {', '.join(sorted(unknown))}")
        try:
            return cls(**obj)
        except TypeError as exc:
            raise SpecError(f"job {obj.get('name')!r}: {exc}") from None

    # -- what to run
    @property
    def scrape_url(self) -> Optional[str]:
        if self.metrics_url:
            return self.metrics_url
        if self.kind is JobKind.SGLANG_SERVER and self.port:
            return f"http://{self.host}:{self.port}/metrics"
        if self.kind is JobKind.ROUTER:  # sglang-router serves smg_* on its --prometheus-port, 29000 by default
            return f"http://{self.host}:29000/metrics"
        return None

    def argv(self, python: str) -> list[str]:
        """The command line the supervisor runs for this spec."""
        py = self.python or python
        if self.command:  # any kind may be given its exact command (a wrapper, a simulator)
            return list(self.command)
        if self.kind is JobKind.SGLANG_SERVER:
            argv = [py, "-m", "sglang.launch_server", "--model-path", str(self.model),
                    "--host", self.host, "--port", str(self.port)]
            if self.tp:
                argv += ["--tp-size", str(self.tp)]
            if self.dp:
                argv += ["--dp-size", str(self.dp)]
            argv += list(self.args)
            if "--enable-metrics" not in argv:
                argv.append("--enable-metrics")
            return argv
        # built-in workers build their own command line from the spec's options
        import importlib
        module = importlib.import_module(self.kind.worker_module)
        return module.build_argv(self, py)

    def describe(self) -> str:
        return shlex.join(self.argv("python3"))
