"""What a job is, independent of the fleet file it was declared in."""

from __future__ import annotations

import dataclasses
import enum
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional

KINDS = ("command", "sglang-server", "generate", "extract", "router")


class JobState(str, enum.Enum):
    PENDING = "pending"  # declared, never launched on this node
    STARTING = "starting"  # launched; an engine that does not answer yet
    RUNNING = "running"
    STOPPING = "stopping"  # a kill is under way
    EXITED = "exited"  # ended by itself with code 0
    FAILED = "failed"  # ended by itself with a non-zero code
    KILLED = "killed"  # ended by a kill we sent
    LOST = "lost"  # gone with no exit code and no kill: a reboot, an OOM of the wrapper...

    @property
    def alive(self) -> bool:
        return self in (JobState.STARTING, JobState.RUNNING, JobState.STOPPING)


class SpecError(ValueError):
    """A job spec that cannot run; the message names the job and the field."""


@dataclass(frozen=True)
class JobSpec:
    name: str
    kind: str = "command"
    node: Optional[str] = None
    command: list[str] = field(default_factory=list)  # for kind=command (argv)
    gpus: list[int] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: Optional[str] = None
    python: Optional[str] = None  # interpreter for built-in kinds; default: the agent's
    # progress: a progress.json the job writes, or a done-set file (one finished id per line)
    progress: Optional[str] = None
    done_set: Optional[str] = None
    total: Optional[int] = None
    stall_after_s: float = 600.0
    # engines
    metrics_url: Optional[str] = None
    model: Optional[str] = None
    port: Optional[int] = None
    host: str = "127.0.0.1"
    tp: Optional[int] = None
    dp: Optional[int] = None
    args: list[str] = field(default_factory=list)  # extra arguments for built-in kinds
    # generate / extract / router (used by later kinds; carried through untouched)
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise SpecError(f"job {self.name!r}: a name must be non-empty, without '/' or a leading '.'")
        if self.kind not in KINDS:
            raise SpecError(f"job {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind == "command" and not self.command:
            raise SpecError(f"job {self.name!r}: kind 'command' needs a 'command'")
        if self.kind == "sglang-server" and not self.port:
            raise SpecError(f"job {self.name!r}: kind 'sglang-server' needs a 'port'")
        if self.kind == "sglang-server" and not self.model and not self.command:
            raise SpecError(f"job {self.name!r}: kind 'sglang-server' needs a 'model' (or its own 'command')")
        if any((not isinstance(g, int)) or g < 0 for g in self.gpus):
            raise SpecError(f"job {self.name!r}: 'gpus' must be GPU indices (integers >= 0)")

    # -- wire form
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> "JobSpec":
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
        if self.kind == "sglang-server" and self.port:
            return f"http://{self.host}:{self.port}/metrics"
        if self.kind == "router":  # sglang-router serves smg_* on its --prometheus-port, 29000 by default
            return f"http://{self.host}:29000/metrics"
        return None

    def argv(self, python: str) -> list[str]:
        """The command line the supervisor runs for this spec."""
        py = self.python or python
        if self.command:  # any kind may be given its exact command (a wrapper, a simulator)
            return list(self.command)
        if self.kind == "sglang-server":
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
        # built-in workers build their own command line from the spec's options:
        # agents.workers.<kind>.build_argv(spec, python) -> list[str]
        import importlib
        module = importlib.import_module(f"agents.workers.{self.kind.replace('-', '_')}")
        return module.build_argv(self, py)

    def describe(self) -> str:
        return shlex.join(self.argv("python3"))
