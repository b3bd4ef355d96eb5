"""The jobs of a cluster, for the agent on its login node (``python -m gpudeck.agents
--cluster SPEC``): the second backend (jobs/backend.py JobBackend) beside the node's own
supervisor. The agent is the node agent of agents/node/agent.py (the same hello, links, relays for a
second console, ops table); its jobs are the cluster's:

- one ``squeue`` per ``poll_s``, plus a few soon after an action, shared by every console (a
  second console relays through this agent, as on a node);
- ``scontrol -d`` once per task when it starts running (its GPUs by IDX), ``scontrol show
  config`` once;
- a row per task (``extract/7``), from the queue while Slurm knows the task and after from the
  newest of the wrapper's attempts file, the last state Slurm gave it and gpudeck's own kill
  verdict (agents/cluster/runs.py): nothing is shown as finished without evidence, and a task
  cancelled before it ran reads ``cancelled``, never ``pending``;
- launch is ``sbatch`` of an array, kill is ``scancel A_T`` and then proof by the GPUs' own
  reading, relaunch is a requeue (or a resubmission once Slurm forgot the task), logs are read
  from the shared filesystem;
- an observer step beside each running task (agents/cluster/observe.py), every one on this
  agent's own pipes, so a dozen observed tasks still take one SSH channel.

gpudeck never schedules here: no GPU is chosen, no allocation held, no work runs as a child of
this agent.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from pathlib import Path
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Optional

from ..contract import ops, plain
from ..contract.errors import Refusal
from ..contract.cluster import split_task, task_name
from ..contract.jobs import JobKind, JobSpec
from ..contract.vocab import JobState
from ..contract.wire import ClusterInfo, JobStatus, KillVerdict, LogChunk, Progress, TaskInfo
from ..sense.progress import ProgressTracker
from ..jobs.backend import Contained, Extras, GpusSeen, JobError, JobFacts
from ..jobs import joblog
from ..sense import writes
from .runs import Attempts, SlurmSaid
from .slurm import REASONS, TERMINAL, QueueRow
from .core import (EXTRA_POLLS_S, OBSERVER_DELAY_S, OBSERVER_INTERVAL_S, REQUEUE_SIGNAL_S, ClusterCore, _clock,
                   fleet_name, job_state)
from .kills import ClusterKills

# the layers of ClusterJobs, each over the one before: core.py (state, declared jobs, run dirs),
# polling.py (squeue, what Slurm said), submit.py (sbatch), kills.py (scancel with proof, requeue)
__all__ = ["ClusterJobs", "ClusterCore", "job_state", "fleet_name", "EXTRA_POLLS_S", "OBSERVER_DELAY_S",
           "OBSERVER_INTERVAL_S", "REQUEUE_SIGNAL_S"]

log = logging.getLogger("agents")


class ClusterJobs(ClusterKills):
    """A cluster's jobs (jobs/backend.py JobBackend): each an array of tasks that Slurm runs
    on its compute nodes; ``gpu`` reads the GPUs of the login node (where a test runs its
    tasks, its kills are proved by them)."""

    def task_names(self) -> list[tuple[str, int]]:
        out = [(name, i) for name, spec in self._declared.items() for i in range(spec.shards)]
        return out + sorted({k for k in self.rows if k[0] not in self._declared})

    def refresh(self) -> None:
        if self.polls == 0 and self.poll_error is None and not self.setup_error:
            self.poll()  # the first answer waits for the queue: a task is never shown lost for want of a poll

    def statuses(self, now: float, for_console: bool, extras: Optional[Extras] = None) -> list[JobStatus]:
        """A row per task. ``extras`` is not asked: a task's progress is in its run directory,
        and its engine, restarts and chaining are the scheduler's."""
        with self._lock:
            rows = dict(self.rows)
        jobs = []
        for job, index in self.task_names():
            try:
                jobs.append(self._task_status(job, index, rows.get((job, index)), now))
            except Exception as exc:  # noqa: BLE001 -- one task must never blind the cluster
                log.warning("task %s cannot be read: %s", task_name(job, index), exc)
                jobs.append(JobStatus(name=task_name(job, index), kind=JobKind.COMMAND, state=JobState.PENDING,
                                      error=f"{type(exc).__name__}: {exc}"))
        self._seen = {j.name: j for j in jobs}
        return jobs

    def read_gpus(self, jobs: list[JobStatus]) -> GpusSeen:
        """The compute nodes' GPUs, as their observers read them beside the running tasks."""
        return GpusSeen(self.observers.gpus(jobs), None, self.gpu.simulated)

    def disk_paths(self) -> list[str]:
        return [str(self.home), os.path.expanduser(self.spec.shared_dir)]

    def cluster_info(self) -> Optional[ClusterInfo]:
        config = self.slurm._config or {}
        return ClusterInfo(kind=self.spec.kind, login=self.spec.login, partition=self.spec.partition,
                           poll_s=self.spec.poll_s, polls=self.polls, polled_at=self.polled_at, poll_ms=self.poll_ms,
                           config=dict(config), observers=len(self.observers.procs), error=self.poll_error,
                           setup_error=self.setup_error)

    # ------------------------------------------------------------ what is known (jobs/backend.py)

    def names(self) -> list[str]:
        return sorted(self._declared)

    def declared(self) -> Mapping[str, JobSpec]:
        return MappingProxyType(self._declared)

    def spec_of(self, name: str) -> Optional[JobSpec]:
        """The spec of a job, or of the job a task (``extract/7``) is one of."""
        return self._declared.get(split_task(name)[0])

    def knows(self, name: str) -> bool:
        try:
            self._task(name)
        except Refusal:
            return False
        return True

    def facts(self, name: str) -> Optional[JobFacts]:
        """A task's state as the last rows showed it; a job's, from its tasks: alive while one
        runs, exited once all exited, else as its first task that did not."""
        seen = self._seen.get(name)
        if seen is not None:
            return JobFacts(name=name, state=seen.state, attempt=seen.attempt, exit_code=seen.exit_code,
                            started_at=seen.started_at, ended_at=seen.ended_at)
        spec = self._declared.get(name)
        tasks = [t for i in range(spec.shards) if (t := self._seen.get(task_name(name, i))) is not None] if spec else []
        if not tasks:
            return None
        live = [t for t in tasks if t.state.alive]
        bad = [t for t in tasks if t.state is not JobState.EXITED]
        one = live[0] if live else bad[0] if bad else tasks[0]
        return JobFacts(name=name, state=one.state, attempt=max(t.attempt for t in tasks), exit_code=one.exit_code,
                        started_at=min((t.started_at for t in tasks if t.started_at), default=None),
                        ended_at=None if live or bad else max((t.ended_at or 0 for t in tasks), default=None))

    def owner_of(self, pid: int) -> Optional[str]:
        return None  # the tasks' processes are on the compute nodes: their observers name them

    def workdir(self, name: str) -> Path:
        """sbatch's own: a task runs where the agent submitted it unless its spec names a cwd."""
        return Path.cwd()

    def containment(self) -> Optional[Contained]:
        return None  # Slurm contains each task (its proctrack plugin), on its compute node

    # ------------------------------------------------------------ for the watcher

    def set_blocked(self, name: str, blocked: bool) -> None:
        """Nothing to keep: Slurm holds a job that runs after another (--dependency=afterok)."""

    def _note(self, name: str, note: str) -> Path:
        return self.home / "jobs" / name / note

    def read_note(self, name: str, note: str) -> Optional[dict[str, Any]]:
        try:
            doc = json.loads(self._note(name, note).read_text())
        except FileNotFoundError:
            return None
        if not isinstance(doc, dict):
            raise ValueError(f"{self._note(name, note)}: not a JSON object")
        return doc

    def write_note(self, name: str, note: str, doc: dict[str, Any]) -> None:
        from ..contract.atomic import atomic_write_json
        path = self._note(name, note)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic_write_json(path, doc, fsync=False)
        except OSError as exc:
            writes.failed(path, exc)
        else:
            writes.ok(path)

    def _progress(self, name: str, path: Path, spec: Optional[JobSpec], now: float, alive: bool
                  ) -> Optional[Progress]:
        key = str(path)
        cur = self._trackers.get(name)
        if cur is None or cur[0] != key:
            cur = self._trackers[name] = (key, ProgressTracker(key, None, None))
        progress = cur[1].poll(now)
        if progress is not None and not alive:
            progress = dataclasses.replace(progress, tokens_per_s=None, rate_per_s=None, eta_s=None)
        return progress

    def _task_status(self, job: str, index: int, row: Optional[QueueRow], now: float) -> JobStatus:
        spec = self._declared.get(job)
        name = task_name(job, index)
        att = self._attempts(job, index)
        run = self._run(job)
        note = None
        source = "squeue"
        exit_code = att.exit_code if att.ended_at else None
        said = self._said_of(job).get(index)
        verdict = self._last_kill(name, run, index)
        ended_at = att.ended_at
        last = None if row is not None else self._last_word(said, verdict, att)
        if row is not None:
            state = job_state(row.state)
            if row.state == "COMPLETED" and att.starts and att.ended_at is None:
                state = JobState.LOST  # Slurm says completed, the wrapper wrote no end: no evidence
                note = "Slurm says COMPLETED but the wrapper recorded no end"
            elif row.state == "COMPLETED" and exit_code not in (None, 0):
                state = JobState.FAILED
            elif row.state == "CANCELLED":
                state, ended_at = self._cancelled(row, said, verdict)
        elif last is not None:
            state, ended_at, note = last
            source = "kept"  # Slurm no longer lists it: its last word (or gpudeck's scancel verdict), with its time
        elif att.starts:
            source = "attempts"  # Slurm forgot it (MinJobAge): the wrapper's file is the evidence
            state, note = _state_from_attempts(att, exit_code)
        else:
            state = JobState.PENDING
            note = "not submitted"
        if att.requeued_at and note is None:
            note = _requeue_note(att, state)
        detail = self.details.get(row.raw) if row is not None else None
        gpus = list(detail.gpus) if detail is not None else []
        if not gpus and state.alive:  # Slurm's record has none: what the wrapper saw at its start
            gpus = _wrapper_gpus(att)
        alive = state.alive
        progress = self._progress(name, run / "progress" / f"{index}.json", spec, now, alive)
        observed = self.observers.latest.get(name)
        uuids = []
        if observed is not None:
            by_index = {g.index: g for g in observed.gpus}
            uuids = [by_index[i].uuid for i in gpus if i in by_index]
        waiting = row is not None and not row.terminal and row.reason != "None"  # a finished record keeps a stale reason
        info = TaskInfo(job=job, index=index, job_id=row.raw if row else att.job_id,
                        array_id=row.array_id if row else (said.array_id if last and said else att.array_id),
                        host=row.node if row else att.host,
                        scheduler_state=row.state if row else None, reason=row.reason if row and waiting else None,
                        reason_text=REASONS.get(row.reason) if row and waiting else None,
                        restarts=detail.restarts if detail else att.restart, elapsed_s=row.elapsed_s if row else None,
                        limit_s=row.limit_s if row else None, note=note, source=source,
                        observed=observed is not None)
        return JobStatus(
            name=name, kind=spec.kind if spec else JobKind.COMMAND, state=state, gpus=gpus, gpu_uuids=uuids,
            attempt=att.starts, exit_code=exit_code if not alive else None,
            started_at=att.started_at, ended_at=ended_at if not alive else None, progress=progress,
            log_path=str(run / "logs" / f"{index}.log"), last_kill=verdict,
            fleet=self.fleet_identity or None, task=info)

    @staticmethod
    def _cancelled(row: QueueRow, said: Optional[SlurmSaid], verdict: Optional[KillVerdict]
                   ) -> tuple[JobState, Optional[float]]:
        """A CANCELLED record: ``killed`` if the task ran, ``cancelled`` if it was cancelled while it
        waited, and when. gpudeck's own scancel verdict knows; else what the agent saw before (a
        requeued task keeps its node in squeue, so the node does not tell)."""
        if verdict is not None and verdict.state is not None and verdict.at is not None and \
                (row.ended_at is None or verdict.at + 1.0 >= row.ended_at):  # %e is whole seconds
            return verdict.state, verdict.at
        ran = said.ran if said is not None and said.array_id == row.array_id and said.state == "CANCELLED" else \
            (row.elapsed_s or 0) > 0
        return (JobState.KILLED if ran else JobState.CANCELLED), row.ended_at

    def _last_word(self, said: Optional[SlurmSaid], verdict: Optional[KillVerdict], att: Attempts
                   ) -> Optional[tuple[JobState, Optional[float], str]]:
        """The state of a task Slurm no longer lists, from the newest of what Slurm last said of it
        and gpudeck's own kill verdict, with its time and where it comes from; None when the
        wrapper's attempts file is newer (or that is all there is)."""
        said_when: list[tuple[float, JobState, str]] = []
        if verdict is not None and verdict.state is not None and verdict.at is not None:
            how = "cancelled by gpudeck (scancel) before it ran" if verdict.state is JobState.CANCELLED else \
                "killed by gpudeck (scancel)"
            said_when.append((verdict.at, verdict.state, f"{how} at {_clock(verdict.at)}; Slurm no longer lists it"))
        if said is not None and said.gone:
            said_when.append((said.at, JobState.CANCELLED, f"cancelled outside gpudeck before it ran: found gone from "
                                                           f"its array's pending record at {_clock(said.at)}, the "
                                                           f"array still listed; Slurm keeps no record of it"))
        elif said is not None and said.state in TERMINAL and (said.state == "CANCELLED" or
                                                              att.array_id != said.array_id):
            state = (JobState.KILLED if said.ran else JobState.CANCELLED) if said.state == "CANCELLED" else \
                job_state(said.state)
            said_when.append((said.at, state, f"Slurm said {said.state} at {_clock(said.at)}"
                                              f"{'' if said.ran else ', before it ran'}; it no longer lists it"))
        elif said is not None and job_state(said.state) is JobState.PENDING:
            if self.polled_at is not None:
                said_when.append((said.at, JobState.LOST, f"Slurm listed it {said.state} (since {_clock(said.at)}), "
                                                          f"then no more, and keeps no record of how it left: "
                                                          f"cancelled outside gpudeck, or purged after MinJobAge"))
            else:
                said_when.append((said.at, JobState.PENDING, f"Slurm listed it {said.state} at {_clock(said.at)}; its "
                                                             f"queue cannot be read now"))
        if not said_when:
            return None
        at, state, note = max(said_when, key=lambda w: w[0])
        if att.starts and max(att.started_at or 0, att.ended_at or 0) > at:
            return None  # an attempt began or ended after it: the wrapper's record is the newer word
        return state, at, note

    def _last_kill(self, name: str, run: Path, index: int) -> Optional[KillVerdict]:
        if name not in self.kills:
            try:
                self.kills[name] = plain.from_dict(KillVerdict, json.loads((run / "kills" / f"{index}.json").read_text()))
            except (OSError, ValueError, plain.ProtocolError):
                return None
        return self.kills.get(name)

    # ------------------------------------------------------------ the ops

    def kill_pid(self, pid: int, grace_s: float = 10.0) -> KillVerdict:
        raise JobError(f"cluster {self.node}: a process is killed through its job (scancel), not by pid")

    def adopt(self, pid: int, name: str, started_at: Optional[float] = None, progress_file: Optional[str] = None,
              kind: str = JobKind.COMMAND.value) -> ops.Adopted:
        raise JobError(f"cluster {self.node}: a login node's processes are not adopted; Slurm runs the cluster's jobs")

    def configure(self, specs: list[JobSpec], fleet: str = "", take_over: bool = False, source: str = "",
                  reading: bool = False) -> ops.Configured:
        """The fleet file's jobs of this cluster; one fleet's at a time (``take_over`` and
        ``reading`` change nothing here: the queue is the fleet's by its job names)."""
        mine = [s for s in specs if s.cluster in (None, self.node)]
        with self._lock:
            changed = {s.name: ["the fleet file's spec"] for s in mine
                       if s.name in self._declared and self._declared[s.name] != s}
            news = {s.name: s for s in mine} != self._declared or fleet_name(fleet) != self.fleet
            self._declared = {s.name: s for s in mine}
            if fleet:
                self.fleet_identity = fleet
                new = fleet_name(fleet)
                if new != self.fleet:
                    # the same file under another name (its [fleet] name given or changed): a rename,
                    # whose tasks stay found; another file's fleet: its own, and none of these
                    same = bool(self.fleet and source) and (
                        self.source == source if self.source else fleet_name(source) == self.fleet)
                    if same:
                        self._renamed(self.fleet, new)
                    else:
                        self.former = []
                    self.fleet = new
                    self.rows = {}  # polled again under the names now
                if source:
                    self.source = source
        try:
            self._save_declared()
        except OSError as exc:
            log.warning("cluster %s: cannot keep the jobs in %s: %s", self.node, self._state_file, exc)
        if news:  # a second console with the same fleet file costs no squeue
            self.soon()
        return ops.Configured(jobs=[s.name for s in mine], changed=changed)

    # -- logs

    def logs(self, name: str, lines: int = 100, offset: Optional[int] = None) -> LogChunk:
        spec, index = self._task(name)
        path = self._run(spec.name) / "logs" / f"{index if index is not None else 0}.log"
        return joblog.tail(name, path, lines) if offset is None else joblog.read_on(name, path, int(offset))


