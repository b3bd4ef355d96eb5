"""Slurm through its command-line tools: one formatted ``squeue`` per poll, ``scontrol -d`` once
per task when it starts running, ``scontrol show config`` once; ``sbatch``, ``scancel`` and
``scontrol requeue`` for the actions.

Facts this module is written against (Slurm 22.05; tests/support/slurm.py starts one):

- ``squeue --json`` ignores ``-j`` and ``-u`` there, so the listing is formatted text.
- scancel and requeue take an array task as ``A_T``; ``scancel <raw id of a task>`` says
  "Invalid job id specified" and **exits 0** while the task runs on, and the array's own id is
  reused by its last task, so ``scancel <that id>`` cancels the whole array. srun takes the raw
  id. scancel's exit status is never trusted: the state is read back.
- ``scontrol -d -o show job RAW`` gives the node's GPU indices, ``GRES=gpu:1(IDX:0-1,3)``. Under
  ``ConstrainDevices=yes`` the job itself sees ``CUDA_VISIBLE_DEVICES=0`` for GPU 2: GPUs are
  mapped by IDX, never by the job's own CUDA index.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Optional

from ..contract.cluster import ClusterSpec, slurm_seconds

SQUEUE_FORMAT = "%i|%A|%K|%T|%r|%N|%b|%M|%l|%e|%j"  # %e: a finished task's end (its time, once it leaves)
TERMINAL = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
                      "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED"})
COMMAND_TIMEOUT_S = 60.0

# a pending task's reason in one line (squeue's %r); the others are shown as Slurm says them
REASONS = {
    "JobArrayTaskLimit": "waits: max_running tasks of this job already run",
    "Resources": "waits for free resources (GPUs, CPUs or memory)",
    "Priority": "waits behind jobs of higher priority",
    "BeginTime": "requeued: Slurm holds it until its begin time (about 2 minutes after a requeue)",
    "Dependency": "waits for the jobs it depends on",
    "DependencyNeverSatisfied": "its dependency can never be met: it will never start",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "PartitionTimeLimit": "its time is longer than the partition allows",
    "PartitionNodeLimit": "it asks more nodes than the partition allows",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "QOSMaxJobsPerUserLimit": "the QOS's limit of jobs per user is reached",
    "QOSMaxGRESPerUser": "the QOS's limit of GPUs per user is reached",
    "AssocGrpGRES": "the account's GPU limit is reached",
    "AssocMaxJobsLimit": "the account's job limit is reached",
    "JobHeldUser": "held by its user (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "launch_failed_requeued_held": "its launch failed; Slurm requeued and held it",
    "NodeDown": "its node went down",
    "Reservation": "waits for its reservation",
    "None": "",
}


class SlurmError(Exception):
    """A Slurm command failed; the message carries the command's own words."""


@dataclass(frozen=True)
class QueueRow:
    """One line of ``squeue -r``: one array task."""

    id: str  # %i: A_T
    raw: str  # %A: the raw job id (a pending task's is the array's)
    index: Optional[int]  # %K: the array task id; None for a job that is not an array
    state: str
    reason: str
    node: Optional[str]
    gres: Optional[str]
    elapsed_s: Optional[float]
    limit_s: Optional[float]
    name: str
    ended_at: Optional[float] = None  # %e of a finished task (unix time); None while it runs or waits

    @property
    def array_id(self) -> str:
        return self.id.split("_", 1)[0]

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


@dataclass(frozen=True)
class TaskDetail:
    """``scontrol -d -o show job RAW`` of one task."""

    raw: str
    state: Optional[str] = None
    gpus: list[int] = field(default_factory=list)  # node indices (IDX)
    node: Optional[str] = None
    restarts: int = 0
    exit_code: Optional[str] = None
    array_id: Optional[str] = None
    index: Optional[int] = None


def parse_idx(text: Optional[str]) -> list[int]:
    """``"0-1,3"`` -> [0, 1, 3]; ``"N/A"``, "" or None -> []."""
    if not text or text.strip().upper() in ("N/A", "NONE", "(NULL)"):
        return []
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"GPU indices {text!r}: expected a list such as 0-1,3")
        out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    return out


