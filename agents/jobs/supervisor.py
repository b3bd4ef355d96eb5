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

import dataclasses
import json
import logging
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Optional

import psutil

from . import joblog, killing
from ..sense import writes
from .contain import Containment, cgroup_path_of, token_of
from ..sense.gpu import GpuSampler
from .audit import AuditLog
from .backend import AuditHook, Contained, Extras, GpuReader, GpusSeen, JobError, JobFacts
from ..contract.errors import AdoptRefused, HoldsTheNode
from ..contract.fencing import EXIT_FENCED, FENCED_NOTE
from ..contract.jobstate import STATE_FILE, read_state
from .holds import holds_the_node
from ..contract.jobs import MARKER, JobKind, JobSpec, SpecError
from .fenceread import launch_refusal
from ..contract.ops import Adopted, Configured
from ..contract.vocab import AuditAction, JobState
from ..contract.needs import launch_problem
from .owners import Declarations
from ..contract.plain import to_plain
from ..contract.wire import ClusterInfo, JobStatus, KillVerdict, LaunchResult, LogChunk
from ..contract.jobstate import JobRecord
from .records import (START_TIME_TOLERANCE_S, _Live, descendants as _descendants, ended_pidfds,
                      first_start_of, group_members, leader_alive)
from .envs import EnvMissing, resolve as env_resolve
from .specdiff import spec_changes
from ..staging.launch import launch_refusal as stage_refusal, staged_argv
from ..contract.atomic import atomic_write_json as write_json_atomic

log = logging.getLogger(__name__)

# The wrapper: runs the command as its child and records how it ended. It first moves itself
# into the attempt's cgroup (contain.py), so every descendant is born there. Its first two
# arguments are the agent's python and the log cap in bytes. The command's output goes to a
# pipe (job.pipe, made by the agent: joblog.make_pipe, opened here at once, so nothing later
# needs its name: the home may be deleted under a running job) whose reader, the log's keeper (agents/logcap.py), is the one writer of
# job.log and cuts it before it passes the cap; it runs beside the command, in its group, so
# the cap holds with no agent alive. The wrapper holds the pipe open both ways (fd 3), so
# a keeper that dies never gives the job a SIGPIPE, and starts a killed keeper again (exit
# status over 128); a keeper that cannot run at all (exit 1, 2) leaves a plain copy (cat, to
# the wrapper's own job.log) and the agent's own cut (joblog.cap). Once the command ended it lets go of the pipe and waits
# for the keeper to write the rest, so an ended job's log is whole. With no pipe (no cap, no
# FIFOs here) the command writes job.log itself, as before.
WRAPPER = ('{ [ -z "$GPUDECK_CGROUP" ] || echo $$ > "$GPUDECK_CGROUP/cgroup.procs"; } 2>/dev/null; '
           'py=$1; cap=$2; shift 2; d=$GPUDECK_JOB_DIR; keeper=; '
           'if [ "$cap" -gt 0 ] 2>/dev/null && [ -p "$d/job.pipe" ] '
           '&& command exec 3<>"$d/job.pipe" 4>"$d/job.pipe" 5<"$d/job.pipe"; then '
           '( while "$py" -m gpudeck.agents.logcap "$d/job.log" "$cap"; c=$?; [ $c -gt 128 ]; '
           'do :; done; [ $c -eq 0 ] || exec cat ) <&5 3>&- 4>&- 5>&- & keeper=$!; '
           '"$@" >&4 2>&4 3>&- 4>&- 5>&-; code=$?; exec 3>&- 4>&- 5>&-; '
           'else "$@"; code=$?; fi; '
           'printf "%s\\n" "$code" > "$d/exit_code.tmp" && mv -f "$d/exit_code.tmp" "$d/exit_code"; '
           '[ -z "$keeper" ] || wait $keeper; exit $code')
MEMBERS_REFRESH_S = 5.0
LOG_CHECK_S = 5.0  # the agent's look at its jobs' log keepers (is one gone?) and log sizes
ADOPTED = "adopted.json"  # what an adoption read of the process (the environment's values stay in spec.json)


