"""The job keys as Textual bindings, built from ``actions.JOB_OPS``: k, r and l on every screen
that shows a job, each running the screen's ``action_job(op)``."""

from __future__ import annotations

from textual.binding import Binding

from ..actions import JOB_OPS


def job_bindings() -> list[Binding]:
    return [Binding(op.key, f"job('{op.value}')", op.label, id=f"job.{op.value}") for op in JOB_OPS]
