"""The cluster backend's polls (one squeue per ``poll_s``, a few soon after an action), what they
keep of what Slurm said, and the fleet's renames; over core.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Optional

from ..contract.vocab import JobState
from .runs import SlurmSaid, write_said
from .slurm import TERMINAL, QueueRow, SlurmError, newer

from .core import OBSERVER_DELAY_S, ClusterCore, job_state

log = logging.getLogger("agents")


class ClusterPolling(ClusterCore):
    """The polls and what they keep."""

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
