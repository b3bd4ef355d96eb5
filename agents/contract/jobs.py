"""What a job is: its spec (the fleet file's [[jobs]] table as the node gets it), the kinds it
comes in and the rules of its name. Each kind's fleet-file options, short name and engine flag are
declared once, in :data:`KIND_INFO` beside the kind."""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from .cluster import RESOURCE_KEYS, TaskResources
from .exits import EXIT_DATA
from .fields import Bounds, range_problem, type_problem
from .staging import StageError, StageItem, read_stage
from .kinds import ExtractOptions, GenerateOptions, KindOptions, LlamaServerOptions, OptionError, RouterOptions
from .units import parse_deadline, parse_duration
from .vocab import RestartPolicy


class JobKind(str, enum.Enum):
    COMMAND = "command"  # any program
    SGLANG_SERVER = "sglang-server"  # python -m sglang.launch_server, built from the spec
    GENERATE = "generate"  # the built-in generation worker
    EXTRACT = "extract"  # the built-in hidden-state extraction worker
    ROUTER = "router"  # sglang-router in front of several servers
    LLAMA_SERVER = "llama-server"  # llama.cpp's server, built from the spec and its options

    def __str__(self) -> str:
        return self.value

    @property
    def info(self) -> "KindInfo":
        return KIND_INFO[self]

    @property
    def short(self) -> str:
        return KIND_INFO[self].short

    @property
    def options_class(self) -> Optional[type[KindOptions]]:
        """The dataclass of this kind's options (agents/contract/kinds.py); None: it has none."""
        return KIND_INFO[self].options

    @property
    def options(self) -> frozenset[str]:
        """The fleet keys of this kind besides the JobSpec's own (old spellings included)."""
        cls = KIND_INFO[self].options
        return frozenset(cls.fleet_keys()) | frozenset(cls.old_keys()) if cls is not None else frozenset()

    @property
    def engine_client(self) -> bool:
        return KIND_INFO[self].engine_client

    @property
    def engine(self) -> bool:
        """An inference engine gpudeck starts from the spec: it serves at the job's ``port``."""
        return KIND_INFO[self].engine


@dataclass(frozen=True)
class KindInfo:
    short: str  # the console's KIND column
    options: Optional[type[KindOptions]] = None  # the kind's options, kept in JobSpec.options
    engine_client: bool = False  # it talks to engines: the console shows their figures on it
    engine: bool = False  # an engine started from the spec: needs a port and a model, scraped at the port


