"""The one seam between the agent (its ops table, its ticks, its watcher and its doctor) and
the jobs it answers for, and the one between them and the GPUs they run on.

- :class:`JobBackend`: the jobs of one agent. Two implement it: the node's own supervisor
  (agents/jobs/supervisor.py: its jobs are this host's processes) and a cluster's login-node agent
  (agents/cluster/backend.py: Slurm runs its tasks on other hosts). The start-up picks one; the
  agent's ops table maps each op to one of its methods, the same for both.
- :class:`GpuReader`: the GPUs of this host, read through NVML (agents/sense/gpu.py) or the stand-in
  GPUs of the demo and the tests (agents/simgpu.py).

Nothing here hands out a backend's own state: what a caller gets is a copy (:class:`JobFacts`,
a read-only mapping) or a figure, and a job's files are reached through what they are for
(:meth:`JobBackend.read_note`, :meth:`JobBackend.workdir`), never as paths inside its
directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Protocol

from ..contract import ops
from ..contract.jobs import JobSpec
from ..contract.vocab import AuditAction, JobState
from ..contract.wire import ClusterInfo, Gpu, JobStatus, KillVerdict, LaunchResult, LogChunk
from ..sense.health import HealthReader


class JobError(Exception):
    """A request a backend refuses; the message says why and what to do."""


class JobFacts(NamedTuple):
    """One job (or one task of a cluster's job) as its backend knows it now: a copy, so
    nothing done with it changes the job (a tuple: made for every job at every tick)."""

    name: str
    state: JobState
    attempt: int = 0
    pid: Optional[int] = None
    exit_code: Optional[int] = None
    started_at: Optional[float] = None
    first_started_at: Optional[float] = None  # the first attempt's start (a relaunch keeps it)
    ended_at: Optional[float] = None
    fenced: Optional[str] = None  # why the job stopped for good here (moved to another node)


@dataclass(frozen=True)
class Contained:
    """How a backend contains its jobs' processes: ``cgroup`` (under ``parent``) or ``token``."""

    mode: str
    parent: Optional[Path] = None


@dataclass(frozen=True)
class GpusSeen:
    """One reading of the GPUs a backend's jobs run on, with why there are none (``error``)."""

    gpus: list[Gpu]
    error: Optional[str] = None
    simulated: bool = False


# (action, job, the audit line's fields): the watcher's copy of each audited action
AuditHook = Callable[[AuditAction, Optional[str], dict[str, Any]], None]
# (name, spec, facts or None before its first launch, where it reports progress unless its spec
# names a file) -> fields of the job's JobStatus that the agent reads itself: its progress, its
# engine, its restarts and plan (agents/node/agent.py); a "state" among them overrides the backend's
Extras = Callable[[str, Optional[JobSpec], Optional[JobFacts], str], dict[str, Any]]


class JobBackend(Protocol):
    """What the agent, its watcher (restarts, phases, the timeline) and its doctor ask of the
    jobs they answer for. Every method is answered by both backends; a refusal is a JobError
    (or a contract Refusal) that says why."""

    node: str
    python: str  # the interpreter a job runs with unless its spec names one
    # the jobs' processes run on this host: the agent reads their progress and engines and
    # applies the node's rules (alerts, restarts, phases). False: a scheduler runs them
    # elsewhere and its rows come whole from the backend
    local: bool

    # ------------------------------------------------------------ what is known

    def names(self) -> list[str]:
        """Every job: declared by a fleet file, or known from what it left on disk."""
        ...

    def declared(self) -> Mapping[str, JobSpec]:
        """The fleet file's jobs, by name (read-only)."""
        ...

    def spec_of(self, name: str) -> Optional[JobSpec]:
        """The declared spec, else the one the job last ran with."""
        ...

    def knows(self, name: str) -> bool:
        """Whether ``name`` is a job here: declared, or run here before."""
        ...

    def facts(self, name: str) -> Optional[JobFacts]:
        """The job's state now; None for a job never launched here."""
        ...

    def owner_of(self, pid: int) -> Optional[str]:
        """The job a process of this host belongs to, or None."""
        ...

    def workdir(self, name: str) -> Path:
        """Where the job runs when its spec names no ``cwd``: relative paths of its options
        are read from there."""
        ...

    def containment(self) -> Optional[Contained]:
        """How a job's processes are contained; None where a scheduler contains them."""
        ...

    # ------------------------------------------------------------ each tick

    def refresh(self) -> None:
        """A tick's bookkeeping: notice jobs that ended, keep their logs in bounds."""
        ...

    def statuses(self, now: float, for_console: bool, extras: Optional[Extras] = None) -> list[JobStatus]:
        """A row per job (or per task). ``for_console`` False leaves out what only a console
        reads; ``extras`` adds the agent's own readings of a job that runs on this host."""
        ...

    def read_gpus(self, jobs: list[JobStatus]) -> GpusSeen:
        """The GPUs the jobs run on, each process named by its job."""
        ...

    def disk_paths(self) -> list[str]:
        """Where the jobs write: free disk is shown for each."""
        ...

    def cluster_info(self) -> Optional[ClusterInfo]:
        """The scheduler's side of a snapshot; None on a node."""
        ...

    async def serve(self) -> None:
        """Work of its own while the agent runs (a scheduler's polls); returns at once where
        there is none. Cancelled when the agent ends."""
        ...

    async def close(self) -> None:
        """The agent ends: let go of what :meth:`serve` started."""
        ...

    # ------------------------------------------------------------ the ops

    def configure(self, specs: list[JobSpec], fleet: str = "", take_over: bool = False, source: str = "",
                  reading: bool = False) -> ops.Configured:
        """A fleet file's jobs for this node (``reading``: a look that takes nothing)."""
        ...

    def launch(self, name: str) -> LaunchResult:
        ...

    def kill(self, name: str, grace_s: float = 10.0) -> KillVerdict:
        """Kill, then verify that nothing of the job is left (its processes, its GPU memory)."""
        ...

    def relaunch(self, name: str, grace_s: float = 10.0) -> LaunchResult:
        """The next attempt; a job still running is killed first."""
        ...

    def kill_pid(self, pid: int, grace_s: float = 10.0) -> KillVerdict:
        """Kill a GPU process that belongs to no job, with the same verification."""
        ...

    def adopt(self, pid: int, name: str, started_at: Optional[float] = None, progress_file: Optional[str] = None,
              kind: str = "command") -> ops.Adopted:
        """Make a process gpudeck did not start the job ``name``."""
        ...

    def logs(self, name: str, lines: int = 100, offset: Optional[int] = None) -> LogChunk:
        """The last ``lines`` lines of the job's log, or what came after byte ``offset``."""
        ...

    # ------------------------------------------------------------ for the watcher

    def set_blocked(self, name: str, blocked: bool) -> None:
        """A job that waits on its ``after`` (agents/watch/phases.py): ``blocked`` (a job it
        runs after failed), or back to pending (that job runs again)."""
        ...

    def audit(self, action: AuditAction, job: Optional[str], details: Optional[dict[str, Any]] = None,
              **kw: Any) -> None:
        """One line of the audit log (``<home>/audit.log``)."""
        ...

    def on_audit(self, hook: Optional[AuditHook]) -> None:
        """Call ``hook`` with each audited action (the watcher's timeline)."""
        ...

    def read_note(self, name: str, note: str) -> Optional[dict[str, Any]]:
        """A document the watcher keeps beside a job (``restarts.json``); None while there is
        none. An unreadable one is an OSError or a ValueError."""
        ...

    def write_note(self, name: str, note: str, doc: dict[str, Any]) -> None:
        """Keep ``doc`` beside the job; a write that fails is an alert (agents/sense/writes.py),
        not an exception."""
        ...


class GpuReader(Protocol):
    """The GPUs of this host: NVML's (agents/sense/gpu.py) or the stand-in ones (agents/simgpu.py)."""

    error: Optional[str]  # why there are no GPUs to read, or None
    simulated: bool

    @property
    def uuids(self) -> list[str]:
        ...

    @property
    def totals(self) -> list[tuple[str, float]]:
        """(name, total MiB) of each GPU, read once: safe from any thread."""
        ...

    def sample(self, owner_of: Optional[Callable[[int], Optional[str]]] = None) -> list[Gpu]:
        """One reading of every GPU; ``owner_of(pid)`` names the job of each process."""
        ...

    def processes(self, index: int) -> list[tuple[int, float]]:
        """(pid, MiB) of every compute process on GPU ``index``."""
        ...

    def memory_used_mib(self, index: int) -> float:
        ...

    def health_reader(self) -> Optional[HealthReader]:
        """The reader of XID, ECC, page and clock health; None where there are no GPUs."""
        ...
