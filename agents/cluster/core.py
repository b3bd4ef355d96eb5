"""The shared ground of the cluster backend (backend.py ClusterJobs): its state, the jobs
declared by the fleet file and kept in the home, a job's run directory and what Slurm last said
of each task. The layers above it: polling.py, submit.py, kills.py, then backend.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from ..contract.errors import Refusal
from ..contract.cluster import ClusterSpec, split_task, task_name
from ..contract.jobs import JobSpec
from ..contract.vocab import AuditAction, JobState
from ..contract.wire import JobStatus, KillVerdict
from ..sense.progress import ProgressTracker
from ..jobs.audit import AuditLog
from ..jobs.backend import AuditHook, GpuReader
from .runs import Attempts, SlurmSaid, read_attempts, read_said, run_dir
from .observe import Observers
from .slurm import TERMINAL, QueueRow, Slurm, TaskDetail


log = logging.getLogger("agents")

EXTRA_POLLS_S = (1.0, 3.0, 7.0)  # after an action: a few polls soon, then back to poll_s
OBSERVER_INTERVAL_S = 2.0
OBSERVER_DELAY_S = 2.0  # after the agent's first poll, before the first observers start
REQUEUE_SIGNAL_S = 120  # --signal=B:USR1@120: the wrapper requeues its task before the time limit

_STATES = {
    "PENDING": JobState.PENDING, "REQUEUED": JobState.PENDING, "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING, "RESV_DEL_HOLD": JobState.PENDING, "CONFIGURING": JobState.STARTING,
    "RUNNING": JobState.RUNNING, "SUSPENDED": JobState.RUNNING, "STOPPED": JobState.RUNNING,
    "COMPLETING": JobState.STOPPING, "SIGNALING": JobState.STOPPING, "STAGE_OUT": JobState.STOPPING,
    "RESIZING": JobState.RUNNING, "COMPLETED": JobState.EXITED, "CANCELLED": JobState.KILLED,
}


def job_state(slurm_state: str) -> JobState:
    return _STATES.get(slurm_state, JobState.FAILED if slurm_state in TERMINAL else JobState.RUNNING)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def fleet_name(identity: str) -> str:
    """The short fleet name in ``gd:<fleet>:<job>``: the fleet file's stem."""
    if not identity:
        return ""
    return Path(identity.split(":", 1)[-1]).stem.replace(":", "_") or "fleet"


