"""Launch, adopt, kill-and-verify and relaunch jobs on one node.

Jobs do not belong to the agent. Each runs detached in its own session and process group,
under a small ``sh`` wrapper that records the exit code, so it survives the agent, the SSH
link and the operator's laptop. Everything the supervisor knows about a job lives in its
state directory, ``<home>/jobs/<name>/``::

    spec.json    the JobSpec it was launched with (relaunch reuses it)
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
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import psutil

from gpudeck.agents.gpu import GpuSampler
from gpudeck.agents.jobs import JobSpec, JobState, SpecError
from gpudeck.agents.protocol import GpuHolder, KillVerdict, LaunchResult, LogChunk, ProtocolError, from_dict, to_plain
from gpudeck.agents.workers.common.atomic import atomic_write_json as write_json_atomic

log = logging.getLogger(__name__)

# The wrapper: runs the command as its child and records how it ended.
WRAPPER = ('"$@"; code=$?; '
           'printf "%s\\n" "$code" > "$GPUDECK_JOB_DIR/exit_code.tmp" && '
           'mv -f "$GPUDECK_JOB_DIR/exit_code.tmp" "$GPUDECK_JOB_DIR/exit_code"; exit $code')
START_TIME_TOLERANCE_S = 0.05
MEMBERS_REFRESH_S = 5.0


class JobError(Exception):
    """A request the supervisor refuses; the message says why and what to do."""


@dataclass
class JobRecord:
    """state.json: what the supervisor knows of a job between agents."""

    name: str
    state: JobState = JobState.PENDING
    attempt: int = 0
    pid: Optional[int] = None
    pgid: Optional[int] = None
    create_time: Optional[float] = None
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    exit_code: Optional[int] = None
    kill_requested: bool = False
    last_kill: Optional[KillVerdict] = None
    argv: list[str] = field(default_factory=list)  # the command line of this attempt

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "JobRecord":
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in d.items() if k in known}
        values["state"] = JobState(values.get("state", JobState.PENDING))
        kill = values.get("last_kill")
        try:
            values["last_kill"] = from_dict(KillVerdict, kill) if isinstance(kill, dict) else None
        except ProtocolError:  # a verdict of a form this version does not read: not shown, not fatal
            values["last_kill"] = None
        return cls(**values)


@dataclass
class _Live:
    """In-memory only: a Popen to reap while this agent is the parent, cached group members."""

    popen: Optional[subprocess.Popen] = None
    members: list[int] = field(default_factory=list)
    members_at: float = 0.0
    # a pidfd names the leader itself, not its number: a reused pid can never answer for it,
    # and asking whether it ended costs one poll(2), no /proc parsing
    pidfd: Optional[int] = None

    def close_pidfd(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class JobSupervisor:
    def __init__(self, home: Path, gpu: Optional[GpuSampler] = None, node: str = "local",
                 python: str = sys.executable) -> None:
        self.home = Path(home)
        self.jobs_dir = self.home / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.audit_path = self.home / "audit.log"
        self.gpu = gpu or GpuSampler(enabled=False)
        self.node = node
        self.python = python
        self.declared: dict[str, JobSpec] = {}
        self.records: dict[str, JobRecord] = {}
        self._live: dict[str, _Live] = {}
        self._lock = threading.RLock()
        self._busy: set[str] = set()  # jobs with a launch/kill under way
        self._stored: dict[str, tuple[int, Optional[JobSpec]]] = {}  # spec.json by its mtime
        self.adopt()

    # ------------------------------------------------------------ state on disk

    def job_dir(self, name: str) -> Path:
        return self.jobs_dir / name

    def _save(self, rec: JobRecord) -> None:
        write_json_atomic(self.job_dir(rec.name) / "state.json", rec.to_dict())

    def spec_of(self, name: str) -> Optional[JobSpec]:
        """The declared spec, else the one the job was last launched with."""
        return self.declared.get(name) or self.stored_spec(name)

    def stored_spec(self, name: str) -> Optional[JobSpec]:
        """The spec the job was last launched with."""
        path = self.job_dir(name) / "spec.json"
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
        return sorted(set(self.declared) | set(self.records))

    def audit(self, action: str, job: Optional[str], details: Optional[dict[str, Any]] = None, **kw: Any) -> None:
        details = {**(details or {}), **kw}
        entry = {"t": round(time.time(), 3), "node": self.node, "action": action, "job": job}
        entry.update((k, v) for k, v in details.items() if k not in entry)
        with open(self.audit_path, "a") as f:
            f.write(json.dumps(entry, default=str) + "\n")

    def adopt(self) -> None:
        """Read every job's state.json; keep what is still alive, settle what is not."""
        for d in sorted(self.jobs_dir.iterdir()) if self.jobs_dir.exists() else []:
            path = d / "state.json"
            if not path.is_file():
                continue
            try:
                rec = JobRecord.from_dict(json.loads(path.read_text()))
            except (ValueError, TypeError) as exc:
                log.warning("job %s: unreadable state.json, ignored: %s", d.name, exc)
                continue
            self.records[rec.name] = rec
            self._live[rec.name] = _Live()
            if rec.state.alive:
                if self._leader_alive(rec) or self._group_members(rec):
                    self.audit("adopt", rec.name, pid=rec.pid, pgid=rec.pgid)
                else:
                    self._settle(rec)
                    self.audit("adopt-ended", rec.name, state=rec.state, exit_code=rec.exit_code)

    def configure(self, specs: list[JobSpec]) -> None:
        with self._lock:
            self.declared = {s.name: s for s in specs}

    # ------------------------------------------------------------ liveness

    def _leader_alive(self, rec: JobRecord) -> bool:
        if rec.pid is None:
            return False
        live = self._live.setdefault(rec.name, _Live())
        if live.popen is not None and live.popen.poll() is not None:
            live.close_pidfd()
            return False  # our child, and reaped just now
        if live.pidfd is not None:
            if select.select([live.pidfd], [], [], 0)[0]:  # readable: the process has ended
                live.close_pidfd()
                return False
            return True
        try:
            p = psutil.Process(rec.pid)
            if abs(p.create_time() - (rec.create_time or 0)) > START_TIME_TOLERANCE_S:
                return False  # the pid now belongs to another process
            if p.status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.Error:
            return False
        if hasattr(os, "pidfd_open"):
            try:
                fd = os.pidfd_open(rec.pid)
                # the pid was checked above; check again through the fd, which cannot be reused
                if abs(psutil.Process(rec.pid).create_time() - (rec.create_time or 0)) <= START_TIME_TOLERANCE_S:
                    live.pidfd = fd
                else:
                    os.close(fd)
                    return False
            except (OSError, psutil.Error):
                pass  # no pidfds here (old kernel, a sandbox): ask /proc every time
        return True

    def _group_members(self, rec: JobRecord) -> list[int]:
        """Live processes of the job: its process group, plus descendants of the leader that
        left the group. Scans /proc, so it is not for every tick."""
        if rec.pgid is None:
            return []
        pids = []
        leader_ok = self._leader_alive(rec)
        try:
            os.killpg(rec.pgid, 0)
            group_exists = True
        except ProcessLookupError:
            group_exists = False
        except PermissionError:
            group_exists = True
        if group_exists:
            for p in psutil.process_iter(["status"]):
                try:
                    if p.info["status"] == psutil.STATUS_ZOMBIE or os.getpgid(p.pid) != rec.pgid:
                        continue
                except (ProcessLookupError, psutil.Error):
                    continue
                if p.pid == rec.pid and not leader_ok:
                    continue  # a stranger that took the leader's pid (and so its group id)
                pids.append(p.pid)
        if leader_ok:
            try:
                for c in psutil.Process(rec.pid).children(recursive=True):
                    if c.pid not in pids and c.status() != psutil.STATUS_ZOMBIE:
                        pids.append(c.pid)
            except psutil.Error:
                pass
        return sorted(pids)

    def members(self, name: str, now: Optional[float] = None) -> list[int]:
        """Cached group members, refreshed every few seconds."""
        now = time.monotonic() if now is None else now
        rec, live = self.records.get(name), self._live.get(name)
        if rec is None or live is None or not rec.state.alive:
            return []
        if now - live.members_at > MEMBERS_REFRESH_S:
            tree = _descendants(rec.pid) if rec.pid and self._leader_alive(rec) else None
            # the cheap walk down /proc's children lists; the full scan only where there is none
            live.members = sorted({rec.pid, *tree}) if tree is not None else self._group_members(rec)
            live.members_at = now
        return live.members

    def _read_exit_code(self, name: str) -> Optional[int]:
        try:
            return int((self.job_dir(name) / "exit_code").read_text().strip())
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
        if rec.kill_requested:
            rec.state = JobState.KILLED
        elif code is None:
            rec.state = JobState.LOST
        else:
            rec.state = JobState.EXITED if code == 0 else JobState.FAILED
        rec.ended_at = rec.ended_at or time.time()
        if live:
            live.members, live.popen = [], None
            live.close_pidfd()
        self._save(rec)

    def refresh(self) -> None:
        """One tick: notice jobs that ended since the last one."""
        with self._lock:
            for name, rec in self.records.items():
                if name in self._busy or not rec.state.alive:
                    continue
                if self._leader_alive(rec):
                    continue
                # the leader is gone; members of its group may still run (and hold a GPU)
                live = self._live.setdefault(name, _Live())
                live.members, live.members_at = self._group_members(rec), time.monotonic()
                if not live.members:
                    self._settle(rec)
                    self.audit("ended", name, state=rec.state, exit_code=rec.exit_code)

    def owner_of(self, pid: int) -> Optional[str]:
        """The job a pid belongs to: by process group, else by ancestry."""
        try:
            pgid = os.getpgid(pid)
        except (ProcessLookupError, PermissionError):
            pgid = None
        by_pgid = {r.pgid: n for n, r in self.records.items() if r.pgid and r.state.alive}
        if pgid in by_pgid:
            return by_pgid[pgid]
        by_pid = {r.pid: n for n, r in self.records.items() if r.pid and r.state.alive}
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

    def launch(self, name: str, *, relaunch: bool = False) -> LaunchResult:
        spec = (self.stored_spec(name) or self.declared.get(name)) if relaunch else self.spec_of(name)
        if spec is None:
            known = ", ".join(self.names()) or "none"
            raise JobError(f"unknown job {name!r} on node {self.node} (known: {known})")
        self._claim(name)
        try:
            return self._launch(spec, relaunch)
        finally:
            self._busy.discard(name)

    def _launch(self, spec: JobSpec, relaunch: bool) -> LaunchResult:
        name = spec.name
        with self._lock:
            rec = self.records.get(name) or JobRecord(name=name)
            if rec.state.alive and (self._leader_alive(rec) or self._group_members(rec)):
                raise JobError(f"job {name!r} is already running on {self.node} (pid {rec.pid}, "
                               f"attempt {rec.attempt}); kill it first or use relaunch")
            d = self.job_dir(name)
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            (d / "exit_code").unlink(missing_ok=True)
            write_json_atomic(d / "spec.json", spec.to_dict())
            argv = spec.argv(self.python)
            env = dict(os.environ)
            env.update(spec.env)
            env.update(GPUDECK_JOB=name, GPUDECK_JOB_DIR=str(d), GPUDECK_ATTEMPT=str(rec.attempt + 1),
                       GPUDECK_PROGRESS_FILE=str(d / "progress.json"))
            if spec.gpus:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, spec.gpus))
                env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's indices = NVML's indices
            cwd = os.path.expanduser(spec.cwd) if spec.cwd else str(d)
            log_path = d / "job.log"
            with open(log_path, "ab") as logf:
                logf.write(f"=== gpudeck: attempt {rec.attempt + 1} of {name} at "
                           f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {spec.describe()}\n".encode())
                logf.flush()
                try:
                    popen = subprocess.Popen(["/bin/sh", "-c", WRAPPER, "gpudeck-job", *argv],
                                             stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                             cwd=cwd, env=env, start_new_session=True, close_fds=True)
                except OSError as exc:
                    raise JobError(f"job {name!r}: cannot start in {cwd}: {exc}") from None
            try:
                create_time = psutil.Process(popen.pid).create_time()
            except psutil.Error:
                create_time = time.time()
            rec = JobRecord(name=name, state=JobState.RUNNING, attempt=rec.attempt + 1, pid=popen.pid,
                            pgid=popen.pid, create_time=create_time, started_at=time.time(),
                            last_kill=rec.last_kill, argv=list(argv))
            self.records[name] = rec
            if name in self._live:
                self._live[name].close_pidfd()
            self._live[name] = _Live(popen=popen)
            self._save(rec)
            self.audit("relaunch" if relaunch else "launch", name, pid=popen.pid, attempt=rec.attempt,
                       gpus=spec.gpus, argv=argv)
            return LaunchResult(job=name, pid=popen.pid, attempt=rec.attempt, log=str(log_path), argv=list(argv))

    def kill(self, name: str, grace_s: float = 10.0, verify_timeout_s: float = 15.0) -> KillVerdict:
        """SIGTERM to the group, SIGKILL after ``grace_s``, then verify against /proc and NVML."""
        rec = self.records.get(name)
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

    def _kill(self, rec: JobRecord, grace_s: float, verify_timeout_s: float) -> KillVerdict:
        name = rec.name
        t0 = time.monotonic()
        members = self._group_members(rec) if rec.state.alive else []
        if not members:
            if rec.state.alive:
                self._settle(rec)
            verdict = KillVerdict(job=name, ok=True, already=rec.state.value, exit_code=rec.exit_code, at=time.time(),
                                  message=f"{name} had already ended ({rec.state}"
                                          + (f", exit code {rec.exit_code})" if rec.exit_code is not None else ")"))
            self.audit("kill", name, to_plain(verdict))
            return verdict
        # GPU memory the job's processes hold now, on every GPU (a job may ignore CUDA_VISIBLE_DEVICES)
        held_before = self._gpu_holdings(set(members))
        rec.kill_requested = True
        rec.state = JobState.STOPPING
        self._save(rec)
        self.audit("kill-start", name, pids=members, grace_s=grace_s)
        signal_used = "SIGTERM"
        self._signal(rec, members, signal.SIGTERM)
        alive = self._wait_gone(rec, members, grace_s)
        if alive:
            signal_used = "SIGKILL"
            self._signal(rec, alive, signal.SIGKILL)
            alive = self._wait_gone(rec, alive, 5.0)
        # NVML may report a dead process's memory for a moment: wait until it lets go
        deadline = time.monotonic() + verify_timeout_s
        gpu_held = self._gpu_holdings(set(members))
        while gpu_held and time.monotonic() < deadline:
            time.sleep(0.1)
            gpu_held = self._gpu_holdings(set(members))
        seconds = time.monotonic() - t0
        freed_mib = sum(m for (_, _, m) in held_before) - sum(m for (_, _, m) in gpu_held)
        ok = not alive and not gpu_held
        if ok:
            message = (f"freed {freed_mib / 1024:.1f} GiB in {seconds:.1f} s" if held_before
                       else f"stopped in {seconds:.1f} s ({signal_used}); it held no GPU memory")
        else:
            parts = [f"pid {p} still alive" for p in alive]
            parts += [f"still held by pid {pid} on GPU {gpu} ({mib / 1024:.1f} GiB)" for pid, gpu, mib in gpu_held]
            message = "; ".join(parts)
        verdict = KillVerdict(job=name, ok=ok, signal=signal_used, seconds=round(seconds, 3),
                              freed_gib=round(freed_mib / 1024, 3), pids=members, survivors=alive,
                              gpu_holders=[GpuHolder(pid=p, gpu=g, mib=m) for p, g, m in gpu_held],
                              message=message, at=time.time())
        with self._lock:
            rec.last_kill = verdict
            if not alive:
                self._settle(rec)
            else:
                self._save(rec)
        self.audit("kill", name, to_plain(verdict))
        return verdict

    def _signal(self, rec: JobRecord, pids: list[int], sig: int) -> None:
        try:
            os.killpg(rec.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in pids:  # descendants that left the group
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _wait_gone(self, rec: JobRecord, pids: list[int], timeout_s: float) -> list[int]:
        deadline = time.monotonic() + timeout_s
        while True:
            live = self._live.get(rec.name)
            if live and live.popen is not None:
                live.popen.poll()  # reap our own child so it does not linger as a zombie
            alive = [p for p in pids if _running(p)]
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.05)

    def _gpu_holdings(self, pids: set[int]) -> list[tuple[int, int, float]]:
        held = []
        for index in range(len(self.gpu.uuids)):
            for pid, mib in self.gpu.processes(index):
                if pid in pids:
                    held.append((pid, index, mib))
        return held

    def relaunch(self, name: str, grace_s: float = 10.0) -> LaunchResult:
        """Same spec, next attempt. A job still running is killed first."""
        rec = self.records.get(name)
        verdict = None
        if rec is not None and rec.state.alive:
            verdict = self.kill(name, grace_s)
            if not verdict.ok:
                raise JobError(f"job {name!r}: not relaunched, the kill did not finish: {verdict.message}")
        result = self.launch(name, relaunch=True)
        return dataclasses.replace(result, kill=verdict) if verdict is not None else result

    def logs(self, name: str, lines: int = 100, offset: Optional[int] = None) -> LogChunk:
        """The last ``lines`` lines, or everything after byte ``offset`` (for --follow)."""
        if self.spec_of(name) is None and name not in self.records:
            raise JobError(f"unknown job {name!r} on node {self.node} (known: {', '.join(self.names()) or 'none'})")
        path = self.job_dir(name) / "job.log"
        if not path.exists():
            return LogChunk(job=name, text="", offset=0, path=str(path))
        size = path.stat().st_size
        with open(path, "rb") as f:
            if offset is not None:
                offset = min(max(0, offset), size)
                f.seek(offset)
                data = f.read(1 << 20)
                return LogChunk(job=name, text=data.decode(errors="replace"), offset=offset + len(data),
                                path=str(path))
            block, data = 1 << 16, b""
            pos = size
            while pos > 0 and data.count(b"\n") <= lines:
                step = min(block, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
        tail = b"\n".join(data.split(b"\n")[-(lines + 1):]) if lines > 0 else b""
        return LogChunk(job=name, text=tail.decode(errors="replace"), offset=size, path=str(path))


def _descendants(pid: int) -> Optional[list[int]]:
    """Every descendant of ``pid`` from /proc/<pid>/task/<tid>/children: a few small reads,
    where a scan of every process costs milliseconds. None where the kernel lacks the file."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children", "rb") as f:
                    kids = [int(c) for c in f.read().split()]
            except FileNotFoundError:
                if p == pid and not out:
                    return None  # no children lists in this kernel (or the leader just ended)
                continue
            except (OSError, ValueError):
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
