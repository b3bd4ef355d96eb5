"""The local backend's liveness: which processes are a job's, when it ended and how (its exit
code, its completion marker), and the cap of its log; over store.py.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Optional

import psutil

from . import killing
from ..sense import writes
from .contain import cgroup_path_of, token_of
from .backend import JobError
from ..contract.fencing import EXIT_FENCED, FENCED_NOTE
from ..contract.jobs import MARKER, JobKind, JobSpec
from ..contract.vocab import AuditAction, JobState
from ..contract.jobstate import JobRecord
from .records import _Live, descendants as _descendants, ended_pidfds, group_members, leader_alive
from ..contract.atomic import atomic_write_json as write_json_atomic

from .store import SupervisorStore

# the supervisor's one logger, whichever of its parts speaks
log = logging.getLogger(__name__.rsplit(".", 1)[0] + ".supervisor")

MEMBERS_REFRESH_S = 5.0
LOG_CHECK_S = 5.0  # the agent's look at its jobs' log keepers (is one gone?) and log sizes


class SupervisorLiveness(SupervisorStore):
    """What runs, what ended and how."""

    def _leader_alive(self, rec: JobRecord) -> bool:
        return leader_alive(rec, self._live.setdefault(rec.name, _Live()))

    def _group_members(self, rec: JobRecord) -> list[int]:
        """Live processes of the job (records.group_members). Scans /proc: not for every tick."""
        return group_members(rec, self._leader_alive(rec))

    def _members(self, name: str, now: Optional[float] = None) -> list[int]:
        """Cached group members, refreshed every few seconds."""
        now = time.monotonic() if now is None else now
        rec, live = self._records.get(name), self._live.get(name)
        if rec is None or live is None or not rec.state.alive:
            return []
        if now - live.members_at > MEMBERS_REFRESH_S:
            pid = rec.pid
            tree = _descendants(pid) if pid and self._leader_alive(rec) else None
            # the cheap walk down /proc's children lists; the full scan only where there is none
            members = set(tree) | {pid} if tree is not None and pid else set(self._group_members(rec))
            live.members = sorted(members | self._cgroup_members(rec, known=members))
            live.members_at = now
        return live.members

    def _cgroup_members(self, rec: JobRecord, known: frozenset[int] | set[int] = frozenset()) -> set[int]:
        """The attempt's cgroup members (a cheap read; nothing in token mode, where finding
        members means reading every environment); those in ``known`` are not asked again
        whether they run."""
        if not rec.cgroup:
            return set()
        return {p for p in (self._contain.members(None, rec.cgroup) or ()) if p in known or killing.running(p)}

    def _read_exit_code(self, name: str) -> Optional[int]:
        try:
            return int((self._job_dir(name) / "exit_code").read_text().strip())
        except (OSError, ValueError):
            return None

    def _settle(self, rec: JobRecord) -> None:
        """The job is gone: decide how it ended, from what it left behind."""
        code = self._read_exit_code(rec.name)
        live = self._live.get(rec.name)
        if code is None and live and live.popen is not None and live.popen.returncode is not None:
            code = live.popen.returncode
            code = 128 - code if code < 0 else code
        rec.exit_code = code
        spec = self.spec_of(rec.name)
        if rec.kill_requested:
            rec.state = JobState.KILLED
        elif code is None:
            rec.state = JobState.LOST
        elif code == EXIT_FENCED and spec is not None and spec.kind in (JobKind.GENERATE, JobKind.EXTRACT):
            rec.state = JobState.FENCED  # final: the job runs elsewhere now (contract/fencing.py)
            rec.fenced = self._fenced_why(rec.name)
        else:
            rec.state = JobState.EXITED if code == 0 else JobState.FAILED
        rec.ended_at = rec.ended_at or time.time()
        if rec.state is JobState.EXITED:
            self._write_success(rec)
        self._contain.remove(rec.cgroup)
        if live:
            live.members, live.popen = [], None
            live.close_pidfd()
        self._save(rec)

    def _fenced_why(self, name: str) -> str:
        """Where the job went, as its worker read it beside the output (``fenced.json``)."""
        try:
            doc = json.loads(self._job_file(name, FENCED_NOTE).read_text())
            return str(doc["why"])
        except (OSError, ValueError, KeyError, TypeError):
            return "a newer attempt of this job holds its output (it was moved); see its log"

    def _marker_paths(self, name: str, spec: Optional[JobSpec]) -> list[Path]:
        """Where the agent writes a job's completion marker: its directory's ``_SUCCESS``, and
        the spec's ``success_marker``."""
        paths = [self._job_file(name, MARKER)]
        if spec is not None and spec.success_marker:
            paths.append(Path(os.path.expanduser(spec.success_marker)))
        return paths

    def _clear_markers(self, spec: JobSpec) -> None:
        """A new attempt begins: the markers the agent wrote for the last one (its directory's,
        and the spec's ``success_marker``, the old spec's and the new one's) say nothing of it.
        A built-in worker removes its own, in its output and in S3, at its fence's claim."""
        paths = {*self._marker_paths(spec.name, spec), *self._marker_paths(spec.name, self.stored_spec(spec.name))}
        for path in sorted(paths):
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise JobError(f"job {spec.name!r}: cannot remove its completion marker {path} before it starts "
                               f"again: {exc}") from None

    def _write_success(self, rec: JobRecord) -> None:
        """The job's completion marker, ``_SUCCESS`` in its own directory (and at its spec's
        ``success_marker``): what a job that runs ``after`` it waits for (agents/watch/phases.py).
        Counts from its progress file where it has one."""
        spec = self.spec_of(rec.name)
        doc: dict[str, Any] = {"job": rec.name, "node": self.node, "attempt": rec.attempt, "exit_code": 0,
                               "ended_at": rec.ended_at}
        try:
            prog = json.loads(Path(os.path.expanduser(spec.progress) if spec and spec.progress
                                   else self._job_file(rec.name, "progress.json")).read_text())
            doc["counts"] = {k: prog[k] for k in ("done", "total", "failed") if isinstance(prog.get(k), int)}
        except (OSError, ValueError, AttributeError):
            pass
        for path in self._marker_paths(rec.name, spec):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_json_atomic(path, doc)
            except OSError as exc:
                writes.failed(path, exc)
                log.warning("job %s: cannot write its completion marker %s: %s", rec.name, path, exc)

    def refresh(self) -> None:
        """One tick: notice jobs that ended since the last one; keep their logs in bounds."""
        self._refresh_ended()
        self._cap_logs()

    def _refresh_ended(self) -> None:
        with self._lock:
            todo = [(name, rec) for name, rec in self._records.items() if name not in self._busy and rec.state.alive]
            ended = ended_pidfds([fd for name, _ in todo if (live := self._live.get(name)) is not None
                                  and (fd := live.pidfd) is not None])
            for name, rec in todo:
                try:
                    self._refresh_one(name, rec, ended)
                except OSError as exc:  # one job's state directory failing stops no other job
                    log.warning("job %s: cannot record how it ended: %s", name, exc)

    def _refresh_one(self, name: str, rec: JobRecord, ended: Optional[set[int]] = None) -> None:
        if leader_alive(rec, self._live.setdefault(name, _Live()), ended):
            return
        # the leader is gone; members of its group may still run (and hold a GPU)
        live = self._live.setdefault(name, _Live())
        members = set(self._group_members(rec)) | self._cgroup_members(rec)
        live.members, live.members_at = sorted(members), time.monotonic()
        if not live.members:
            self._settle(rec)
            self.audit(AuditAction.ENDED, name, state=rec.state, exit_code=rec.exit_code)

    def owner_of(self, pid: int) -> Optional[str]:
        """The job a pid belongs to: by its attempt's token or cgroup (which a process cannot
        shed by leaving the group or the tree), else by process group, else by ancestry."""
        live_recs = [(n, r) for n, r in self._records.items() if r.state.alive]
        token = token_of(pid)
        if token:
            for n, r in live_recs:
                if r.token == token:
                    return n
        if self._contain.parent is not None:
            where = cgroup_path_of(pid)
            for n, r in live_recs:
                if where and r.cgroup and r.cgroup.endswith(where):
                    return n
        try:
            pgid = os.getpgid(pid)
        except (ProcessLookupError, PermissionError):
            pgid = None
        by_pgid = {r.pgid: n for n, r in self._records.items() if r.pgid and r.state.alive}
        if pgid in by_pgid:
            return by_pgid[pgid]
        by_pid = {r.pid: n for n, r in self._records.items() if r.pid and r.state.alive}
        if pid in by_pid:  # an adopted leader of no group of its own
            return by_pid[pid]
        try:
            for parent in psutil.Process(pid).parents():
                if parent.pid in by_pid:
                    return by_pid[parent.pid]
        except psutil.Error:
            pass
        return None

    def _cap_logs(self, now: Optional[float] = None) -> None:
        """Every ``LOG_CHECK_S``, for each live job whose log keeper (agents/logcap.py) is gone:
        write its pipe into its capped log, or cut a log the job writes itself past its
        ``log_max_mb`` (joblog.Capper)."""
        now = time.monotonic() if now is None else now
        if now < self._logs_due:
            return
        self._logs_due = now + LOG_CHECK_S
        self._capper.check((name, self._job_file(name, "job.log"), int(spec.log_max_mb * 2**20))
                           for name, rec in list(self._records.items())
                           if rec.state.alive and (spec := self.spec_of(name)) is not None)