def _state_from_attempts(att: Attempts, exit_code: Optional[int]) -> tuple[JobState, Optional[str]]:
    """A task Slurm no longer lists (MinJobAge), from the wrapper's attempts file alone."""
    if att.ended_at is None:
        return JobState.LOST, ("left the queue with no end recorded (node failure, or killed before the wrapper "
                               "could write)")
    if att.why == "term":
        return JobState.KILLED, None
    if att.why == "usr1" and att.requeue_rc == 0:
        return JobState.PENDING, None
    return (JobState.EXITED if exit_code == 0 else JobState.FAILED), None


def _requeue_note(att: Attempts, state: JobState) -> Optional[str]:
    """What a task that requeued itself (SIGUSR1) says of it: waiting again, or a new attempt."""
    assert att.requeued_at is not None
    when = time.strftime("%H:%M:%S", time.localtime(att.requeued_at))
    why = "on SIGUSR1 (its time limit was near, or it was preempted)"
    if state is JobState.PENDING and (att.ended_at or 0) >= (att.started_at or 0):
        return (f"requeued itself at {when} {why}"
                + ("" if att.requeue_rc in (0, None) else f"; the requeue failed (exit {att.requeue_rc})"))
    if att.started_at and att.started_at > att.requeued_at:
        return f"attempt {att.starts} began after the task requeued itself at {when} {why}"
    return None


def _wrapper_gpus(att: Attempts) -> list[int]:
    """The GPUs the batch wrapper saw at its start (SLURM_JOB_GPUS), or none."""
    try:
        return [int(g) for g in att.gpus.split(",") if g.strip()] if att.gpus else []
    except ValueError:
        return []