def parse_squeue(text: str) -> list[QueueRow]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 10)
        if len(parts) != 11:
            continue  # not ours: a line of another format (a site's wrapper printing a banner)
        i, raw, index, state, reason, node, gres, elapsed, limit, end, name = (p.strip() for p in parts)
        rows.append(QueueRow(id=i, raw=raw, index=int(index) if index.isdigit() else None, state=state,
                             reason=reason, node=node if node and node not in ("(null)", "N/A") else None,
                             gres=None if gres in ("N/A", "(null)", "") else gres,
                             elapsed_s=_seconds(elapsed), limit_s=_seconds(limit), name=name,
                             ended_at=parse_time(end) if state in TERMINAL else None))
    return rows


def parse_time(text: str) -> Optional[float]:
    """Slurm's timestamp (``2026-12-04T23:04:43``, the controller's local time) as unix time;
    None for "Unknown", "N/A", "NONE" or another format (a site's SLURM_TIME_FORMAT)."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _seconds(text: str) -> Optional[float]:
    try:
        return slurm_seconds(text)
    except ValueError:
        return None


_GRES_IDX = re.compile(r"(?<![A-Za-z_])GRES=\S*?\(IDX:([^)]*)\)")


def _field(line: str, key: str) -> Optional[str]:
    m = re.search(rf"(?:^|\s){key}=(\S*)", line)
    return m.group(1) if m else None


def parse_job_detail(text: str) -> list[TaskDetail]:
    """Each line of ``scontrol -d -o show job``: a task and the GPU indices it holds."""
    out = []
    for line in text.splitlines():
        raw = _field(line, "JobId")
        if not raw:
            continue
        gpus: list[int] = []
        for m in _GRES_IDX.finditer(line):
            gpus += parse_idx(m.group(1))
        restarts = _field(line, "Restarts")
        index = _field(line, "ArrayTaskId")
        node = _field(line, "NodeList")
        out.append(TaskDetail(raw=raw, state=_field(line, "JobState"), gpus=sorted(set(gpus)),
                              node=node if node and node != "(null)" else None,
                              restarts=int(restarts) if restarts and restarts.isdigit() else 0,
                              exit_code=_field(line, "ExitCode"), array_id=_field(line, "ArrayJobId"),
                              index=int(index) if index and index.isdigit() else None))
    return out


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config``: ``Key = value`` lines."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


class Slurm:
    """The Slurm commands, run with the cluster's environment; counts its squeue calls."""

    CONFIG_KEYS = ("ProctrackType", "MinJobAge", "KillWait", "MaxArraySize", "JobRequeue", "SLURM_VERSION",
                   "AccountingStorageType")

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.env = {**os.environ, **spec.env}
        self.squeue_calls = 0
        self.calls: dict[str, int] = {}
        self._config: Optional[dict[str, str]] = None

    def missing(self) -> Optional[str]:
        """Why this host cannot be the cluster's login, or None."""
        path = self.env.get("PATH")
        for tool in ("squeue", "sbatch", "scancel", "scontrol"):
            if shutil.which(tool, path=path) is None:
                return (f"no {tool!r} on this host's PATH: is it a Slurm login node? (cluster "
                        f"{self.spec.name!r}, login {self.spec.login!r})")
        return None

    def run(self, argv: list[str], check: bool = True, timeout: float = COMMAND_TIMEOUT_S
            ) -> subprocess.CompletedProcess[str]:
        self.calls[argv[0]] = self.calls.get(argv[0], 0) + 1
        if argv[0] == "squeue":
            self.squeue_calls += 1
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise SlurmError(f"no {argv[0]!r} on this host: is it a Slurm login node?") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{argv[0]} did not answer within {timeout:.0f} s (is slurmctld up?)") from None
        if check and proc.returncode != 0:
            raise SlurmError(_said(proc) or f"{argv[0]} exited with code {proc.returncode}")
        return proc

    # ------------------------------------------------------------ reading

    def config(self) -> dict[str, str]:
        """``scontrol show config``, read once."""
        if self._config is None:
            full = parse_config(self.run(["scontrol", "show", "config"]).stdout)
            self._config = {k: full[k] for k in self.CONFIG_KEYS if k in full}
        return self._config

    def seconds_of(self, key: str, default: float) -> float:
        value = self.config().get(key, "")
        m = re.match(r"(\d+)", value)
        return float(m.group(1)) if m else default

    def queue(self) -> list[QueueRow]:
        """Every task of this user, finished ones too (until MinJobAge): one squeue call."""
        out = self.run(["squeue", "--me", "-h", "-r", "-t", "all", "-o", SQUEUE_FORMAT]).stdout
        return parse_squeue(out)

    def detail(self, raw: str) -> Optional[TaskDetail]:
        proc = self.run(["scontrol", "-d", "-o", "show", "job", raw], check=False)
        if proc.returncode != 0:
            return None
        for d in parse_job_detail(proc.stdout):
            if d.raw == raw:
                return d
        return None

    def state_of(self, task_id: str) -> Optional[str]:
        """One task's state (``A_T``), by scontrol: None when Slurm no longer knows it."""
        proc = self.run(["scontrol", "-o", "show", "job", task_id], check=False)
        if proc.returncode != 0:
            return None
        return _field(proc.stdout.splitlines()[0], "JobState") if proc.stdout.strip() else None

    def host_of(self, node: str) -> Optional[str]:
        proc = self.run(["scontrol", "-o", "show", "node", node], check=False)
        return _field(proc.stdout, "NodeHostName") if proc.returncode == 0 else None

    # ------------------------------------------------------------ acting

    def submit(self, argv: list[str], test_only: bool = False) -> str:
        """``sbatch --parsable ARGV``: the array's id. ``test_only``: ``--test-only`` first,
        which catches a request no node can meet, with sbatch's own words."""
        if test_only:
            self.run(["sbatch", "--test-only", *argv])
        out = self.run(["sbatch", "--parsable", *argv]).stdout.strip()
        job_id = out.split(";", 1)[0].strip()
        if not job_id.isdigit():
            raise SlurmError(f"sbatch answered {out!r}, not a job id")
        return job_id

    def cancel(self, task_id: str) -> subprocess.CompletedProcess[str]:
        """``scancel A_T``. Its exit status says nothing (it exits 0 on an invalid id): the
        caller reads the state back."""
        if "_" not in task_id:
            raise ValueError(f"scancel takes an array task as A_T, got {task_id!r}")
        return self.run(["scancel", task_id], check=False)

    def requeue(self, task_id: str) -> None:
        """``scontrol requeue A_T``, then ``StartTime=now``: without it a requeued task waits
        about two minutes (BeginTime)."""
        self.run(["scontrol", "requeue", task_id])
        self.run(["scontrol", "update", f"jobid={task_id}", "StartTime=now"], check=False)


_INPUT_MISTAKES = ("invalid partition", "requested node configuration is not available", "invalid --time",
                   "invalid account", "invalid qos", "invalid generic resource", "invalid feature specification",
                   "more processors requested than permitted", "memory specification can not be satisfied",
                   "invalid gres", "invalid --mem")


def refused_for_input(said: str) -> bool:
    """sbatch's refusal is about what was asked (exit 2), not a failing controller."""
    low = said.lower()
    return any(m in low for m in _INPUT_MISTAKES)


def newer(a: QueueRow, b: QueueRow) -> bool:
    """Whether ``a`` is a later row of the same task than ``b`` (a later array, or the one still alive)."""
    def key(r: QueueRow) -> tuple[int, int]:
        return (int(r.array_id) if r.array_id.isdigit() else 0, 0 if r.terminal else 1)
    return key(a) > key(b)


def _said(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln.strip() for ln in (proc.stderr or "").splitlines() + (proc.stdout or "").splitlines() if ln.strip()]
    return " / ".join(lines[-3:])

