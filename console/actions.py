"""What the operator's job keys do, as data: no Textual here.

A screen says which job a key acts on (``target_job``) and posts the request; the app asks
``plan_job_action`` whether to refuse, to ask first or to act now, sends the request with
``request_options`` and tells the operator the outcome as a ``Notice``.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import Optional, Union

from rich.markup import escape

from ..agents.contract import ops
from ..agents.contract.errors import OperatorError
from ..agents.contract.ops import Acked
from ..agents.contract.wire import KillVerdict, LaunchResult
from ..agents.contract.vocab import AlertKind, ShownState
from .formatting import started_as
from .moving import MoveReport
from .rows import AlertRow, EventRow, FleetRow, GpuRow, JobRow, ProcRow
from ..remote.client import RequestFailed

# what a request to a node may end in that the operator is told (describe_error), not a bug
OPERATOR_ERRORS = (OperatorError, RequestFailed, asyncio.TimeoutError, OSError)


# the requests a job key sends to a job's node (a move sends several: moving.move_job)
JobRequest = Union[ops.Kill, ops.Relaunch, ops.Launch, ops.Ack]


class JobOp(str, enum.Enum):
    """What a job key asks of a job's node."""

    KILL = ops.Kill.name
    RELAUNCH = ops.Relaunch.name
    LAUNCH = ops.Launch.name
    ACK = ops.Ack.name  # a job that gave up, acknowledged: its gave_up clears; nothing starts
    MOVE = "move"  # not one op: a kill (or a fence) on the old node, a launch on the new (moving.py)

    def __str__(self) -> str:
        return self.value

    @classmethod
    def bound(cls, word: str) -> "JobOp":
        """The job op a key binding names (console/keymap.py: ``job('kill')``): Textual hands a
        binding's argument over as text, and this is the one place a job op is read from text."""
        try:
            return cls(word)
        except ValueError:
            raise ValueError(f"job({word!r}) in a key binding names no job op; the ops: "
                             f"{', '.join(o.value for o in cls)}") from None

    @property
    def request(self) -> Optional[type[JobRequest]]:
        """The contract's op this key sends (agents/contract/ops.py); None for a move, which is
        several (moving.move_job)."""
        return _REQUESTS.get(self)

    @property
    def key(self) -> str:
        """Its key, as the help shows it (console/keymap.py: ``job.kill`` is ctrl+k, as in k9s)."""
        from .keymap import key_of
        return key_of(f"job.{self.value}")

    @property
    def label(self) -> str:
        from .keymap import BY_ID
        return BY_ID[f"job.{self.value}"].label


JOB_OPS = (JobOp.KILL, JobOp.RELAUNCH, JobOp.LAUNCH, JobOp.MOVE, JobOp.ACK)  # in the palette's order
_REQUESTS: dict[JobOp, type[JobRequest]] = {JobOp.KILL: ops.Kill, JobOp.RELAUNCH: ops.Relaunch,
                                            JobOp.LAUNCH: ops.Launch, JobOp.ACK: ops.Ack}


# ---------------------------------------------------------------- which job a key acts on


def target_job(row: Union[JobRow, FleetRow, AlertRow, EventRow, None]) -> Optional[str]:
    """The job a key acts on when the cursor is on ``row``: a job's own row, a GPU one job
    holds, an alert or an event about a job; None for anything else."""
    if row is None:
        return None
    if isinstance(row, JobRow):
        return row.acts_on
    if isinstance(row, GpuRow):
        return row.jobs[0] if len(row.jobs) == 1 else None
    if isinstance(row, (AlertRow, ProcRow, EventRow)):
        return row.job
    return None


def target_process(row: Union[JobRow, FleetRow, AlertRow, None]) -> Optional[tuple[str, int]]:
    """(node, pid) of a GPU process that belongs to no job under the cursor: a GPU row that
    only such a process holds, or the alert about one; None otherwise."""
    if isinstance(row, GpuRow) and not row.jobs and len(row.unowned_pids) == 1:
        return row.node, row.unowned_pids[0]
    if isinstance(row, ProcRow) and row.job is None:
        return row.node, row.pid
    if isinstance(row, AlertRow) and row.kind == AlertKind.UNOWNED_GPU_PROCESS and row.pid is not None:
        return row.node, row.pid
    return None


# ---------------------------------------------------------------- asking first


@dataclass(frozen=True)
class Refuse:
    """Not done at all; ``message`` says why."""

    message: str


@dataclass(frozen=True)
class Confirm:
    """Destructive: ask first."""

    title: str
    question: str
    yes: str


@dataclass(frozen=True)
class RunNow:
    """Nothing to lose: send it."""


