"""The local backend's kill and verify (a job's, a stray GPU process's, one an agent died
during) and relaunch; over launching.py.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from . import killing
from .backend import JobError
from ..contract.vocab import AuditAction, JobState
from ..contract.plain import to_plain
from ..contract.wire import KillVerdict, LaunchResult
from ..contract.jobstate import JobRecord

from .launching import SupervisorLaunch

# the supervisor's one logger, whichever of its parts speaks
log = logging.getLogger(__name__.rsplit(".", 1)[0] + ".supervisor")


class SupervisorKills(SupervisorLaunch):
    """Kill and verify, and relaunch."""

    def kill(self, name: str, grace_s: float = 10.0, verify_timeout_s: float = 15.0) -> KillVerdict:
        """SIGTERM to the group, SIGKILL after ``grace_s``, then verify against /proc and NVML."""
        rec = self._records.get(name)
        if rec is None:
            if self.spec_of(name) is None:
                raise JobError(f"unknown job {name!r} on node {self.node} (known: {', '.join(self.names()) or 'none'})")
            return KillVerdict(job=name, ok=True, already=JobState.PENDING.value, message=f"{name} was never launched",
                               at=time.time())
        self._claim(name)
        try:
            return self._kill(rec, grace_s, verify_timeout_s)
        finally:
            self._busy.discard(name)

    def all_members(self, rec: JobRecord) -> set[int]:
        """Every live process of the attempt: its group and tree, and its containment (its
        cgroup, or every process with its token). Scans /proc: for kills, not every tick."""
        pids = set(self._group_members(rec))
        pids |= self._contain.members(rec.token, rec.cgroup) or set()
        return {p for p in pids if killing.running(p)}

    def _kill(self, rec: JobRecord, grace_s: float, verify_timeout_s: float) -> KillVerdict:
        name = rec.name
        members = self.all_members(rec) if rec.state.alive else set()
        if not members:
            if rec.state.alive:
                self._settle(rec)
            verdict = KillVerdict(job=name, ok=True, already=rec.state.value, exit_code=rec.exit_code, at=time.time(),
                                  message=f"{name} had already ended ({rec.state}"
                                          + (f", exit code {rec.exit_code})" if rec.exit_code is not None else ")"))
            self.audit(AuditAction.KILL, name, to_plain(verdict))
            return verdict

        def stopping(pids: set[int]) -> None:
            rec.kill_requested = True
            rec.state = JobState.STOPPING
            rec.kill_started_at, rec.kill_grace_s = time.time(), grace_s
            self._save(rec)
            self.audit(AuditAction.KILL_START, name, pids=sorted(pids), grace_s=grace_s, containment=self._contain.mode)

        def reap() -> None:
            live = self._live.get(name)
            if live and live.popen is not None:
                live.popen.poll()

        if rec.adopted and rec.pid:  # a process gpudeck did not start: its tree may have come to hold the node
            self._refuse_holds(rec.pid, AuditAction.KILL_REFUSED, name, members)
        spec = self.spec_of(name)
        target = killing.Target(job=name, pgid=rec.pgid, started_at=rec.start_ticks,
                                gpus=list(spec.gpus) if spec else [], members=lambda: self.all_members(rec),
                                kill_all=lambda: self._contain.kill_all(rec.token, rec.cgroup), reap=reap)
        verdict = killing.kill_and_verify(target, self.gpu, self.owner_of, grace_s, verify_timeout_s, stopping)
        with self._lock:
            rec.last_kill = verdict
            if not verdict.survivors:
                self._settle(rec)
            else:
                self._save(rec)
        self.audit(AuditAction.KILL, name, to_plain(verdict))
        return verdict

    def kill_pid(self, pid: int, grace_s: float = 10.0) -> KillVerdict:
        """Kill a GPU process that belongs to no job, with the same verification."""
        owner = self.owner_of(pid)
        if owner is not None:
            raise JobError(f"pid {pid} belongs to job {owner!r}: kill the job ({owner}), so it is verified whole")
        self._refuse_holds(pid, AuditAction.KILL_PID_REFUSED)  # first: pid 1 holds no GPU, and that must not be what stops it
        on_gpu = any(p == pid for i in range(len(self.gpu.uuids)) for p, _ in self.gpu.processes(i))
        if not on_gpu:
            raise JobError(f"pid {pid} holds no GPU on node {self.node}: only GPU processes that belong to no "
                           f"job are killed by pid")
        self.audit(AuditAction.KILL_PID_START, None, pid=pid, grace_s=grace_s)
        verdict = killing.kill_process(pid, self.gpu, grace_s)
        self.audit(AuditAction.KILL_PID, None, to_plain(verdict))
        return verdict

    def relaunch(self, name: str, grace_s: float = 10.0) -> LaunchResult:
        """The next attempt, with the fleet file's spec (see launch). A job still running is killed first."""
        rec = self._records.get(name)
        spec = self.spec_of(name)
        if spec is not None:
            self.check_fence(spec)  # before the kill: a refused relaunch leaves the job as it is
        verdict = None
        if rec is not None and rec.state.alive:
            verdict = self.kill(name, grace_s)
            if not verdict.ok:
                raise JobError(f"job {name!r}: not relaunched, the kill did not finish: {verdict.message}")
        result = self.launch(name, relaunch=True, fence_checked=spec is not None)
        return dataclasses.replace(result, kill=verdict) if verdict is not None else result

    def _finish_interrupted_kill(self, rec: JobRecord) -> None:
        """The agent that began this kill died during it (its console closed, kill -9): finish
        it in the background with what is left of its grace, so the job never stays in
        ``stopping`` with its processes alive, and record the verdict."""
        left = killing.grace_left(rec.kill_started_at, rec.kill_grace_s, time.time())
        log.warning("job %s: a kill was interrupted; finishing it (%.1f s of grace left)", rec.name, left)
        self.audit(AuditAction.KILL_RESUME, rec.name, grace_left_s=round(left, 1))

        def finish() -> None:
            try:
                self.kill(rec.name, grace_s=left)
            except JobError as exc:  # a console's own kill got there first
                log.info("job %s: %s", rec.name, exc)

        threading.Thread(target=finish, name=f"kill-{rec.name}", daemon=True).start()
