"""A job backend (agents/jobs/backend.py JobBackend) that starts nothing: the watcher's rules
(restarts, phases) run against it in the unit tier. Its jobs are the specs it is given; their
state is what the test sets (``set_state``) or what a launch made (attempt 1, running); a
launch, relaunch, block and audit is recorded; a note (``restarts.json``) is kept in memory.
Every method of the Protocol is here, so a rule that asks for more than before fails loudly in
a type check, not silently."""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Optional

from gpudeck.agents.contract import ops
from gpudeck.agents.contract.jobs import JobKind, JobSpec
from gpudeck.agents.contract.vocab import AuditAction, JobState
from gpudeck.agents.contract.wire import ClusterInfo, JobStatus, KillVerdict, LaunchResult, LogChunk
from gpudeck.agents.jobs.backend import AuditHook, Contained, Extras, GpusSeen, JobError, JobFacts


class FakeJobs:
    local = True

    def __init__(self, specs: list[JobSpec] = (), workdir: Optional[Path] = None, node: str = "fake") -> None:
        self.node = node
        self.python = sys.executable
        self._declared = {s.name: s for s in specs}
        self._facts: dict[str, JobFacts] = {}
        self._notes: dict[tuple[str, str], dict[str, Any]] = {}
        self._workdir = workdir or Path("/nonexistent")
        self._hook: Optional[AuditHook] = None
        self.launched: list[str] = []
        self.relaunches: list[str] = []
        self.graces: list[float] = []
        self.audits: list[tuple[str, Optional[str]]] = []
        self.relaunched = threading.Semaphore(0)  # released by each relaunch (they run in threads)

    # ------------------------------------------------------------ the test's hand

    def set_state(self, name: str, state: JobState, attempt: int = 1, exit_code: Optional[int] = None,
                  fenced: Optional[str] = None) -> None:
        self._facts[name] = JobFacts(name=name, state=state, attempt=attempt, exit_code=exit_code, fenced=fenced)

    def state(self, name: str) -> JobState:
        facts = self._facts.get(name)
        return facts.state if facts is not None else JobState.PENDING

    # ------------------------------------------------------------ what is known

    def names(self) -> list[str]:
        return sorted(set(self._declared) | set(self._facts))

    def declared(self) -> Mapping[str, JobSpec]:
        return MappingProxyType(self._declared)

    def spec_of(self, name: str) -> Optional[JobSpec]:
        return self._declared.get(name)

    def knows(self, name: str) -> bool:
        return name in self._declared or name in self._facts

    def facts(self, name: str) -> Optional[JobFacts]:
        return self._facts.get(name)

    def owner_of(self, pid: int) -> Optional[str]:
        return None

    def workdir(self, name: str) -> Path:
        return self._workdir / name

    def containment(self) -> Optional[Contained]:
        return Contained("token")

    # ------------------------------------------------------------ each tick

    def refresh(self) -> None:
        pass

    def statuses(self, now: float, for_console: bool, extras: Optional[Extras] = None) -> list[JobStatus]:
        out = []
        for name in self.names():
            spec, facts = self._declared.get(name), self._facts.get(name)
            out.append(JobStatus(name=name, kind=spec.kind if spec else JobKind.COMMAND, state=self.state(name),
                                 attempt=facts.attempt if facts else 0,
                                 exit_code=facts.exit_code if facts else None))
        return out

    def read_gpus(self, jobs: list[JobStatus]) -> GpusSeen:
        return GpusSeen([], "no GPUs: a fake backend")

    def disk_paths(self) -> list[str]:
        return []

    def cluster_info(self) -> Optional[ClusterInfo]:
        return None

    async def serve(self) -> None:
        return None

    async def close(self) -> None:
        return None

    # ------------------------------------------------------------ the ops

    def configure(self, specs: list[JobSpec], fleet: str = "", take_over: bool = False, source: str = "",
                  reading: bool = False) -> ops.Configured:
        self._declared = {s.name: s for s in specs}
        return ops.Configured(jobs=[s.name for s in specs])

    def launch(self, name: str) -> LaunchResult:
        if name not in self._declared:
            raise JobError(f"unknown job {name!r}")
        self.launched.append(name)
        attempt = (self._facts[name].attempt if name in self._facts else 0) + 1
        self.set_state(name, JobState.RUNNING, attempt)
        return LaunchResult(job=name, pid=1, attempt=attempt, log="")

    def kill(self, name: str, grace_s: float = 10.0) -> KillVerdict:
        self.set_state(name, JobState.KILLED, self._facts[name].attempt if name in self._facts else 0)
        return KillVerdict(job=name, ok=True, message=f"{name} killed (a fake backend)")

    def relaunch(self, name: str, grace_s: float = 10.0) -> LaunchResult:
        self.graces.append(grace_s)
        self.relaunches.append(name)
        self.relaunched.release()
        return LaunchResult(job=name, pid=1, attempt=len(self.relaunches) + 1, log="")

    def kill_pid(self, pid: int, grace_s: float = 10.0) -> KillVerdict:
        raise JobError(f"pid {pid}: a fake backend kills no process")

    def adopt(self, pid: int, name: str, started_at: Optional[float] = None, progress_file: Optional[str] = None,
              kind: str = "command") -> ops.Adopted:
        raise JobError(f"pid {pid}: a fake backend adopts no process")

    def logs(self, name: str, lines: int = 100, offset: Optional[int] = None) -> LogChunk:
        return LogChunk(job=name, text="", offset=0, path="")

    # ------------------------------------------------------------ for the watcher

    def set_blocked(self, name: str, blocked: bool) -> None:
        if self.state(name) in (JobState.PENDING, JobState.BLOCKED):
            self.set_state(name, JobState.BLOCKED if blocked else JobState.PENDING, 0)

    def audit(self, action: AuditAction, job: Optional[str], details: Optional[dict[str, Any]] = None,
              **kw: Any) -> None:
        self.audits.append((action, job))
        if self._hook is not None:
            self._hook(action, job, {"action": action, "job": job, **(details or {}), **kw})

    def on_audit(self, hook: Optional[AuditHook]) -> None:
        self._hook = hook

    def read_note(self, name: str, note: str) -> Optional[dict[str, Any]]:
        doc = self._notes.get((name, note))
        return dict(doc) if doc is not None else None

    def write_note(self, name: str, note: str, doc: dict[str, Any]) -> None:
        self._notes[(name, note)] = dict(doc)