Plan = Union[Refuse, Confirm, RunNow]


def plan_job_action(op: JobOp, job: str, row: Optional[JobRow], *, read_only: bool, grace_s: float,
                    changes: tuple[str, ...] = (), dest: Optional[str] = None) -> Plan:
    """Kill, launch, move and ack always ask (a launch takes GPUs and starts spending); relaunch asks
    when the job runs (it is killed first) or when the fleet file changed since its last launch
    (``changes``: it runs the file's version). A move goes to ``dest``, the first free spare
    (moving.spare_for): without one it is refused, naming the command that takes any node."""
    if read_only:
        return Refuse(f"read-only: {op} is off (started with --read-only)")
    where = f" on {row.node}" if row else ""
    grace = f"{grace_s:g}"
    if op == JobOp.MOVE:
        if dest is None:
            return Refuse(f"no spare node is free for {job}: mark a node `spare = true` in the fleet file, or run "
                          f"`gpudeck move {job} --to NODE`")
        return Confirm(f"move {job}", f"Move job [b]{job}[/b]{where} to spare node [b]{dest}[/b]?\n\nIt is killed "
                                      f"and verified first (SIGTERM, SIGKILL after {grace} s), or fenced if its node "
                                      f"cannot be reached; then launched on {dest}, resuming from its output.", "Move")
    if op == JobOp.RELAUNCH and changes:
        lines = "\n".join(f"  {escape(c)}" for c in changes)
        killed = (f"It is running: it is killed first (SIGTERM, SIGKILL after {grace} s).\n\n"
                  if row is not None and row.alive else "")
        return Confirm(f"{op} {job}", f"The fleet file changed since [b]{job}[/b]{where} last launched:\n{lines}\n\n"
                                      f"{killed}Relaunch it with the fleet file's version?", "Relaunch")
    if op == JobOp.ACK:
        return Confirm(f"acknowledge {job}", f"Acknowledge that job [b]{job}[/b]{where} gave up?\n\nIts gave_up "
                                             f"alert clears and the heartbeat's plain ping comes back at its next "
                                             f"beat. Nothing is started (r relaunches it).", "Acknowledge")
    if row is not None and row.task_id is not None and op in (JobOp.KILL, JobOp.RELAUNCH):
        return _plan_task_action(op, job, row)
    if op == JobOp.KILL:
        return Confirm(f"{op} {job}", f"Kill job [b]{job}[/b]{where}?\n\nSIGTERM to its process group, SIGKILL after "
                                      f"{grace} s, then a check that its processes are gone and its GPU memory came "
                                      f"back.", "Kill")
    if op == JobOp.RELAUNCH and row is not None and row.alive:
        return Confirm(f"{op} {job}", f"Relaunch job [b]{job}[/b]{where}?\n\nIt is running: it is killed first "
                                      f"(SIGTERM, SIGKILL after {grace} s), then started again as attempt "
                                      f"{row.attempt + 1} with the same spec.", "Relaunch")
    if op == JobOp.LAUNCH:
        attempt = f" as attempt {row.attempt + 1}" if row is not None else ""
        gpus = f" on GPU {', '.join(map(str, row.gpus))}" if row is not None and row.gpus else ""
        return Confirm(f"{op} {job}", f"Launch job [b]{job}[/b]{where}?\n\nIt starts{attempt}{gpus} with its spec from "
                                      f"the fleet file.", "Launch")
    return RunNow()


def _plan_task_action(op: JobOp, job: str, row: JobRow) -> Plan:
    """A Slurm task: the kill is Slurm's (``scancel A_T``: its own signals and KillWait), not a
    signal gpudeck sends; a relaunch is a requeue."""
    where = f" (Slurm {row.task_id}) on {row.node}"
    if op == JobOp.KILL:
        how = ("It waits in Slurm's queue: it is cancelled before it runs." if row.state == ShownState.QUEUED else
               "Slurm stops it (SIGTERM, then SIGKILL after the cluster's KillWait); then a check that its GPUs' "
               "memory came back.")
        return Confirm(f"{op} {job}", f"Cancel task [b]{job}[/b]{where}?\n\n`scancel {row.task_id}`. {how}",
                       "Cancel it")
    first = (f"It is running: it is cancelled first (`scancel {row.task_id}`), then " if row.alive else "It is ")
    return Confirm(f"{op} {job}", f"Relaunch task [b]{job}[/b]{where}?\n\n{first}requeued "
                                  f"(`scontrol requeue {row.task_id}`), or submitted again if Slurm has forgotten "
                                  f"it, as attempt {row.attempt + 1}.", "Relaunch")


