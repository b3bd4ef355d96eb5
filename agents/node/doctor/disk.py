"""The disk line: the output's file system against the plan's projected bytes."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from ...contract.documents import MAX_PLAN_BYTES, PLAN_FILE, PlanDoc, read_document
from ...contract.jobs import JobSpec
from ...contract.ops import Check
from ...contract.units import human_bytes
from .base import FAIL, OK, WARN, Thresholds, _job_path


def check_disk(spec: JobSpec, job_dir: Callable[[str], Path], th: Thresholds = Thresholds()) -> Check:
    out = _job_path(str(spec.worker.out if spec.worker is not None else ""), spec, job_dir)
    probe = out
    while not os.path.exists(probe):  # the directory the run will make it in
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return Check("disk", FAIL, f"the output directory {out} cannot be made: {probe} is a file",
                     "choose another out, or move that file away", job=spec.name)
    try:
        fd, name = tempfile.mkstemp(prefix=".gpudeck-doctor-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        return Check("disk", FAIL, f"cannot write in {probe}" + ("" if probe == out else f" (to make {out})")
                     + f": {exc.strerror or exc}", f"make {probe} writable for this user, or choose another out",
                     job=spec.name)
    free = shutil.disk_usage(probe).free
    where = f"{human_bytes(free)} free for {out}"
    plan = os.path.join(out, PLAN_FILE)
    projected = None
    if os.path.exists(plan):
        try:
            projected = read_document(PlanDoc, plan, MAX_PLAN_BYTES).projected_bytes
        except (OSError, ValueError) as exc:
            return Check("disk", WARN, f"{where}; its plan {plan} cannot be read: {exc}",
                         "gpudeck plan again", job=spec.name)
    if projected is None:
        if free < th.disk_warn_bytes:
            return Check("disk", WARN, f"{where}: under {human_bytes(th.disk_warn_bytes)}, and no plan to say "
                                       f"how much the run needs", "free some space; gpudeck plan projects the bytes",
                         job=spec.name)
        return Check("disk", OK, f"{where} (no plan.json with projected bytes to compare; gpudeck plan makes one)",
                     job=spec.name)
    detail = f"{where}; the plan projects {human_bytes(projected)} for the whole run"
    if projected > free:
        return Check("disk", FAIL, detail + f": {human_bytes(projected - free)} short",
                     "free space, another out on a larger disk, or compress = true (extract)", job=spec.name)
    return Check("disk", OK, detail, job=spec.name)

