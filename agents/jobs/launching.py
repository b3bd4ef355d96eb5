"""The local backend's launch (a job detached under its wrapper) and adopt (a process gpudeck
did not start), and a job held for its phases; over liveness.py.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import psutil

from . import joblog, killing
from .backend import JobError
from ..contract.errors import AdoptRefused, HoldsTheNode
from ..contract.fencing import FENCED_NOTE
from .holds import holds_the_node
from ..contract.jobs import JobKind, JobSpec, SpecError
from .fenceread import launch_refusal
from ..contract.ops import Adopted
from ..contract.vocab import AuditAction, JobState
from ..contract.needs import launch_problem
from ..contract.wire import LaunchResult
from ..contract.jobstate import JobRecord
from .records import START_TIME_TOLERANCE_S, _Live, descendants as _descendants, first_start_of
from .envs import EnvMissing, resolve as env_resolve
from .specdiff import spec_changes
from ..staging.launch import launch_refusal as stage_refusal, staged_argv
from ..contract.atomic import atomic_write_json as write_json_atomic

from .liveness import SupervisorLiveness

# the supervisor's one logger, whichever of its parts speaks
log = logging.getLogger(__name__.rsplit(".", 1)[0] + ".supervisor")

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
ADOPTED = "adopted.json"  # what an adoption read of the process (the environment's values stay in spec.json)


class SupervisorLaunch(SupervisorLiveness):
    """Launch, adopt, and a job blocked for its phases."""

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
        if stored is None or declared is None:
            return []
        hit = self._changes.get(name)  # stored_spec gives the same object while spec.json is unchanged
        if hit is None or hit[0] is not stored or hit[1] is not declared:
            hit = self._changes[name] = (stored, declared, tuple(spec_changes(stored, declared)))
        return list(hit[2])

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



def _user_name(uid: Optional[int]) -> str:
    if uid is None:
        return "an unknown user"
    try:
        import pwd
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"