def plan_process_kill(node: str, pid: int, *, read_only: bool, grace_s: float) -> Union[Refuse, Confirm]:
    """A GPU process of no job: always ask first; never in read-only mode."""
    if read_only:
        return Refuse("read-only: kill is off (started with --read-only)")
    return Confirm(f"kill pid {pid}", f"Kill process [b]{pid}[/b] on {node}? It holds GPU memory and belongs to no "
                                      f"job.\n\nSIGTERM, SIGKILL after {grace_s:g} s, then a check that it is gone "
                                      f"and its GPU memory came back. The node's audit log keeps it.", "Kill")


ADOPT_KEY = "a"  # on a GPU process of no job: adopt it as a job (MainScreen's binding, the help screen)


def adopt_name(pid: int, command: Optional[str]) -> str:
    """The job name the console gives a process it adopts: its program's name and its pid
    (``python3-4242``); `gpudeck adopt --as NAME` chooses another."""
    import os
    import re

    word = (command or "").split(" ", 1)[0]
    base = re.sub(r"[^A-Za-z0-9._-]", "", os.path.basename(word))[:40].lstrip("._-")
    return f"{base}-{pid}" if base else f"pid-{pid}"


def plan_process_adopt(node: str, pid: int, name: str, command: Optional[str], *,
                       read_only: bool) -> Union[Refuse, Confirm]:
    """A GPU process of no job, made the job ``name``: asks first; never in read-only mode."""
    if read_only:
        return Refuse("read-only: adopt is off (started with --read-only)")
    what = f" ({escape(command[:80])})" if command else ""
    return Confirm(f"adopt pid {pid}", f"Adopt process [b]{pid}[/b]{what} on {node} as job [b]{escape(name)}[/b]?\n\n"
                                       f"Its command line, working directory, environment and GPUs are recorded: "
                                       f"then ctrl+k kills it with verification, and r starts the same command again, "
                                       f"contained. (gpudeck adopt --as NAME names it otherwise.)", "Adopt")


def job_request(op: JobOp, job: str, grace_s: float) -> JobRequest:
    """The request a job key sends (``op.request``): a kill and a relaunch wait out ``grace_s``.
    A move is several requests (moving.move_job): ValueError."""
    if op is JobOp.KILL:
        return ops.Kill(job=job, grace_s=grace_s)
    if op is JobOp.RELAUNCH:
        return ops.Relaunch(job=job, grace_s=grace_s)
    if op is JobOp.ACK:
        return ops.Ack(job=job)
    if op is JobOp.LAUNCH:
        return ops.Launch(job=job)
    raise ValueError(f"{op} of {job} is no one request: moving.move_job sends a move's")


# ---------------------------------------------------------------- telling the outcome


@dataclass(frozen=True)
class Notice:
    """A notification for the operator."""

    text: str
    title: Optional[str] = None
    severity: str = "information"  # information | warning | error
    timeout: float = 3.0


# what a job action's request answered: a kill's verdict, a launch's attempt, an acknowledgement,
# or what a move did
JobOutcome = Union[KillVerdict, LaunchResult, Acked, MoveReport]


def outcome_notice(op: JobOp, job: str, result: JobOutcome) -> Notice:
    """What the node answered: the kill's verdict, the attempt and pid that started, or what a
    move did (a moving.MoveReport: one line a step)."""
    if isinstance(result, MoveReport):  # only a move answers one
        return Notice("\n".join(result.lines), f"moved {job} to {result.dest}", "information", 15)
    if isinstance(result, Acked):
        return Notice(result.message, f"acknowledged {job}" if result.cleared else f"{job} acknowledged already",
                      "information", 15)
    if isinstance(result, KillVerdict):
        return Notice(result.message, f"killed {job}" if result.ok else f"kill of {job} incomplete",
                      "information" if result.ok else "error", 15)
    text = f"attempt {result.attempt}, {started_as(result)}"
    if result.kill is not None:
        text = f"killed first: {result.kill.message}\n{text}"
    return Notice(text, f"{op}ed {job}", "information", 15)


def failure_notice(op: JobOp, job: str, error: str) -> Notice:
    return Notice(error, f"{op} {job} failed", "error", 20)


def no_target_notice(op: JobOp) -> Notice:
    return Notice(f"select a job to {op} first (in the jobs view, or a GPU a job holds)", severity="warning",
                  timeout=4)


def describe_error(exc: BaseException) -> str:
    """What the operator reads: the node, and what went wrong there."""
    if isinstance(exc, RequestFailed):
        return f"node {exc.node}: {exc}"
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__
