"""What tests/e2e/test_slurm.py and tests/unit/test_slurm.py share (split out of tests/test_slurm.py when
the suite went into tiers)."""

from __future__ import annotations

import getpass
import json
import sys
from pathlib import Path

TASK = Path(__file__).parent / "slurm_task.py"


def home_of(tmp: Path) -> Path:
    return tmp / f"home-{getpass.getuser()}"


def holder_job(tmp: Path, name: str = "extract", shards: int = 4, max_running: int = 2, gpus: int = 1,
               extra: str = "", task_args: str = "") -> str:
    argv = [sys.executable, str(TASK), str(home_of(tmp)), *task_args.split()]
    return f"""
[[jobs]]
name = "{name}"
cluster = "lab"
command = {json.dumps(argv)}
gpus = {gpus}
shards = {shards}
max_running = {max_running}
time = "30:00"
{extra}
"""
