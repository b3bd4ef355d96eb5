"""The cluster backend's kill (``scancel``, then proof by the state read back and the GPUs'
own reading) and relaunch (a requeue, or a resubmission once Slurm forgot the task); over
submit.py.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from ..contract import plain
from ..contract.cluster import task_name
from ..contract.jobs import JobSpec
from ..contract.units import index_ranges
from ..contract.vocab import AuditAction, JobState
from ..contract.wire import GpuHolder, KillVerdict, LaunchResult
from .slurm import TERMINAL, SlurmError

from .core import job_state
from .submit import ClusterSubmit

log = logging.getLogger("agents")


class ClusterKills(ClusterSubmit):
    """Kill with proof, and relaunch."""

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