class ClusterCore:
    """What every part of ClusterJobs shares: the cluster's state, the declared jobs kept in the
    home, a job's run directory, what Slurm last said of its tasks, the audit and the extra polls."""

    local = False  # the tasks run on the compute nodes: Slurm requeues and chains them
    fleet_identity = ""

    def __init__(self, home: Path, node: str, spec: ClusterSpec, gpu: GpuReader) -> None:
        self.home = Path(home)
        self.node = node
        self.gpu = gpu
        self.python = sys.executable
        self._audit = AuditLog(self.home / "audit.log", node)
        self.spec = spec
        self.slurm = Slurm(spec)
        self.rows: dict[tuple[str, int], QueueRow] = {}  # (job, index): the newest row of each task
        self.details: dict[str, TaskDetail] = {}  # raw id: scontrol -d of a running task
        self._detail_at: dict[str, float] = {}  # raw id: the task's elapsed time when its detail was read
        self._declared: dict[str, JobSpec] = {}
        self.fleet = ""  # the short fleet name in the Slurm job names (gd:<fleet>:<job>) and run dirs
        self.source = ""  # the fleet file it was last declared from (host:/path)
        # the fleet's names before (the same file, renamed or given a [fleet] name): Slurm still
        # has tasks under them, which stay this fleet's
        self.former: list[str] = []
        self.polls = 0
        self.polled_at: Optional[float] = None
        self.poll_ms: Optional[float] = None
        self.poll_error: Optional[str] = None
        self.kills: dict[str, KillVerdict] = {}
        self._said: dict[str, dict[int, SlurmSaid]] = {}  # a job's run dir: what Slurm last said of each task
        self.node_hosts: dict[str, Optional[str]] = {}
        self.local_names = {socket.gethostname(), socket.gethostname().split(".")[0], "localhost", "127.0.0.1"}
        self.observers = Observers(node, self.slurm.env, self.running_tasks, self.observer_argv)
        self._lock = threading.RLock()
        self._due: list[float] = []  # monotonic times of the extra polls an action asked for
        self._wake: Optional[asyncio.Event] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._trackers: dict[str, tuple[str, ProgressTracker]] = {}
        self._seen: dict[str, JobStatus] = {}  # the last rows, by task name (facts)
        self.setup_error = self.slurm.missing()  # not a Slurm login node: said in every snapshot, never polled
        if self.setup_error:
            log.error("%s", self.setup_error)
        self._load_declared()

    # ------------------------------------------------------------ declared jobs (kept in the home)

    @property
    def _state_file(self) -> Path:
        return self.home / "cluster-jobs.json"

    def _load_declared(self) -> None:
        try:
            doc = json.loads(self._state_file.read_text())
            self.fleet = doc.get("fleet", "")
            self.source = doc.get("source", "")
            self.former = [str(n) for n in doc.get("former", []) if n]
            self._declared = {j["name"]: JobSpec.from_dict(j) for j in doc.get("jobs", [])}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if not isinstance(exc, FileNotFoundError):
                log.warning("cluster %s: cannot read %s (%s); the jobs come with the next console", self.node,
                            self._state_file, exc)

    def _save_declared(self) -> None:
        from ..contract.atomic import atomic_write_json
        atomic_write_json(self._state_file, {"fleet": self.fleet, "source": self.source, "former": self.former,
                                             "jobs": [s.to_dict() for s in self._declared.values()]}, mode=0o600)

    # ------------------------------------------------------------ what Slurm said, kept

    def _said_of(self, job: str) -> dict[int, SlurmSaid]:
        """What Slurm last said of each task of ``job`` (runs.SlurmSaid), read once per agent."""
        run = self._run(job)
        key = str(run)
        with self._lock:
            if key not in self._said:
                try:
                    self._said[key] = read_said(run)
                except (OSError, ValueError) as exc:
                    log.warning("cluster %s: what Slurm said of %s's tasks cannot be read (%s); the queue and the "
                                "attempts are all its rows have", self.node, job, exc)
                    self._said[key] = {}
            return self._said[key]

    def soon(self) -> None:
        """After an action: a few polls in the next seconds (bounded), then the usual pace."""
        now = time.monotonic()
        with self._lock:
            self._due = sorted(set(self._due) | {now + d for d in EXTRA_POLLS_S})
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def running_tasks(self) -> dict[str, tuple[str, str]]:
        """The tasks running now, to observe: task name -> (raw Slurm id, compute node)."""
        with self._lock:
            rows = dict(self.rows)
        return {task_name(job, index): (row.raw, row.node) for (job, index), row in rows.items()
                if row.state == "RUNNING" and row.node}

    def observer_argv(self, raw: str, node: str) -> list[str]:
        """The observer step beside task ``raw`` on ``node`` (agents/cluster/observe.py)."""
        python = self.task_python(JobSpec(name="observer", command=["true"]))
        argv = ["srun", "--overlap", "--jobid", raw, "-w", node, "--nodes=1", "--ntasks=1", "--quiet",
                "--mem=0", python, "-m", "gpudeck.agents", "--observe", "--node", node,
                "--interval", str(OBSERVER_INTERVAL_S), "--home", str(self.home)]
        if self.spec.simulate_gpus:
            argv += ["--simulate-gpus", self.spec.simulate_gpus]
        return argv

    def _run(self, job: str) -> Path:
        return run_dir(self.spec.shared_dir, self.fleet, job)

    def _attempts(self, job: str, index: int) -> Attempts:
        return read_attempts(self._run(job) / "attempts" / f"{index}.jsonl")

    def audit(self, action: AuditAction, job: Optional[str], details: Optional[dict[str, Any]] = None,
              **kw: Any) -> None:
        self._audit.write(action, job, details, **kw)

    def on_audit(self, hook: Optional[AuditHook]) -> None:
        self._audit.on_audit(hook)

    def _spec(self, job: str) -> JobSpec:
        spec = self._declared.get(job)
        if spec is None:
            known = ", ".join(self._declared) or "none"
            raise Refusal(f"unknown job {job!r} on cluster {self.node} (its jobs: {known})")  # asking again won't help
        return spec

    def _task(self, name: str) -> tuple[JobSpec, Optional[int]]:
        job, index = split_task(name)
        spec = self._spec(job)
        if index is not None and not 0 <= index < spec.shards:
            raise Refusal(f"{name!r}: job {job!r} has tasks 0 to {spec.shards - 1}")
        return spec, index

    # -- the python a task runs (its sbatch and its observer step)

    def task_python(self, spec: JobSpec) -> str:
        venv = Path(os.path.expanduser(self.spec.venv)) / "bin" / "python"
        return spec.python or self.spec.python or (str(venv) if venv.exists() else sys.executable)
