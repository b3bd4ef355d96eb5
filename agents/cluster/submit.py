"""The cluster backend's launch: ``sbatch`` of a job's array (its arguments, the job's env file,
the arrays it runs after); over polling.py.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
from pathlib import Path
from typing import Any, Optional, cast

from ..contract.errors import Refusal
from ..contract.cluster import slurm_job_name, task_name
from ..contract.jobs import JobSpec
from ..contract.units import index_ranges
from ..contract.vocab import AuditAction
from ..contract.wire import KillVerdict, LaunchResult
from ..jobs.backend import JobError
from .runs import TASK_TOKEN, install_wrapper
from .slurm import SlurmError, refused_for_input

from .core import REQUEUE_SIGNAL_S
from .polling import ClusterPolling

log = logging.getLogger("agents")


class ClusterSubmit(ClusterPolling):
    """A job's tasks submitted as an array."""

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
