"""A cluster as both sides know it: the fleet file's ``[[clusters]]`` table (``ClusterSpec``),
what a job asks of the scheduler (``TaskResources``), and the names of a job's tasks.

gpudeck never schedules on a cluster: the scheduler (Slurm) picks nodes and GPUs; the cluster
agent on the login node submits, observes, kills with proof and requeues (agents/cluster/).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Optional

CLUSTER_KINDS = ("slurm",)
MIN_POLL_S = 10.0  # site admins object to per-second squeue
DEFAULT_AGENT_HOME = "/tmp/gpudeck-{user}"
TASK_SEP = "/"  # a task's name: "<job>/<index>"


@dataclass(frozen=True)
class ClusterSpec:
    """``[[clusters]]``: how to reach the scheduler, and where its jobs keep their files."""

    name: str
    shared_dir: str  # on the shared filesystem: the wrapper, logs, attempts and the venv
    kind: str = "slurm"
    login: str = "local"  # an SSH destination resolved like [[nodes]], or "local": this machine
    partition: Optional[str] = None  # None: the cluster's default partition
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    sbatch_args: list[str] = field(default_factory=list)
    agent_home: str = DEFAULT_AGENT_HOME  # node-local; {user} is the login user
    python: Optional[str] = None  # the interpreter on the login and compute nodes; default: the venv's
    poll_s: float = 30.0  # one squeue per poll, shared by every console
    hello_timeout_s: float = 60.0  # a cold import on NFS is slow
    env: dict[str, str] = field(default_factory=dict)  # for every scheduler command (SLURM_CONF...)
    simulate_gpus: Optional[str] = None  # the tests' stand-in GPUs on the compute nodes, never NVML

    def __post_init__(self) -> None:
        if self.kind not in CLUSTER_KINDS:
            raise ValueError(f"cluster {self.name!r}: 'kind' must be one of {', '.join(CLUSTER_KINDS)}, "
                             f"got {self.kind!r}")
        if not isinstance(self.poll_s, (int, float)) or isinstance(self.poll_s, bool) or self.poll_s < MIN_POLL_S:
            raise ValueError(f"cluster {self.name!r}: 'poll_s' must be at least {MIN_POLL_S:g} seconds "
                             f"(one squeue per poll, for every console), got {self.poll_s!r}")

    @property
    def venv(self) -> str:
        return f"{self.shared_dir.rstrip('/')}/venv"

    def home_for(self, user: str) -> str:
        return self.agent_home.replace("{user}", user)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, obj: Any) -> "ClusterSpec":
        if not isinstance(obj, dict):
            raise ValueError(f"a cluster spec must be an object, got {type(obj).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(obj) - known
        if unknown:
            raise ValueError(f"cluster {obj.get('name')!r}: unknown field(s) {', '.join(sorted(unknown))}")
        return cls(**obj)


# ---------------------------------------------------------------- what a job asks for

# Slurm's --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds; or UNLIMITED / INFINITE
_TIME = re.compile(r"\d+|\d+:\d+|\d+:\d+:\d+|\d+-\d+|\d+-\d+:\d+|\d+-\d+:\d+:\d+")
_MEM = re.compile(r"\d+[KMGT]?", re.I)


def slurm_time_problem(text: Any) -> Optional[str]:
    if not isinstance(text, str) or not (_TIME.fullmatch(text.strip()) or text.strip().upper() in
                                         ("UNLIMITED", "INFINITE")):
        return (f"expected Slurm's time format (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS), "
                f"got {text!r}")
    return None


def slurm_seconds(text: Optional[str]) -> Optional[float]:
    """Slurm's time format (``%l``/``%M`` in squeue, ``--time``) as seconds; None: no limit or unknown."""
    if not text:
        return None
    t = text.strip()
    if t.upper() in ("UNLIMITED", "INFINITE", "NOT_SET", "N/A", "INVALID"):
        return None
    days = 0
    if "-" in t:
        d, t = t.split("-", 1)
        days = int(d)
        parts = [int(x) for x in t.split(":")]
        while len(parts) < 3:
            parts.append(0)
        h, m, s = parts
    else:
        parts = [int(x) for x in t.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0  # a bare number is minutes (--time)
        elif len(parts) == 2:
            h, (m, s) = 0, parts
        else:
            h, m, s = parts
    return float(days * 86400 + h * 3600 + m * 60 + s)


@dataclass(frozen=True)
class TaskResources:
    """A cluster job's fleet keys for the scheduler. Each of ``shards`` tasks gets ``gpus``
    GPUs (a count: the scheduler picks which), at most ``max_running`` at once."""

    gpus: int = 0
    gpu_type: Optional[str] = None
    cpus: Optional[int] = None
    mem: Optional[str] = None  # Slurm's format: 64G, 500M
    time: Optional[str] = None  # Slurm's format: 2-00:00:00, 90
    shards: int = 1
    max_running: Optional[int] = None
    requeue: bool = True  # a task requeues itself before its time limit or when preempted

    def problems(self) -> list[tuple[str, str]]:
        """(key, what is wrong) for each bad value."""
        out = []
        if not isinstance(self.gpus, int) or isinstance(self.gpus, bool) or self.gpus < 0:
            out.append(("gpus", f"on a Slurm cluster 'gpus' is a count (an integer >= 0: the scheduler picks "
                                f"which GPUs), got {self.gpus!r}"))
        for key in ("cpus", "max_running"):
            v = getattr(self, key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                out.append((key, f"'{key}' must be an integer >= 1, got {v!r}"))
        if not isinstance(self.shards, int) or isinstance(self.shards, bool) or self.shards < 1:
            out.append(("shards", f"'shards' must be an integer >= 1 (the array's tasks), got {self.shards!r}"))
        if self.time is not None:
            problem = slurm_time_problem(self.time)
            if problem:
                out.append(("time", f"'time': {problem}"))
        if self.mem is not None and (not isinstance(self.mem, str) or not _MEM.fullmatch(self.mem.strip())):
            out.append(("mem", f"'mem': expected Slurm's memory format (a number of MB, or with K, M, G or T: "
                               f"64G), got {self.mem!r}"))
        if self.gpu_type is not None and (not isinstance(self.gpu_type, str) or
                                          not re.fullmatch(r"[A-Za-z0-9_.-]+", self.gpu_type)):
            out.append(("gpu_type", f"'gpu_type': expected a GRES type name such as a100, got {self.gpu_type!r}"))
        if not isinstance(self.requeue, bool):
            out.append(("requeue", f"'requeue' must be true or false, got {self.requeue!r}"))
        return out

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


RESOURCE_KEYS = tuple(f.name for f in dataclasses.fields(TaskResources))


# ---------------------------------------------------------------- task names

def task_name(job: str, index: int) -> str:
    return f"{job}{TASK_SEP}{index}"


def split_task(name: str) -> tuple[str, Optional[int]]:
    """``"extract/7"`` -> ("extract", 7); ``"extract"`` -> ("extract", None)."""
    job, sep, idx = name.rpartition(TASK_SEP)
    if sep and idx.isdigit():
        return job, int(idx)
    return name, None


def slurm_job_name(fleet: str, job: str) -> str:
    """``gd:<fleet>:<job>``: how the cluster agent knows its own jobs in squeue."""
    return f"gd:{fleet}:{job}"
