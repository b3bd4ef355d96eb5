"""The agent of a cluster's login node: gpudeck submits, observes, kills with proof and requeues
through the scheduler, and never schedules (docs/slurm.md).

    backend.py  ClusterJobs: the agent's second job backend (rows per task, what is known, configure),
                over its layers, each over the one before:
    core.py     its state, the declared jobs kept in the home, run dirs, what Slurm said of each task
    polling.py  squeue per poll_s and soon after an action; a fleet's rename
    submit.py   sbatch of a job's array
    kills.py    scancel with proof; relaunch (a requeue, or a resubmission)
    slurm.py    Slurm through squeue, sbatch, scancel and scontrol; parsing their output
    runs.py     what a job keeps on the shared filesystem: the wrapper, attempts, logs, progress
    observe.py  the observer beside a running task (srun --overlap ... --observe)

ClusterJobs is a JobBackend (agents/jobs/backend.py) beside the node's own supervisor: the agent
of agents/node/ holds one or the other. The scheduler's side is the :class:`Scheduler` interface
below, which slurm.Slurm implements; a Kubernetes backend would be a second implementation (an
indexed Job for the array, its pods for the tasks, a delete for the cancel, an ephemeral
container for the observer).
"""

from __future__ import annotations

from typing import Optional, Protocol

from .slurm import QueueRow, TaskDetail


class Scheduler(Protocol):
    """What the cluster agent asks of a scheduler."""

    def missing(self) -> Optional[str]:
        """Why this host cannot submit (no tools), or None."""

    def config(self) -> dict[str, str]:
        """The scheduler's settings that matter (read once)."""

    def queue(self) -> list[QueueRow]:
        """Every task of this user: one call, however many tasks."""

    def detail(self, raw: str) -> Optional[TaskDetail]:
        """One running task: its node and GPU indices."""

    def state_of(self, task_id: str) -> Optional[str]:
        """One task's state; None once the scheduler forgot it."""

    def submit(self, argv: list[str], test_only: bool = False) -> str:
        """An indexed job (an array): its id."""

    def cancel(self, task_id: str) -> object:
        """Cancel one task; the caller reads the state back."""

    def requeue(self, task_id: str) -> None:
        """Put a task back in the queue, eligible now."""