class JobSupervisor:
    """The local backend (jobs/backend.py JobBackend): the node's jobs as its own processes.
    ``role`` (``agent``, or ``watcher`` for the detached one) is how a refused kill names the
    process it would have taken down."""

    local = True

    def __init__(self, home: Path, gpu: Optional[GpuReader] = None, node: str = "local",
                 python: str = sys.executable, role: str = "agent") -> None:
        self.home = Path(home)
        self.jobs_dir = self.home / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._audit = AuditLog(self.home / "audit.log", node)
        self.gpu: GpuReader = gpu or GpuSampler(enabled=False)
        self._contain = Containment.detect()
        self.node = node
        self.python = python
        self._declared: dict[str, JobSpec] = {}  # every fleet file's jobs (self._owned keeps them apart)
        self._owned = Declarations(self.home, node)
        self._records: dict[str, JobRecord] = {}
        self._live: dict[str, _Live] = {}
        self._lock = threading.RLock()
        self._busy: set[str] = set()  # jobs with a launch/kill under way
        self._capper = joblog.Capper()
        self._logs_due = 0.0  # when cap_logs looks at the logs next (monotonic)
        self._stored: dict[str, tuple[int, Optional[JobSpec]]] = {}  # spec.json by its mtime
        self._dirs: dict[str, Path] = {}
        self._progress_files: dict[str, str] = {}  # GPUDECK_PROGRESS_FILE of each job, for the agent's readings
        self._role = role
        self._paths: list[str] = []  # disk_paths, made again only when the declarations change
        self._paths_of: Optional[dict[str, JobSpec]] = None  # the declarations _paths was made from
        self._job_errors: dict[str, str] = {}  # the last error logged per job: logged once, not every tick
        self._adopt_all()

    # ------------------------------------------------------------ state on disk

    def _job_dir(self, name: str) -> Path:
        d = self._dirs.get(name)
        if d is None:  # asked several times a tick for every job: build the path once
            d = self._dirs[name] = self.jobs_dir / name
        return d

    def _job_file(self, name: str, file: str) -> Path:
        """``<home>/jobs/<name>/<file>``, built once."""
        key = f"{name}/{file}"
        p = self._dirs.get(key)
        if p is None:
            p = self._dirs[key] = self._job_dir(name) / file
        return p

    def _save(self, rec: JobRecord) -> None:
        """state.json, atomically: on a full disk the last good version stays, the record in
        memory goes on, and the failure is an alert (agents/sense/writes.py)."""
        path = self._job_file(rec.name, STATE_FILE)
        try:
            write_json_atomic(path, rec.to_dict())
        except OSError as exc:
            writes.failed(path, exc)
        else:
            writes.ok(path)

    def spec_of(self, name: str) -> Optional[JobSpec]:
        """The declared spec, else the one the job was last launched with."""
        return self._declared.get(name) or self.stored_spec(name)

    def stored_spec(self, name: str) -> Optional[JobSpec]:
        """The spec the job was last launched with."""
        path = self._job_dir(name) / "spec.json"
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            return None
        cached = self._stored.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]  # asked several times a tick: parse the file only when it changed
        spec = None
        try:
            spec = JobSpec.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, SpecError) as exc:
            log.warning("job %s: unreadable spec.json: %s", name, exc)
        self._stored[name] = (stamp, spec)
        return spec

    def names(self) -> list[str]:
        return sorted(set(self._declared) | set(self._records))

    def declared(self) -> Mapping[str, JobSpec]:
        return MappingProxyType(self._declared)

    def knows(self, name: str) -> bool:
        return self.spec_of(name) is not None or name in self._records or self._job_dir(name).is_dir()

    def facts(self, name: str) -> Optional[JobFacts]:
        rec = self._records.get(name)
        return _facts(rec) if rec is not None else None

    def workdir(self, name: str) -> Path:
        """The job's own directory: where it runs when its spec names no ``cwd``."""
        return self._job_dir(name)

    def containment(self) -> Optional[Contained]:
        return Contained(self._contain.mode, self._contain.parent)

    def audit(self, action: AuditAction, job: Optional[str], details: Optional[dict[str, Any]] = None,
              **kw: Any) -> None:
        self._audit.write(action, job, details, **kw)

    def on_audit(self, hook: Optional[AuditHook]) -> None:
        self._audit.on_audit(hook)

    def read_note(self, name: str, note: str) -> Optional[dict[str, Any]]:
        try:
            doc = json.loads(self._job_file(name, note).read_text())
        except FileNotFoundError:
            return None
        if not isinstance(doc, dict):
            raise ValueError(f"{self._job_file(name, note)}: not a JSON object")
        return doc

    def write_note(self, name: str, note: str, doc: dict[str, Any]) -> None:
        path = self._job_file(name, note)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_json_atomic(path, doc, fsync=False)
        except OSError as exc:  # a full disk: an alert (agents/sense/writes.py), the caller's state stays in memory
            writes.failed(path, exc)
        else:
            writes.ok(path)

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

    # ------------------------------------------------------------ liveness

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

    # ------------------------------------------------------------ actions

    def _claim(self, name: str) -> None:
        with self._lock:
            if name in self._busy:
                raise JobError(f"job {name!r}: another launch or kill is under way; try again in a moment")
            self._busy.add(name)

    def check_fence(self, spec: JobSpec) -> None:
        """JobError when the job's output holds another node's attempt: the job was moved there,
        and a launch here would take it back (agents/jobs/fenceread.py)."""
        cwd = os.path.expanduser(spec.cwd) if spec.cwd else str(self._job_dir(spec.name))
        why = launch_refusal(spec, self.node, cwd)
        if why is not None:
            raise JobError(f"job {spec.name!r} is not started on {self.node}: {why}. A launch here would take "
                           f"it back from there; `gpudeck move {spec.name} --to {self.node}` brings it here")

    def launch(self, name: str, *, relaunch: bool = False, fence_checked: bool = False) -> LaunchResult:
        """Start ``name`` with the fleet file's spec (the declared one), else the one it last ran
        with. A relaunch whose fleet file changed since says what changed (``changed``)."""
        spec = self.spec_of(name)
        if spec is None:
            known = ", ".join(self.names()) or "none"
            raise JobError(f"unknown job {name!r} on node {self.node} (known: {known})")
        try:  # a python_env: the build its name links to now (agents/jobs/envs.py)
            python, _ = env_resolve(spec, self.home, self.python, self.node)
        except EnvMissing as exc:
            raise JobError(str(exc)) from None
        problem = launch_problem(spec, python, str(self._job_dir(name)))  # before anything starts
        if problem:
            raise JobError(problem)
        problem = stage_refusal(spec, self.home)  # a stage that cannot be read or does not fit (agents/staging/)
        if problem:
            raise JobError(problem)
        if not fence_checked:
            self.check_fence(spec)
        stored = self.stored_spec(name) if relaunch else None
        changed = spec_changes(stored, spec) if stored is not None else []
        self._claim(name)
        try:
            result = self._launch(spec, relaunch)
        finally:
            self._busy.discard(name)
        return dataclasses.replace(result, changed=changed) if changed else result

    def spec_changes(self, name: str) -> list[str]:
        """What the fleet file changed since ``name`` last launched (both specs are cached)."""
        declared = self._declared.get(name)
        stored = self.stored_spec(name) if declared is not None else None
        return spec_changes(stored, declared) if stored is not None and declared is not None else []

    def _launch(self, spec: JobSpec, relaunch: bool) -> LaunchResult:
        name = spec.name
        with self._lock:
            rec = self._records.get(name) or JobRecord(name=name)
            if rec.state.alive and (self._leader_alive(rec) or self._group_members(rec) or self._cgroup_members(rec)):
                raise JobError(f"job {name!r} is already running on {self.node} (pid {rec.pid}, "
                               f"attempt {rec.attempt}); kill it first or use relaunch")
            d = self._job_dir(name)
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            (d / "exit_code").unlink(missing_ok=True)
            (d / FENCED_NOTE).unlink(missing_ok=True)
            self._clear_markers(spec)
            write_json_atomic(d / "spec.json", spec.to_dict())
            try:
                python, env_vars = env_resolve(spec, self.home, self.python, self.node)
            except EnvMissing as exc:
                raise JobError(str(exc)) from None
            argv = spec.argv(python)
            env = self._launch_env(spec, d, rec.attempt + 1, env_vars)
            token = self._contain.prepare(self.home, name, rec.attempt + 1, env)
            cwd = os.path.expanduser(spec.cwd) if spec.cwd else str(d)
            log_path = d / "job.log"
            joblog.make_pipe(d / joblog.PIPE, int(spec.log_max_mb * 2**20) > 0)
            with open(log_path, "ab") as logf:
                logf.write(f"=== gpudeck: attempt {rec.attempt + 1} of {name} at "
                           f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {shlex.join(argv)}\n".encode())
                logf.flush()
                try:
                    popen = subprocess.Popen(["/bin/sh", "-c", WRAPPER, "gpudeck-job", sys.executable,
                                              str(int(spec.log_max_mb * 2**20)), *staged_argv(spec, d, self.home, argv)],
                                             stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                             cwd=cwd, env=env, start_new_session=True, close_fds=True)
                except OSError as exc:
                    raise JobError(f"job {name!r}: cannot start in {cwd}: {exc}") from None
            try:
                create_time = psutil.Process(popen.pid).create_time()
            except psutil.Error:
                create_time = time.time()
            started = time.time()
            rec = JobRecord(name=name, state=JobState.RUNNING, attempt=rec.attempt + 1, pid=popen.pid,
                            pgid=popen.pid, create_time=create_time, started_at=started,
                            first_started_at=first_start_of(rec, started),
                            last_kill=rec.last_kill, argv=list(argv), token=token,
                            start_ticks=killing.start_ticks(popen.pid),
                            cgroup=env.get("GPUDECK_CGROUP"), gpus=len(spec.gpus), past=rec.carried())
            self._records[name] = rec
            if name in self._live:
                self._live[name].close_pidfd()
            self._live[name] = _Live(popen=popen)
            self._save(rec)
            self.audit(AuditAction.RELAUNCH if relaunch else AuditAction.LAUNCH, name, pid=popen.pid,
                       attempt=rec.attempt, gpus=spec.gpus, argv=argv)
            return LaunchResult(job=name, pid=popen.pid, attempt=rec.attempt, log=str(log_path), argv=list(argv))

    def _launch_env(self, spec: JobSpec, d: Path, attempt: int, env_vars: dict[str, str]) -> dict[str, str]:
        """The environment of a job's attempt: the agent's, the spec's, its python_env's, gpudeck's
        own, and its GPUs. An adopted job's recorded environment is all of it (the agent's own is
        not added), its CUDA variables included; a fleet file's version of the name is launched as
        usual."""
        name = spec.name
        exact = name not in self._declared and (d / ADOPTED).exists()
        env = {} if exact else dict(os.environ)
        env.update(spec.env)
        env.update(env_vars)
        env.update(GPUDECK_JOB=name, GPUDECK_JOB_DIR=str(d), GPUDECK_NODE=self.node,
                   GPUDECK_ATTEMPT=str(attempt),
                   GPUDECK_PROGRESS_FILE=str(d / "progress.json"))
        if spec.gpus and not exact:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, spec.gpus))
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's indices = NVML's indices
        return env

    def adopt(self, pid: int, name: str, started_at: Optional[float] = None,
                      progress_file: Optional[str] = None, kind: str = JobKind.COMMAND.value) -> Adopted:
        """Make ``pid``, a process gpudeck did not start, the job ``name``: its command line,
        working directory and environment (read from /proc: this user's processes only), its
        process group and its GPUs go into spec.json and state.json, so it is shown, killed and
        verified, relaunched (the same command, directory and environment, contained) and
        re-adopted by the next agent as a launched job is. AdoptRefused says why not, and
        HoldsTheNode where the job's kill would take the node down (agents/jobs/holds.py)."""
        if pid == 1:  # before anything is read: init's tree is every process on the node
            self._refuse_holds(pid, AuditAction.ADOPT_REFUSED)
        proc, create_time = self._adoptable(pid, started_at)
        with self._lock:
            owner = self.owner_of(pid)
            if owner is not None:
                raise AdoptRefused("owned", f"pid {pid} already belongs to job {owner!r} on node {self.node}")
            # before whose it is: an sshd session or an agent's ancestor is often another user's
            # (root's), and that its kill would take the node down is what the operator must read
            self._refuse_holds(pid, AuditAction.ADOPT_REFUSED)
            try:
                uid = proc.uids().real
            except psutil.Error:
                uid = None
            if uid != os.getuid():
                who = _user_name(uid)
                raise AdoptRefused("not_yours", f"pid {pid} on node {self.node} belongs to {who}; an agent adopts "
                                                f"only its own user's processes ({_user_name(os.getuid())})")
            if name in self._records or name in self._declared:
                raise AdoptRefused("name_taken", f"node {self.node} already holds a job named {name!r}; adopt it "
                                                 f"under another name (--as)")
            argv, cwd, environ = self._process_facts(proc, pid)
            try:
                pgid: Optional[int] = os.getpgid(pid)
            except OSError:
                pgid = None
            # a group is the job's only where the process leads it: another's group (a login shell's,
            # the agent's own) holds processes that are not the job's
            own_group = pgid if pgid == pid and pgid != os.getpgid(0) else None
            tree = {pid, *(_descendants(pid) or ())}
            gpus = [i for i in range(len(self.gpu.uuids)) if any(p in tree for p, _ in self.gpu.processes(i))]
            env = {k: v for k, v in environ.items() if not k.startswith("GPUDECK_")}
            progress = os.path.join(cwd, os.path.expanduser(progress_file)) if progress_file else None
            try:
                spec = JobSpec(name=name, kind=JobKind(kind), command=list(argv), cwd=cwd, env=env, gpus=gpus,
                               progress=progress)
            except (SpecError, ValueError) as exc:
                raise AdoptRefused("name_taken" if "name" in str(exc) else "not_yours", str(exc)) from None
            d = self._job_dir(name)
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_json_atomic(d / "spec.json", spec.to_dict())
            write_json_atomic(d / ADOPTED, {"pid": pid, "pgid": pgid, "create_time": create_time, "uid": uid,
                                            "argv": list(argv), "cwd": cwd, "adopted_at": time.time()})
            rec = JobRecord(name=name, state=JobState.RUNNING, attempt=1, pid=pid, pgid=own_group,
                            create_time=create_time, started_at=create_time, first_started_at=create_time,
                            argv=list(argv), start_ticks=killing.start_ticks(pid), adopted=True, gpus=len(gpus))
            self._records[name] = rec
            self._live[name] = _Live()
            self._save(rec)
            self.audit(AuditAction.ADOPT_PID, name, pid=pid, pgid=pgid, gpus=gpus, argv=list(argv), cwd=cwd)
        return Adopted(job=name, pid=pid, pgid=own_group, gpus=gpus, argv=list(argv), cwd=cwd,
                       env_names=sorted(env), started_at=create_time)

    def _adoptable(self, pid: int, started_at: Optional[float]) -> tuple[psutil.Process, float]:
        """The process ``pid`` and its start time; AdoptRefused where there is none, it cannot be
        read, or it started at another time than ``started_at`` (its pid reused)."""
        try:
            proc = psutil.Process(pid)
            create_time = proc.create_time()
            if proc.status() == psutil.STATUS_ZOMBIE:
                raise psutil.NoSuchProcess(pid)
        except psutil.NoSuchProcess:
            raise AdoptRefused("no_such_pid", f"no process {pid} on node {self.node}") from None
        except psutil.Error as exc:
            raise AdoptRefused("not_yours", f"pid {pid} on node {self.node} cannot be read: {exc}") from None
        if started_at is not None and abs(create_time - started_at) > START_TIME_TOLERANCE_S:
            raise AdoptRefused("pid_reused", f"pid {pid} on node {self.node} is another process now (started "
                                             f"{time.strftime('%H:%M:%S', time.localtime(create_time))}, not "
                                             f"{time.strftime('%H:%M:%S', time.localtime(started_at))} as listed); "
                                             f"nothing adopted")
        return proc, create_time

    def _process_facts(self, proc: psutil.Process, pid: int) -> tuple[list[str], str, dict[str, str]]:
        """An adopted process's command line, working directory and environment."""
        try:
            argv, cwd, environ = proc.cmdline(), proc.cwd(), proc.environ()
        except psutil.NoSuchProcess:
            raise AdoptRefused("no_such_pid", f"pid {pid} on node {self.node} ended meanwhile") from None
        except psutil.Error as exc:
            raise AdoptRefused("not_yours", f"pid {pid} on node {self.node}: its command line, directory or "
                                            f"environment cannot be read: {exc}") from None
        if not argv:
            raise AdoptRefused("not_yours", f"pid {pid} on node {self.node} has no command line (a kernel "
                                            f"thread?); nothing adopted")
        return argv, cwd, environ

    def set_blocked(self, name: str, blocked: bool) -> None:
        """A job that waits on its ``after`` (agents/watch/phases.py): ``blocked`` (a job it runs
        after failed or gave up), or back to ``pending`` (that job runs again). Kept in
        state.json, so the next agent shows it too; a launch of the job starts it as usual."""
        with self._lock:
            rec = self._records.get(name)
            if rec is not None and rec.state not in (JobState.PENDING, JobState.BLOCKED):
                return  # launched meanwhile
            state = JobState.BLOCKED if blocked else JobState.PENDING
            if rec is None:
                if not blocked:
                    return
                rec = self._records[name] = JobRecord(name=name)
                self._live[name] = _Live()
                self._job_dir(name).mkdir(parents=True, exist_ok=True, mode=0o700)
            if rec.state is not state:
                rec.state = state
                self._save(rec)

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

    def _refuse_holds(self, pid: int, refused: AuditAction, job: Optional[str] = None,
                      members: Optional[set[int]] = None) -> None:
        """HoldsTheNode, audited as ``refused``, where a kill of ``pid`` would take the node down
        (agents/jobs/holds.py)."""
        why = holds_the_node(pid, self.node, os.getpid(), self._role, self.owner_of, job, members)
        if why is None:
            return
        self.audit(refused, job, pid=pid, reason=why)
        raise HoldsTheNode(f"{why}; refused, nothing "
                           f"{'adopted' if refused is AuditAction.ADOPT_REFUSED else 'signalled'}")

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

    def logs(self, name: str, lines: int = 100, offset: Optional[int] = None) -> LogChunk:
        """The last ``lines`` lines, or what came after byte ``offset`` (for --follow)."""
        if self.spec_of(name) is None and name not in self._records:
            raise JobError(f"unknown job {name!r} on node {self.node} (known: {', '.join(self.names()) or 'none'})")
        path = self._job_dir(name) / "job.log"
        return joblog.tail(name, path, lines) if offset is None else joblog.read_on(name, path, int(offset))

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


def _facts(rec: JobRecord) -> JobFacts:
    return JobFacts(name=rec.name, state=rec.state, attempt=rec.attempt, pid=rec.pid, exit_code=rec.exit_code,
                    started_at=rec.started_at, first_started_at=rec.first_started_at, ended_at=rec.ended_at,
                    fenced=rec.fenced)


__all__ = ["ADOPTED", "JobError", "JobSupervisor", "WRAPPER"]


def _user_name(uid: Optional[int]) -> str:
    if uid is None:
        return "an unknown user"
    try:
        import pwd
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"
