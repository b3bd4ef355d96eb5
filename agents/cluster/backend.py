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

import asyncio
import dataclasses
import json
import logging
import os
import shlex
import socket
import sys
import threading
import time
from pathlib import Path
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Optional, cast

from ..contract import ops, plain
from ..contract.errors import Refusal
from ..contract.cluster import ClusterSpec, slurm_job_name, split_task, task_name
from ..contract.jobs import JobKind, JobSpec
from ..contract.units import index_ranges
from ..contract.vocab import AuditAction, JobState
from ..contract.wire import ClusterInfo, GpuHolder, JobStatus, KillVerdict, LaunchResult, LogChunk, Progress, TaskInfo
from ..sense.progress import ProgressTracker
from ..jobs.audit import AuditLog
from ..jobs.backend import AuditHook, Contained, Extras, GpuReader, GpusSeen, JobError, JobFacts
from ..jobs import joblog
from ..sense import writes
from .runs import TASK_TOKEN, Attempts, SlurmSaid, install_wrapper, read_attempts, read_said, run_dir, write_said
from .observe import Observers
from .slurm import REASONS, TERMINAL, QueueRow, Slurm, SlurmError, TaskDetail, newer, refused_for_input

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


class ClusterJobs:
    """A cluster's jobs (jobs/backend.py JobBackend): each an array of tasks that Slurm runs
    on its compute nodes; ``gpu`` reads the GPUs of the login node (where a test runs its
    tasks, its kills are proved by them)."""

    local = False  # the tasks run on the compute nodes: Slurm requeues and chains them

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

    # ------------------------------------------------------------ polling

    def poll(self) -> None:
        """One squeue: every task of ours, newest row per (job, index); scontrol -d for a task
        that is newly running."""
        if self.setup_error:
            return
        t0 = time.monotonic()
        try:
            rows = self.slurm.queue()
        except SlurmError as exc:
            with self._lock:
                self.poll_error = str(exc)
            log.warning("cluster %s: poll failed: %s", self.node, exc)
            return
        by_task: dict[tuple[str, int], QueueRow] = {}
        for row in rows:
            job = self._job_of(row.name)
            if job is None or row.index is None:
                continue
            key = (job, row.index)
            old = by_task.get(key)
            if old is None or newer(row, old):
                by_task[key] = row
        metas: dict[tuple[str, str], QueueRow] = {}  # (job, array id): the array's own record, once it ended
        for row in rows:
            job = self._job_of(row.name)
            if job is not None and row.index is None and row.id == row.raw and row.terminal:
                metas[(job, row.id)] = row
        for row in by_task.values():
            seen = self._detail_at.get(row.raw)
            if row.state == "RUNNING" and (row.raw not in self.details or seen is None or
                                           (row.elapsed_s is not None and row.elapsed_s < seen)):
                detail = self.slurm.detail(row.raw)  # once per run of a task (a requeue restarts its clock)
                if detail is not None:
                    self.details[row.raw] = detail
                    self._detail_at[row.raw] = row.elapsed_s or 0.0
            elif row.state != "RUNNING":
                self.details.pop(row.raw, None)
                self._detail_at.pop(row.raw, None)
        self._remember(by_task, metas)
        with self._lock:
            self.rows = by_task
            self.polls += 1
            self.polled_at = time.time()
            self.poll_ms = (time.monotonic() - t0) * 1000
            self.poll_error = None

    def _job_of(self, slurm_name: str) -> Optional[str]:
        """The job a Slurm job name ``gd:<fleet>:<job>`` is of, when it is this fleet's: under its
        name now or one it had before (``former``); None for another's."""
        if not self.fleet:
            return slurm_name.split(":", 2)[-1] if slurm_name.startswith("gd:") else None
        for name in (self.fleet, *self.former):
            prefix = f"gd:{name}:"
            if slurm_name.startswith(prefix):
                return slurm_name[len(prefix):]
        return None

    def _renamed(self, old: str, new: str) -> None:
        """The same fleet file under a new name (given a [fleet] name, or another one): Slurm's
        tasks under the old name stay this fleet's (``former``), and the run directory moves to
        the new name, with a link left at the old place for the wrappers of tasks submitted under
        it (they write there, by the path they were given)."""
        self.former = [old] + [n for n in self.former if n not in (old, new)]
        shared = Path(os.path.expanduser(self.spec.shared_dir)) / "runs"
        src, dst = shared / (old or "default"), shared / (new or "default")
        try:
            if dst.is_symlink() and dst.resolve() == src.resolve():
                dst.unlink()  # renamed back: the link left the last time goes
            if src.is_dir() and not src.is_symlink() and not dst.exists():
                os.replace(src, dst)
                src.symlink_to(dst.name)
            elif src.is_dir() and not src.is_symlink():  # both have runs: each job that has none yet moves
                for job in src.iterdir():
                    if job.is_dir() and not job.is_symlink() and not (dst / job.name).exists():
                        os.replace(job, dst / job.name)
                        job.symlink_to(dst / job.name)
        except OSError as exc:
            log.warning("cluster %s: the fleet %r is now %r, and its runs in %s could not move to %s (%s): the "
                        "attempts and logs of tasks submitted before are read from there no more", self.node, old,
                        new, src, dst, exc)
        else:
            log.info("cluster %s: the fleet %r is now %r: its tasks in Slurm stay found, its runs are in %s",
                     self.node, old, new, dst)

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

    def _remember(self, by_task: dict[tuple[str, int], QueueRow], metas: dict[tuple[str, str], QueueRow]) -> None:
        """Keep each task's state when Slurm changes it: once Slurm forgets the task (MinJobAge,
        or never a record of its own: a task cancelled before it ran was a bit of its array's
        pending record), this is what its row keeps, with its time."""
        now = time.time()
        by_job: dict[str, dict[int, QueueRow]] = {}
        for (job, index), row in by_task.items():
            by_job.setdefault(job, {})[index] = row
        for job in set(by_job) | {job for job, _ in metas}:
            said = self._said_of(job)
            new = dict(said)
            for index, row in by_job.get(job, {}).items():
                old = said.get(index)
                if old is not None and old.array_id == row.array_id and old.state == row.state:
                    continue
                if row.terminal:
                    went_on = old is not None and old.array_id == row.array_id and old.ran and old.state not in TERMINAL
                    new[index] = SlurmSaid(row.array_id, row.state, row.ended_at or now,
                                           ran=(row.elapsed_s or 0) > 0 or went_on)
                else:
                    new[index] = SlurmSaid(row.array_id, row.state, now, ran=job_state(row.state) is not JobState.PENDING)
            listed = {row.array_id for row in by_job.get(job, {}).values()}
            for index, old in said.items():  # a task that waited in its array's record, which has now ended
                if index in by_job.get(job, {}) or old.state in TERMINAL or old.ran:
                    continue
                meta = metas.get((job, old.array_id))
                if meta is not None:
                    new[index] = SlurmSaid(old.array_id, meta.state, meta.ended_at or now, ran=False)
                elif old.array_id in listed and job_state(old.state) is JobState.PENDING \
                        and not self._ran_since(job, index, old.at):
                    # gone from its array's pending record while the array is still listed: only a
                    # cancel does that (a task that starts gets a line of its own), and it was not
                    # gpudeck's (its verdict would say): an scancel by hand; Slurm keeps no trace
                    new[index] = SlurmSaid(old.array_id, "CANCELLED", now, ran=False, gone=True)
            if new != said:
                with self._lock:
                    self._said[str(self._run(job))] = new
                try:
                    write_said(self._run(job), new)
                except OSError as exc:
                    log.warning("cluster %s: cannot keep what Slurm said of %s's tasks: %s", self.node, job, exc)

    def _ran_since(self, job: str, index: int, since: float) -> bool:
        """Whether the wrapper recorded an attempt of the task that began at ``since`` or after
        (a task that ran and left squeue between two polls, MinJobAge being short)."""
        try:
            att = self._attempts(job, index)
        except (OSError, ValueError):
            return True  # no evidence either way: not called cancelled
        return bool(att.starts) and (att.started_at or 0) >= since - 1.0

    def soon(self) -> None:
        """After an action: a few polls in the next seconds (bounded), then the usual pace."""
        now = time.monotonic()
        with self._lock:
            self._due = sorted(set(self._due) | {now + d for d in EXTRA_POLLS_S})
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def serve(self) -> None:
        """The polls: one per ``poll_s``, a few more soon after an action; the observers beside
        the running tasks."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        last = 0.0
        try:
            if not self.setup_error:
                await asyncio.to_thread(self.slurm.config)
        except SlurmError as exc:
            self.poll_error = f"scontrol show config: {exc}"
        while True:
            now = time.monotonic()
            with self._lock:
                self._due = [t for t in self._due if t > now]
            await asyncio.to_thread(self.poll)
            last = time.monotonic()
            if self.polls <= 1:  # a one-look `status` leaves before any observer is worth its srun step
                await asyncio.sleep(OBSERVER_DELAY_S)
            try:
                await self.observers.reconcile()
            except Exception:  # noqa: BLE001 -- an observer must never stop the polls
                log.exception("cluster %s: observers", self.node)
            while True:
                with self._lock:
                    nxt = min([last + self.spec.poll_s] + [t for t in self._due if t > last])
                delay = nxt - time.monotonic()
                if delay <= 0:
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except asyncio.TimeoutError:
                    break

    async def close(self) -> None:
        await self.observers.close()

    # ------------------------------------------------------------ the snapshot

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

    def audit(self, action: AuditAction, job: Optional[str], details: Optional[dict[str, Any]] = None,
              **kw: Any) -> None:
        self._audit.write(action, job, details, **kw)

    def on_audit(self, hook: Optional[AuditHook]) -> None:
        self._audit.on_audit(hook)

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

    fleet_identity = ""

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

    # -- launch

    def task_python(self, spec: JobSpec) -> str:
        venv = Path(os.path.expanduser(self.spec.venv)) / "bin" / "python"
        return spec.python or self.spec.python or (str(venv) if venv.exists() else sys.executable)

    def task_argv(self, spec: JobSpec) -> list[str]:
        argv = spec.argv(self.task_python(spec))
        opts = spec.options
        if spec.shards > 1 and not spec.command and opts is not None and \
                "part" in {f.name for f in dataclasses.fields(cast(Any, opts))} and getattr(opts, "part", None) is None:
            argv += ["--part", f"{TASK_TOKEN}/{spec.shards}"]  # each task its shard (the wrapper fills it in)
        return argv

    def sbatch_argv(self, spec: JobSpec, indices: list[int], after: Optional[list[str]] = None) -> list[str]:
        """sbatch's arguments for ``indices`` of ``spec``'s array; ``after``: the array ids of the
        jobs of its ``after`` still to finish (``--dependency=afterok``: Slurm starts the array
        once every task of each ended with exit code 0)."""
        res = spec.resources
        assert res is not None
        run = self._run(spec.name)
        c = self.spec
        array = index_ranges(indices) + (f"%{res.max_running}" if res.max_running else "")
        argv = ["-J", slurm_job_name(self.fleet, spec.name), f"--array={array}",
                "-o", str(run / "logs" / "%a.log"), "--open-mode=append"]
        for flag, value in (("-p", c.partition), ("-A", c.account), ("-q", c.qos), ("-C", c.constraint),
                            ("-c", res.cpus), ("--mem", res.mem), ("-t", res.time), ("--chdir", spec.cwd)):
            if value is not None:
                argv += [flag, str(os.path.expanduser(str(value)) if flag == "--chdir" else value)]
        if res.gpus:
            argv.append(f"--gres=gpu:{res.gpu_type + ':' if res.gpu_type else ''}{res.gpus}")
        argv += ["--requeue", f"--signal=B:USR1@{REQUEUE_SIGNAL_S}"] if res.requeue else ["--no-requeue"]
        if after:
            argv.append("--dependency=afterok:" + ":".join(after))
        argv += list(c.sbatch_args)
        return argv + [str(install_wrapper(c.shared_dir)), str(run), str(spec.shards), "--", *self.task_argv(spec)]

    def launch(self, name: str) -> LaunchResult:
        if self.setup_error:
            raise Refusal(self.setup_error)
        spec, index = self._task(name)
        indices = [index] if index is not None else list(range(spec.shards))
        self.poll()  # the queue as it is now, not as the last poll saw it (an action: a bounded call)
        with self._lock:
            live = [task_name(spec.name, i) for i in indices if (r := self.rows.get((spec.name, i))) is not None
                    and not r.terminal]
        if live:
            raise JobError(f"{', '.join(live)} already in the queue; relaunch or kill {'them' if len(live) > 1 else 'it'} "
                           f"first")
        return self._submit(spec, indices, name)

    def _submit(self, spec: JobSpec, indices: list[int], name: str, kill: Optional[KillVerdict] = None
                ) -> LaunchResult:
        limit = self.slurm.config().get("MaxArraySize", "")
        if limit.isdigit() and max(indices) >= int(limit):
            raise Refusal(f"job {spec.name!r}: {spec.shards} shards, but this cluster's MaxArraySize is {limit} "
                           f"(array indices 0 to {int(limit) - 1})")
        run = self._run(spec.name)
        (run / "logs").mkdir(parents=True, exist_ok=True)
        self._write_env(spec, run)
        argv = self.sbatch_argv(spec, indices, self.after_ids(spec))
        try:
            array = self.slurm.submit(argv, test_only=True)
        except SlurmError as exc:
            said = f"sbatch refused job {spec.name!r}: {exc}"
            raise (Refusal(said) if refused_for_input(str(exc)) else JobError(said)) from None
        self.audit(AuditAction.LAUNCH, name, array=array, argv=argv)
        self.soon()
        attempt = max((self._attempts(spec.name, i).starts for i in indices), default=0) + 1
        return LaunchResult(job=name, pid=0, attempt=attempt, log=str(run / "logs"), kill=kill,
                            argv=["sbatch", *argv], job_id=array if len(indices) > 1 else f"{array}_{indices[0]}")

    def after_ids(self, spec: JobSpec) -> list[str]:
        """The array id of each job of ``spec.after`` (on this cluster) that has not yet finished:
        its newest submission. One whose tasks all completed needs no dependency; one never
        submitted, or one that failed, is refused: Slurm would hold the array forever."""
        ids = []
        with self._lock:
            rows = dict(self.rows)
        for dep in spec.after:
            mine = [r for (job, _), r in rows.items() if job == dep]
            if not mine:
                raise JobError(f"job {spec.name!r} runs after {dep!r}, which is not in {self.node}'s queue; launch "
                               f"{dep} first")
            newest = max(mine, key=lambda r: int(r.array_id) if r.array_id.isdigit() else 0).array_id
            tasks = [r for r in mine if r.array_id == newest]
            if all(r.state == "COMPLETED" for r in tasks):
                continue
            bad = [r for r in tasks if r.terminal and r.state != "COMPLETED"]
            if bad:
                raise JobError(f"job {spec.name!r} is blocked: {dep!r} ended {bad[0].state} ({bad[0].id}); "
                               f"relaunch {dep} first")
            ids.append(newest)
        return ids

    def _write_env(self, spec: JobSpec, run: Path) -> None:
        """The job's ``env`` in a file only its user reads (never on a command line that
        ``scontrol show job`` prints); the wrapper sources it."""
        from ..contract.atomic import atomic_write_bytes
        path = run / "env.sh"
        text = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in spec.env.items())
        atomic_write_bytes(path, text.encode(), mode=0o600)

    # -- kill

    def kill(self, name: str, grace_s: float = 10.0) -> KillVerdict:
        spec, index = self._task(name)
        if index is not None:
            verdict = self._kill_task(spec, index, grace_s)
            self._keep_verdict(spec, index, verdict)
            self.audit(AuditAction.KILL, name, verdict=plain.to_plain(verdict))
            self.soon()
            return verdict
        cancelled = self._cancel_pending(spec)  # the waiting tasks at once: one scancel per array
        verdicts = []
        for i in range(spec.shards):
            v = cancelled.get(i) or self._kill_task(spec, i, grace_s)
            self._keep_verdict(spec, i, v)
            verdicts.append(v)
        before = [i for i, v in cancelled.items() if v.ok]
        told = {id(v) for i, v in cancelled.items() if i in before}  # said once below, as a range
        said = [f"{v.job}: {v.message}" for v in verdicts if not v.already and id(v) not in told]
        if before:
            some = task_name(spec.name, before[0]) if len(before) == 1 else f"{spec.name}/[{index_ranges(before)}]"
            said.insert(0, f"{some}: cancelled before {'it' if len(before) == 1 else 'they'} ran")
        verdict = KillVerdict(job=name, ok=all(v.ok for v in verdicts), at=time.time(),
                              message="; ".join(said) or f"{name}: no task was running",
                              gpu_holders=[h for v in verdicts for h in v.gpu_holders],
                              seconds=max((v.seconds or 0 for v in verdicts), default=None))
        self.audit(AuditAction.KILL, name, verdict=plain.to_plain(verdict))
        self.soon()
        return verdict

    def _keep_verdict(self, spec: JobSpec, index: int, verdict: KillVerdict) -> None:
        """Kept beside the task's attempts, so the next agent (and any login node) shows it. A
        kill that found the task already ended changes nothing and replaces no earlier verdict."""
        if verdict.already is not None:
            return
        name = task_name(spec.name, index)
        self.kills[name] = verdict
        try:
            from ..contract.atomic import atomic_write_json
            (self._run(spec.name) / "kills").mkdir(parents=True, exist_ok=True)
            atomic_write_json(self._run(spec.name) / "kills" / f"{index}.json", plain.to_plain(verdict))
        except OSError as exc:
            log.warning("cluster %s: cannot keep the verdict of %s: %s", self.node, name, exc)

    def _cancel_pending(self, spec: JobSpec) -> dict[int, KillVerdict]:
        """``scancel A_[ranges]`` for a job's waiting tasks, one call per array, then the queue
        read back until none of them waits: each one's verdict, ``cancelled`` (before it ran).
        Slurm may keep no record of such a task (it was a bit of its array's pending record):
        gone from the queue is then the answer, and this verdict what its row keeps."""
        with self._lock:
            pending = {i: r for (job, i), r in self.rows.items() if job == spec.name and
                       job_state(r.state) is JobState.PENDING}
        arrays: dict[str, list[int]] = {}
        for i, r in sorted(pending.items()):
            arrays.setdefault(r.array_id, []).append(i)
        if not arrays:
            return {}
        t0 = time.monotonic()
        sent = {}
        for array, indices in arrays.items():
            task_ids = f"{array}_[{index_ranges(indices)}]"
            self.slurm.cancel(task_ids)  # its exit status says nothing: the queue is read back
            sent.update({i: task_ids for i in indices})
        deadline = t0 + self.slurm.seconds_of("KillWait", 30.0) + 10.0
        delay = 0.1
        while True:
            self.poll()
            with self._lock:
                rows = {i: self.rows.get((spec.name, i)) for i in pending}
            waiting = [i for i, r in rows.items() if r is not None and job_state(r.state) is JobState.PENDING]
            if not waiting or time.monotonic() > deadline:
                break
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        seconds = time.monotonic() - t0
        out = {}
        for i, row in rows.items():
            name = task_name(spec.name, i)
            if row is None or row.state == "CANCELLED":
                slurm_says = row.state if row is not None else "no record: it never had one of its own"
                out[i] = KillVerdict(job=name, ok=True, seconds=seconds, at=time.time(), state=JobState.CANCELLED,
                                     message=f"cancelled before it ran (scancel {sent[i]}; Slurm: {slurm_says}); "
                                             f"it held no GPU")
            elif i in waiting:
                out[i] = KillVerdict(job=name, ok=False, seconds=seconds, at=time.time(),
                                     message=f"scancel {sent[i]} sent, but Slurm still lists it {row.state} after "
                                             f"{seconds:.0f} s")
            # else it started, or ended otherwise, meanwhile: its own kill (_kill_task) says what became of it
        return out

    def _kill_task(self, spec: JobSpec, index: int, grace_s: float) -> KillVerdict:
        name = task_name(spec.name, index)
        with self._lock:
            row = self.rows.get((spec.name, index))
        if row is None:
            return KillVerdict(job=name, ok=True, already="pending", at=time.time(),
                               message=f"{name} is not in the queue (never submitted, or long gone)")
        task_id = f"{row.array_id}_{index}"
        state = self.slurm.state_of(task_id)
        if state is None or state in TERMINAL:
            return KillVerdict(job=name, ok=True, already=(state or row.state).lower(), at=time.time(),
                               message=f"{name} had already ended ({state or row.state})")
        waited = job_state(state) is JobState.PENDING  # cancelled now, it never ran (this time)
        detail = self.details.get(row.raw) or (self.slurm.detail(row.raw) if state == "RUNNING" else None)
        gpus = detail.gpus if detail else []
        node = (detail.node if detail else None) or row.node
        local = node is not None and self._is_local(node)
        before = self._holders(gpus, name) if local and gpus else {}
        t0 = time.monotonic()
        self.slurm.cancel(task_id)  # its exit status says nothing: the state is read back
        kill_wait = self.slurm.seconds_of("KillWait", 30.0)
        deadline = t0 + kill_wait + max(grace_s, 10.0)
        delay = 0.05
        while True:
            state = self.slurm.state_of(task_id)
            if state is None or state in TERMINAL:
                break
            if time.monotonic() > deadline:
                return KillVerdict(job=name, ok=False, seconds=time.monotonic() - t0, at=time.time(),
                                   message=f"scancel {task_id} sent, but Slurm still shows {state} after "
                                           f"{time.monotonic() - t0:.0f} s (KillWait {kill_wait:g} s)")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        ended_s = time.monotonic() - t0
        ended = f"{state or 'gone from the queue'} in {ended_s:.2f} s"
        if waited:
            return KillVerdict(job=name, ok=True, seconds=ended_s, at=time.time(), state=JobState.CANCELLED,
                               message=f"cancelled before it ran (scancel {task_id}; {ended}); it held no GPU")
        if not gpus:
            return KillVerdict(job=name, ok=True, seconds=ended_s, at=time.time(), state=JobState.KILLED,
                               message=f"{ended}; it asked for no GPU")
        if not local:
            return KillVerdict(job=name, ok=False, seconds=ended_s, at=time.time(), state=JobState.KILLED,
                               message=f"ended ({ended}); GPU memory not observed: no gpudeck agent sees node "
                                       f"{node} once the job's steps are gone (its observer ends with the job)")
        return self._gpus_freed(name, node, gpus, before, grace_s, t0, ended, ended_s)

    def _gpus_freed(self, name: str, node: Optional[str], gpus: list[int], before: dict[int, tuple[int, float]],
                    grace_s: float, t0: float, ended: str, ended_s: float) -> KillVerdict:
        """The proof of a task's kill on this node once Slurm says it ended: the job's GPUs, by
        IDX, hold no memory of the processes it had there."""
        deadline = time.monotonic() + max(grace_s, 5.0)
        while True:
            left = {pid: (g, mib) for pid, (g, mib) in self._holders(gpus, name).items() if pid in before}
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        seconds = time.monotonic() - t0
        freed = sum(mib for pid, (_, mib) in before.items() if pid not in left) / 1024
        if left:
            holders = [GpuHolder(pid=pid, gpu=g, mib=mib) for pid, (g, mib) in sorted(left.items())]
            said = ", ".join(f"pid {h.pid} holds {h.mib / 1024:.1f} GiB on GPU {h.gpu}" for h in holders)
            return KillVerdict(job=name, ok=False, seconds=seconds, freed_gib=freed, gpu_holders=holders,
                               pids=sorted(before), survivors=sorted(left), at=time.time(), state=JobState.KILLED,
                               message=f"Slurm says {ended}, but {said} {seconds - ended_s:.1f} s later "
                                       f"(node {node}; a process that left the job's process tracking)")
        return KillVerdict(job=name, ok=True, seconds=seconds, freed_gib=freed, pids=sorted(before), at=time.time(),
                           state=JobState.KILLED, message=f"{ended}; GPU {','.join(map(str, gpus))} on {node}: "
                                   + (f"{freed:.1f} GiB back in {seconds:.2f} s" if before else
                                      "held no memory of the job"))

    def _holders(self, gpus: list[int], name: str) -> dict[int, tuple[int, float]]:
        """pid -> (GPU index, MiB) of the processes holding memory on ``gpus`` of this node."""
        out: dict[int, tuple[int, float]] = {}
        for g in self.gpu.sample():
            if g.index in gpus:
                for p in g.processes:
                    if p.used_mib > 0:
                        out[p.pid] = (g.index, p.used_mib)
        return out

    def _is_local(self, node: str) -> bool:
        if node in self.local_names:
            return True
        if node not in self.node_hosts:
            self.node_hosts[node] = self.slurm.host_of(node)
        host = self.node_hosts[node]
        return host is not None and (host in self.local_names or host.split(".")[0] in self.local_names)

    # -- relaunch

    def relaunch(self, name: str, grace_s: float = 10.0) -> LaunchResult:
        spec, index = self._task(name)
        if index is None:
            return self._submit(spec, list(range(spec.shards)), name, kill=self.kill(name, grace_s))
        with self._lock:
            row = self.rows.get((spec.name, index))
        kill: Optional[KillVerdict] = None
        if row is not None and not row.terminal and row.state != "PENDING":
            kill = self.kill(name, grace_s)
        if row is not None:
            task_id = f"{row.array_id}_{index}"
            attempt = self._attempts(spec.name, index).starts + 1
            try:
                self._requeue(task_id, spec.name, index)
            except SlurmError as exc:  # forgotten, or preemption cancelled rather than requeued: resubmit
                log.info("cluster %s: requeue of %s failed (%s); resubmitting", self.node, task_id, exc)
            else:
                self.audit(AuditAction.RELAUNCH, name, requeue=task_id)
                self.soon()
                return LaunchResult(job=name, pid=0, attempt=attempt, kill=kill,
                                    log=str(self._run(spec.name) / "logs" / f"{index}.log"),
                                    argv=["scontrol", "requeue", task_id], job_id=task_id)
        return self._submit(spec, [index], name, kill=kill)

    def _requeue(self, task_id: str, job: str, index: int, tries: int = 3) -> None:
        """Requeue, and see it take: a task requeued while its node still cleans up after the
        kill may fail at launch (FAILED, NonZeroExitCode, no attempt started); then again."""
        starts = self._attempts(job, index).starts
        for attempt in range(tries):
            self.slurm.requeue(task_id)
            deadline = time.monotonic() + 15.0
            delay = 0.2
            while time.monotonic() < deadline:
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                if self._attempts(job, index).starts > starts:
                    return  # the wrapper started: the attempt is under way
                state = self.slurm.state_of(task_id)
                if state in TERMINAL:
                    break  # the launch failed before the wrapper ran: requeue again
            else:
                return  # still pending (it waits for resources, or its turn): the next polls show it
            log.info("cluster %s: %s failed at launch after its requeue (try %d)", self.node, task_id, attempt + 1)
            time.sleep(1.0)
        raise SlurmError(f"{task_id} failed at launch after {tries} requeues")

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