KIND_INFO: dict[JobKind, KindInfo] = {
    JobKind.COMMAND: KindInfo(short="cmd"),
    JobKind.SGLANG_SERVER: KindInfo(short="sglang", engine=True),
    JobKind.GENERATE: KindInfo(short="gen", options=GenerateOptions, engine_client=True),
    JobKind.EXTRACT: KindInfo(short="extract", options=ExtractOptions),
    JobKind.ROUTER: KindInfo(short="router", options=RouterOptions, engine_client=True),
    JobKind.LLAMA_SERVER: KindInfo(short="llama", options=LlamaServerOptions, engine=True),
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


MARKER = "_SUCCESS"  # a job's completion marker: it ended ok (agents/watch/phases.py)
# beside where _SUCCESS would be: generate ended with every prompt done but its records mostly
# junk (fewer useful than min_useful_pct): its figures, and why; a job `after` it is blocked
QUALITY_MARKER = "_QUALITY"


def final_exit(spec: Optional["JobSpec"], exit_code: Optional[int]) -> bool:
    """Whether a job that ended with ``exit_code`` is never to be restarted by its policy: a
    built-in worker's :data:`EXIT_DATA` (a command job's 4 means whatever its program says)."""
    return exit_code == EXIT_DATA and spec is not None and spec.kind in (JobKind.GENERATE, JobKind.EXTRACT)


def quality_marker(spec: "JobSpec") -> Optional[str]:
    """Where a built-in worker's ``_QUALITY`` is, beside its own ``_SUCCESS`` (None for a job
    with a ``success_marker`` of its own, or none)."""
    if spec.success_marker:
        return None
    there = completion_marker(spec)
    return there[: -len(MARKER)] + QUALITY_MARKER if there and there.endswith("/" + MARKER) else None


def completion_marker(spec: "JobSpec") -> Optional[str]:
    """Where ``spec``'s completion marker is seen from another node: its ``success_marker``
    (the agent writes it there at exit code 0), else a built-in worker's own, ``_SUCCESS`` in its
    S3 prefix or its output directory (under ``part-I-of-N`` for a part); None for a job that
    writes none anywhere another node can look."""
    if spec.success_marker:
        return spec.success_marker
    worker = spec.worker
    if worker is None:
        return None
    part = worker.part
    sub = f"part-{part[0]}-of-{part[1]}/" if part else ""
    if worker.s3:
        return f"{worker.s3.rstrip('/')}/{sub}{MARKER}"
    if worker.out:
        return f"{worker.out.rstrip('/')}/{sub}{MARKER}"
    return None


# the built-in workers' options: each has out, s3, s3_endpoint and part (JobSpec.worker)
WorkerOptions = Union[GenerateOptions, ExtractOptions]


class SpecError(ValueError):
    """A job spec that cannot run; the message names the job and the field. ``key``: the field
    whose value is wrong, when it is one; ``said`` then is the message from that key on
    (``'max_restarts': expected ...``), for a reader that names the job its own way (the fleet
    file's ``[[jobs]] #2 ('gen')``, at the key's line)."""

    def __init__(self, message: str, key: Optional[str] = None, said: str = "") -> None:
        super().__init__(message)
        self.key, self.said = key, said or message

    @classmethod
    def of(cls, name: object, key: str, said: str) -> "SpecError":
        """``job 'a' 'max_restarts': expected ...``: what is wrong with ``key``'s value."""
        return cls(f"job {name!r} {said}", key=key, said=said)


# Ranges of a job's numeric fields: (lowest, highest), either end None for open. The fleet file
# and the node read them here alone (JobSpec checks them, wherever the spec comes from).
JOB_RANGES: dict[str, Bounds] = {
    "port": (1, 65535), "stall_after_s": (1.0, None), "log_max_mb": (0.01, None), "total": (0, None),
    "tp": (1, None), "dp": (1, None), "max_restarts": (0, 1000), "restart_backoff_s": (0.0, 86400.0),
    "kill_grace_s": (0.0, 3600.0),
}
# fields with checks of their own (JobSpec.__post_init__), not by their declared type
_OWN_CHECKS = ("name", "kind", "options", "resources", "after_markers", "after_endpoints")


SHELL = "/bin/sh"
ON_NODE_LOST = ("stay", "move")  # on_node_lost: wait for the node, or move to a spare (console/moving.py)


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
    python_env: Optional[str] = None  # an [[envs]] table's name: its python and PATH (agents/contract/envs.py)
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
    kill_grace_s: float = 10.0  # a watcher's restart: SIGTERM, then SIGKILL after this many seconds
    deadline: Optional[str] = None  # "2026-12-05T00:00:00Z": alert when the projected finish passes it
    # phases (agents/watch/phases.py): started when every job named here has finished ok
    after: list[str] = field(default_factory=list)
    success_marker: Optional[str] = None  # where the agent writes _SUCCESS too when the job exits 0 (a shared path)
    # not a fleet key: the fleet file's parser fills it, for each job of ``after`` on another node, with the
    # _SUCCESS marker that says it finished ok (a path as this node sees it, or an s3:// URL)
    after_markers: dict[str, str] = field(default_factory=dict)
    # not a fleet key either: for each s3:// marker of ``after_markers`` whose job names its own
    # S3-compatible store (``s3_endpoint``), that endpoint, where the marker is asked for
    after_endpoints: dict[str, str] = field(default_factory=dict)
    # what a console or `gpudeck watch fleet` does when the job's node is lost ([alerts] node_lost_s):
    # "stay" (wait for it) or "move" (to a spare node, console/moving.py)
    on_node_lost: str = "stay"
    # generate / extract / router: the kind's options (agents/contract/kinds.py); None for the others.
    # Given as a dict (a fleet file's keys, the wire's form), it is read into the kind's dataclass.
    options: Optional[KindOptions] = None
    # a job of a cluster ([[clusters]]) instead of a node: what it asks the scheduler for
    cluster: Optional[str] = None
    resources: Optional[TaskResources] = None
    # copies made before the job's own command starts (agents/staging/): [{ from = "...", to = "..." }]
    stage: list[StageItem] = field(default_factory=list)
    stage_reserve_gb: float = 16.0  # a stage into memory (/dev/shm): the host memory the job needs beside the copy
    stage_max_mb_s: Optional[float] = None  # the stage's copy at most this fast (a shared file system's other users)

    def __post_init__(self) -> None:
        problem = job_name_problem(self.name)
        if problem:
            raise SpecError(f"job {str(self.name)[:JOB_NAME_MAX]!r}...: {problem}" if isinstance(self.name, str)
                            and len(self.name) > JOB_NAME_MAX else f"job {self.name!r}: {problem}")
        if self.kind not in KINDS:
            raise SpecError(f"job {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        object.__setattr__(self, "kind", JobKind(self.kind))
        self._check_fields()
        if isinstance(self.command, str):
            try:
                object.__setattr__(self, "command", shell_command(self.command))
            except ValueError as exc:
                raise SpecError(f"job {self.name!r}: {exc}", key="command", said=f"'command': {exc}") from None
        if self.kind is JobKind.COMMAND and not self.command:
            raise SpecError(f"job {self.name!r}: kind 'command' needs a 'command'")
        if self.kind.engine and not self.port:
            raise SpecError(f"job {self.name!r}: kind {self.kind.value!r} needs a 'port'")
        if self.kind.engine and not self.model and not self.command:
            raise SpecError(f"job {self.name!r}: kind {self.kind.value!r} needs a 'model' (or its own 'command')")
        if any(not isinstance(g, int) or isinstance(g, bool) or g < 0 for g in self.gpus):
            raise SpecError(f"job {self.name!r}: 'gpus' must be GPU indices (integers >= 0)")
        self._check_watch_fields()
        self._check_after()
        self._read_options()
        self._read_resources()
        self._read_stage()
        if self.python_env is not None and self.python is not None:
            raise SpecError(f"job {self.name!r}: 'python' and 'python_env' both given; the env's python is the "
                            f"job's (drop 'python', or 'python_env')")

    def _check_fields(self) -> None:
        """Each field's value against its declared type and its range (JOB_RANGES)."""
        for f in _checked_fields():
            value = getattr(self, f.name)
            bounds = JOB_RANGES.get(f.name)
            problem = type_problem(f, value) or (range_problem(value, bounds) if bounds is not None else None)
            if problem:
                raise SpecError.of(self.name, f.name, f"{f.name!r}: {problem}")

    def _read_stage(self) -> None:
        try:
            object.__setattr__(self, "stage", read_stage(self.stage, "'stage'"))
        except StageError as exc:
            raise SpecError.of(self.name, "stage", str(exc)) from None
        reserve = self.stage_reserve_gb
        if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or not 0 <= reserve <= 100_000:
            raise SpecError(f"job {self.name!r}: 'stage_reserve_gb' must be gigabytes from 0 to 100000, got {reserve!r}")
        limit = self.stage_max_mb_s
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0):
            raise SpecError(f"job {self.name!r}: 'stage_max_mb_s' must be megabytes a second above 0, got {limit!r}")
        if self.stage and self.cluster is not None:
            raise SpecError(f"job {self.name!r}: 'stage' is for a node's job: on a Slurm cluster the batch wrapper "
                            f"does not stage yet; point the job at the shared copy, or stage it in its command")

    def _read_resources(self) -> None:
        res = self.resources
        if isinstance(res, dict):
            unknown = set(res) - set(RESOURCE_KEYS)
            if unknown:
                raise SpecError(f"job {self.name!r}: unknown resource(s) {', '.join(sorted(unknown))}")
            res = TaskResources(**res)
            object.__setattr__(self, "resources", res)
        if res is not None and not isinstance(res, TaskResources):
            raise SpecError(f"job {self.name!r}: 'resources' must be a table, got {type(res).__name__}")
        if self.cluster is not None:
            if self.node is not None:
                raise SpecError(f"job {self.name!r}: 'node' and 'cluster' both given; a job runs on a node or is "
                                f"submitted to a cluster, not both")
            if res is None:
                object.__setattr__(self, "resources", res := TaskResources())
            for _, problem in res.problems():
                raise SpecError(f"job {self.name!r}: {problem}")
        elif res is not None:
            raise SpecError(f"job {self.name!r}: scheduler resources are for a job with a 'cluster'")

    @property
    def target(self) -> Optional[str]:
        """Where the job runs: its cluster, else its node; None: the local node."""
        return self.cluster if self.cluster is not None else self.node

    @property
    def worker(self) -> Optional[WorkerOptions]:
        """A built-in worker's options (generate, extract: its out, s3, s3_endpoint, part); None
        for a kind that is no built-in worker."""
        opts = self.options
        return opts if isinstance(opts, (GenerateOptions, ExtractOptions)) else None

    @property
    def upstreams(self) -> list[str]:
        """The engines a client kind sends its requests to (generate's servers, a router's
        workers: URLs, or a fleet's engine job names before the fleet file resolves them)."""
        opts = self.options
        if isinstance(opts, GenerateOptions):
            return list(opts.servers)
        if isinstance(opts, RouterOptions):
            return list(opts.workers)
        return []

    @property
    def shards(self) -> int:
        return self.resources.shards if self.resources is not None else 1

    def _read_options(self) -> None:
        cls, given = self.kind.options_class, self.options
        if cls is not None and isinstance(given, cls):
            return
        if given is None and cls is None:
            return
        raw: Any = {} if given is None else given
        if not isinstance(raw, dict):
            raise SpecError(f"job {self.name!r}: 'options' must be a table, got {type(raw).__name__}")
        if cls is None:
            if raw:
                raise SpecError(f"job {self.name!r}: kind {self.kind.value!r} takes no options; got "
                                f"{', '.join(sorted(raw))}")
            object.__setattr__(self, "options", None)
            return
        try:  # a job given its own command runs that: the kind's required options are not needed
            opts = cls.from_fleet(raw, f"job {self.name!r}", required=not self.command)
        except OptionError as exc:
            raise SpecError(str(exc)) from None
        object.__setattr__(self, "options", opts)

    def _check_watch_fields(self) -> None:
        policies = ", ".join(p.value for p in RestartPolicy)
        if self.on_node_lost not in ON_NODE_LOST:
            raise SpecError(f"job {self.name!r}: 'on_node_lost' must be one of {', '.join(ON_NODE_LOST)}, got "
                            f"{self.on_node_lost!r}")
        if self.on_node_lost == "move" and self.cluster is not None:
            raise SpecError(f"job {self.name!r}: on_node_lost = \"move\" is for a node's job; a cluster's scheduler "
                            f"places its tasks")
        if not isinstance(self.restart, str) or self.restart not in {p.value for p in RestartPolicy}:
            raise SpecError(f"job {self.name!r}: 'restart' must be one of {policies}, got {self.restart!r}")
        for key, parse in (("restart_on_stall", parse_duration), ("deadline", parse_deadline)):
            value = getattr(self, key)
            if value is not None:
                try:
                    parse(value)
                except ValueError as exc:
                    raise SpecError(f"job {self.name!r}: {key!r}: {exc}") from None

    def _check_after(self) -> None:
        for dep in self.after:
            problem = job_name_problem(dep)
            if problem:
                raise SpecError(f"job {self.name!r}: 'after' {dep!r}: {problem}")
        if self.name in self.after:
            raise SpecError(f"job {self.name!r}: 'after' names the job itself")
        marks = self.after_markers
        for key, table in (("after_markers", marks), ("after_endpoints", self.after_endpoints)):
            if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in table.items()):
                raise SpecError(f"job {self.name!r}: {key!r} must be a table of strings")
        if self.success_marker is not None and (not isinstance(self.success_marker, str) or not self.success_marker):
            raise SpecError(f"job {self.name!r}: 'success_marker' must be a path")

    # read every tick for every job (a frozen spec's figures never change): worked out once
    @functools.cached_property
    def restart_policy(self) -> RestartPolicy:
        return RestartPolicy(self.restart)

    @functools.cached_property
    def stall_restart_s(self) -> Optional[float]:
        return parse_duration(self.restart_on_stall) if self.restart_on_stall is not None else None

    @functools.cached_property
    def deadline_t(self) -> Optional[float]:
        return parse_deadline(self.deadline) if self.deadline is not None else None

    # -- wire form
    def to_dict(self) -> dict[str, Any]:
        """The spec as plain data: the wire's form, the one kept on disk."""
        d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}
        d["kind"] = self.kind.value
        d["options"] = self.options.fleet_dict() if self.options is not None else {}
        d["resources"] = self.resources.to_dict() if self.resources is not None else None
        d["stage"] = [item.to_dict() for item in self.stage]
        return d

    def __plain__(self) -> dict[str, Any]:
        return self.to_dict()

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

    @classmethod
    def from_plain(cls, obj: Any) -> "JobSpec":
        """How :func:`~gpudeck.agents.contract.plain.from_dict` reads a job spec inside an op."""
        return cls.from_dict(obj)

    # -- what to run
    @functools.cached_property
    def scrape_url(self) -> Optional[str]:
        if self.metrics_url:
            return self.metrics_url
        if self.kind.engine and self.port:
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
        if self.options is None:
            raise SpecError(f"job {self.name!r}: kind {self.kind.value!r} needs a 'command'")
        try:  # built-in kinds: the command line comes from the kind's options (agents/contract/kinds.py)
            return self.options.argv(self, py)
        except OptionError as exc:
            raise SpecError(str(exc)) from None

    def describe(self) -> str:
        return shlex.join(self.argv("python3"))


@functools.lru_cache(maxsize=None)
def _checked_fields() -> tuple["dataclasses.Field[Any]", ...]:
    """JobSpec's fields checked by their declared type (the others have checks of their own)."""
    return tuple(f for f in dataclasses.fields(JobSpec) if f.name not in _OWN_CHECKS)
