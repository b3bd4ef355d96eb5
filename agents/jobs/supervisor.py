"""Launch, adopt, kill-and-verify and relaunch jobs on one node.

Jobs do not belong to the agent. Each runs detached in its own session and process group,
under a small ``sh`` wrapper that records the exit code, so it survives the agent, the SSH
link and the operator's laptop. Everything the supervisor knows about a job lives in its
state directory, ``<home>/jobs/<name>/``::

    spec.json    the JobSpec it was launched with (relaunch reuses it without a fleet file's)
    state.json   pid, pgid, process start time, attempt, state, exit code, last kill verdict
    exit_code    written by the wrapper when the command ends by itself
    job.log      stdout and stderr of every attempt, each headed by a marker line
    progress.json  where the job may report progress (GPUDECK_PROGRESS_FILE)

A new agent re-adopts live jobs from there. A pid is trusted only when the process start
time matches the recorded one, so a reused pid never passes for the job.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional

from . import joblog
from .backend import Extras, GpuReader, GpusSeen, JobError
from ..contract.jobstate import STATE_FILE, read_state
from ..contract.jobs import JobKind, JobSpec
from ..contract.ops import Configured
from ..contract.vocab import AuditAction, JobState
from ..contract.wire import ClusterInfo, JobStatus, LogChunk
from .records import _Live

from .kills import SupervisorKills
from .launching import ADOPTED, WRAPPER, SupervisorLaunch
from .liveness import LOG_CHECK_S, MEMBERS_REFRESH_S, SupervisorLiveness
from .store import SupervisorStore, _facts

log = logging.getLogger(__name__)

# the layers of JobSupervisor, each over the one before: store.py (state, a job's files),
# liveness.py (what runs, how it ended), launching.py (launch, adopt), kills.py (kill, relaunch)
__all__ = ["ADOPTED", "JobError", "JobSupervisor", "WRAPPER", "LOG_CHECK_S", "MEMBERS_REFRESH_S", "SupervisorStore",
           "SupervisorLiveness", "SupervisorLaunch", "SupervisorKills"]


class JobSupervisor(SupervisorKills):
    """The local backend (jobs/backend.py JobBackend): the node's jobs as its own processes.
    ``role`` (``agent``, or ``watcher`` for the detached one) is how a refused kill names the
    process it would have taken down."""

    def __init__(self, home: Path, gpu: Optional[GpuReader] = None, node: str = "local",
                 python: str = sys.executable, role: str = "agent") -> None:
        super().__init__(home, gpu, node, python, role)
        self._adopt_all()

    # ------------------------------------------------------------ each tick

    def statuses(self, now: float, for_console: bool, extras: Optional[Extras] = None) -> list[JobStatus]:
        """Every job's status. One job that cannot be read (a file system error, a bad state
        file) shows its error on its own row; the others are read as usual. ``for_console``
        False leaves out what only a console reads (``pids``, ``spec_changes``, ``gpu_uuids``,
        ``log_path``, ``fleet``)."""
        out = []
        for name in self.names():
            try:
                out.append(self._status(name, now, for_console, extras))
            except Exception as exc:  # noqa: BLE001 -- one job must never blind the node
                why = f"{type(exc).__name__}: {exc}"
                if self._job_errors.get(name) != why:
                    log.warning("job %s cannot be read: %s", name, why)
                self._job_errors[name] = why
                rec = self._records.get(name)
                spec = self._declared.get(name)
                out.append(JobStatus(name=name, kind=spec.kind if spec else JobKind.COMMAND,
                                     state=rec.state if rec else JobState.PENDING, error=why))
            else:
                self._job_errors.pop(name, None)
        return out

    def _status(self, name: str, now: float, for_console: bool, extras: Optional[Extras]) -> JobStatus:
        spec = self.spec_of(name)
        rec = self._records.get(name)
        gpus = list(spec.gpus) if spec else []
        uuids = self.gpu.uuids
        fields: dict[str, Any] = dict(
            name=name, kind=spec.kind if spec else JobKind.COMMAND, state=rec.state if rec else JobState.PENDING,
            gpus=gpus, gpu_uuids=[uuids[i] for i in gpus if i < len(uuids)] if for_console else [],
            pid=rec.pid if rec else None, pgid=rec.pgid if rec else None,
            pids=self._members(name) if rec and for_console else [], attempt=rec.attempt if rec else 0,
            exit_code=rec.exit_code if rec else None, started_at=rec.started_at if rec else None,
            ended_at=rec.ended_at if rec else None,
            log_path=str(self._job_file(name, "job.log")) if rec and for_console else None,
            argv=rec.argv if rec else [], last_kill=rec.last_kill if rec else None, adopted=bool(rec and rec.adopted),
            fenced=rec.fenced if rec else None, attempts=rec.spans() if rec and for_console else [],
            spec_changes=self.spec_changes(name) if rec and for_console else [],
            fleet=self._owned.owner(name) if for_console else None)
        if extras is not None:
            progress_file = self._progress_files.get(name)
            if progress_file is None:
                progress_file = self._progress_files[name] = str(self._job_file(name, "progress.json"))
            fields.update(extras(name, spec, _facts(rec) if rec is not None else None, progress_file))
        return JobStatus(**fields)

    def read_gpus(self, jobs: list[JobStatus]) -> GpusSeen:
        return GpusSeen(self.gpu.sample(self.owner_of), self.gpu.error, self.gpu.simulated)

    def disk_paths(self) -> list[str]:
        """The home and where the jobs write: worked out again only when the fleet's jobs are
        (configure replaces them)."""
        declared = self._declared
        if self._paths_of is not declared:
            paths = [str(self.home)]
            for s in declared.values():
                out = s.worker.out if s.worker is not None else None
                paths += [os.path.expanduser(p) for p in (s.cwd, out, s.done_set, s.progress) if p]
            self._paths, self._paths_of = paths, declared
        return self._paths

    def cluster_info(self) -> Optional[ClusterInfo]:
        return None

    async def serve(self) -> None:
        return None  # the ticks are all: refresh() notices what ended

    async def close(self) -> None:
        return None  # the jobs are not the agent's: they run on without it

    def _adopt_all(self) -> None:
        """Read every job's state.json; keep what is still alive, settle what is not."""
        for d in sorted(self.jobs_dir.iterdir()) if self.jobs_dir.exists() else []:
            path = d / STATE_FILE
            if not path.is_file():
                continue
            try:
                rec = read_state(path)
            except (OSError, ValueError) as exc:
                log.warning("job %s: unreadable state.json, ignored: %s", d.name, exc)
                continue
            self._records[rec.name] = rec
            self._live[rec.name] = _Live()
            if rec.state.alive:
                if self._leader_alive(rec) or self._group_members(rec) or self._cgroup_members(rec):
                    self.audit(AuditAction.ADOPT, rec.name, pid=rec.pid, pgid=rec.pgid)
                    if rec.state is JobState.STOPPING:
                        self._finish_interrupted_kill(rec)
                else:
                    self._settle(rec)
                    self.audit(AuditAction.ADOPT_ENDED, rec.name, state=rec.state, exit_code=rec.exit_code)

    def configure(self, specs: list[JobSpec], fleet: str = "", take_over: bool = False, source: str = "",
                  reading: bool = False) -> Configured:
        """``fleet``'s declarations (agents/jobs/owners.py: another fleet's stay theirs, and a
        ``reading`` configure takes nothing); the ownership's outcome, with ``changed``: per
        job, what its fleet file changed since it last launched."""
        with self._lock:
            declared = self._owned.declare(fleet, specs, take_over,
                                           lambda n: (r := self._records.get(n)) is not None and r.state.alive,
                                           source=source, reading=reading)
            self._declared = declared.merged
        changed = {s.name: changes for s in specs if (changes := self.spec_changes(s.name))}
        return Configured(jobs=[s.name for s in specs], changed=changed, owned_elsewhere=declared.elsewhere,
                          taken=declared.taken, differs=declared.differs, copy=declared.copy,
                          kept_copy=declared.kept_copy)

    def logs(self, name: str, lines: int = 100, offset: Optional[int] = None) -> LogChunk:
        """The last ``lines`` lines, or what came after byte ``offset`` (for --follow)."""
        if self.spec_of(name) is None and name not in self._records:
            raise JobError(f"unknown job {name!r} on node {self.node} (known: {', '.join(self.names()) or 'none'})")
        path = self._job_dir(name) / "job.log"
        return joblog.tail(name, path, lines) if offset is None else joblog.read_on(name, path, int(offset))
