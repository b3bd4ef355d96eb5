"""What a cluster job keeps on the shared filesystem, so that its state survives the scheduler
forgetting it (MinJobAge, accounting disabled) and its logs outlive it::

    SHARED/bin/gpudeck-wrap.sh             the batch wrapper (WRAPPER below)
    SHARED/runs/FLEET/JOB/logs/T.log       task T's output, every attempt appended
    SHARED/runs/FLEET/JOB/attempts/T.jsonl one line per event of task T: start, signal, end, requeue
    SHARED/runs/FLEET/JOB/progress/T.json  task T's progress.json ($GPUDECK_PROGRESS_FILE)
    SHARED/runs/FLEET/JOB/kills/T.json     the verdict of gpudeck's last kill of task T
    SHARED/runs/FLEET/JOB/slurm-said.json  the last state Slurm gave each task, with its time (SlurmSaid)

The wrapper runs the job's command as its child, records each attempt's start (raw id, host,
restart count, GPUs) and end (exit code), and traps USR1 (``--signal=B:USR1@120``: the time
limit is near, or preemption) and TERM (scancel): on USR1 it stops the child and requeues its
own task, so the task comes back and resumes from its done-set.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..contract.atomic import atomic_write_bytes
from ..contract.exits import EXIT_TERMINATED

TASK_TOKEN = "@GD_TASK@"  # in a job's argv: replaced by the task's index (its shard) by the wrapper

WRAPPER = r"""#!/bin/bash
# gpudeck's batch wrapper: one attempt of one array task. Arguments: RUN_DIR SHARDS -- ARGV...
run=$1; shards=$2; shift 2; [ "$1" = -- ] && shift
task=${SLURM_ARRAY_TASK_ID:-0}
array=${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}
att="$run/attempts/$task.jsonl"
mkdir -p "$run/attempts" "$run/progress"
export GPUDECK_SHARD=$task GPUDECK_SHARDS=$shards GPUDECK_PROGRESS_FILE="$run/progress/$task.json"
note() {  # EVENT [EXTRA_JSON_FIELDS]
  printf '{"t":%s,"event":"%s","job_id":"%s","array_id":"%s","task":%s,"restart":%s,"host":"%s"%s}\n' \
    "$(date +%s.%N)" "$1" "$SLURM_JOB_ID" "$array" "$task" "${SLURM_RESTART_COUNT:-0}" "$(hostname -s)" "$2" >>"$att"
}
args=()
for a in "$@"; do args+=("${a//@GD_TASK@/$task}"); done
child= usr1= term=
reap() {  # wait for the child until it is gone: a trapped signal cuts a wait short
  while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done
}
# the handlers only say what came and stop the child; what follows is done below, once the child is gone
on_usr1() { trap '' USR1; usr1=1; note signal ',"signal":"USR1"'; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null; }
on_term() { trap '' TERM; term=1; note signal ',"signal":"TERM"'; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null; }
trap on_usr1 USR1
trap on_term TERM
note start ",\"gpus\":\"${SLURM_JOB_GPUS:-${SLURM_STEP_GPUS:-}}\",\"pid\":$$"
echo "gpudeck: task $task of $shards, job ${array}_$task (raw $SLURM_JOB_ID), restart ${SLURM_RESTART_COUNT:-0}, on $(hostname -s), GPUs ${SLURM_JOB_GPUS:-none}"
rc=0
if [ -z "$usr1$term" ]; then
  "${args[@]}" &
  child=$!
  [ -n "$usr1$term" ] && kill -TERM "$child" 2>/dev/null  # a signal between the check and the start
  reap
fi
if [ -n "$term" ]; then
  note end ",\"rc\":$rc,\"why\":\"term\""
  exit @EXIT_TERMINATED@
fi
if [ -n "$usr1" ]; then  # the time limit is near (or a preemption): back in the queue, to resume
  note end ",\"rc\":$rc,\"why\":\"usr1\""
  scontrol requeue "${array}_$task" >"$att.requeue.out" 2>&1; r=$?
  note requeue ",\"rc\":$r"
  [ $r -ne 0 ] && echo "gpudeck: requeue of ${array}_$task failed: $(cat "$att.requeue.out")" >&2
  exit 0
fi
note end ",\"rc\":$rc"
exit $rc
""".replace("@EXIT_TERMINATED@", str(EXIT_TERMINATED))  # the contract's (agents/contract/exits.py)


def wrapper_path(shared_dir: str) -> Path:
    return Path(os.path.expanduser(shared_dir)) / "bin" / "gpudeck-wrap.sh"


def install_wrapper(shared_dir: str) -> Path:
    """The wrapper in the shared directory, rewritten when it differs (sbatch copies it at
    submission: a running task keeps the one it started with)."""
    path = wrapper_path(shared_dir)
    try:
        if path.read_text() == WRAPPER:
            return path
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, WRAPPER.encode(), mode=0o755)
    return path


def run_dir(shared_dir: str, fleet: str, job: str) -> Path:
    return Path(os.path.expanduser(shared_dir)) / "runs" / (fleet or "default") / job


@dataclass(frozen=True)
class Attempts:
    """Task T's attempts file, read: how many starts, and how the last one went."""

    starts: int = 0
    started_at: Optional[float] = None  # the last attempt's start
    ended_at: Optional[float] = None  # the last attempt's end, when it has one
    exit_code: Optional[int] = None
    why: Optional[str] = None  # the end's cause when the wrapper saw a signal: usr1 | term
    requeued_at: Optional[float] = None  # the task requeued itself (USR1)
    requeue_rc: Optional[int] = None
    job_id: Optional[str] = None
    array_id: Optional[str] = None
    host: Optional[str] = None
    restart: int = 0
    gpus: Optional[str] = None

    @property
    def running(self) -> bool:
        """The last attempt started and has no end recorded."""
        return self.starts > 0 and self.ended_at is None


def read_attempts(path: Path) -> Attempts:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return Attempts()
    starts = 0
    last: dict[str, Any] = {}
    for line in text.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill -9 of the wrapper: the others still count
        if not isinstance(ev, dict):
            continue
        kind = ev.get("event")
        if kind == "start":
            starts += 1
            requeue: dict[str, Any] = {k: last[k] for k in ("requeued_at", "requeue_rc") if k in last}  # the last self-requeue
            if "requeued_at" in requeue and requeue.get("requeue_rc") is None and \
                    (ev.get("restart") or 0) > (last.get("restart") or 0):
                requeue["requeue_rc"] = 0  # its record never came, but Slurm started it again: it was requeued
            last = {"started_at": ev.get("t"), "job_id": ev.get("job_id"), "array_id": ev.get("array_id"),
                    "host": ev.get("host"), "restart": ev.get("restart") or 0, "gpus": ev.get("gpus") or None,
                    **requeue}
        elif kind == "end":
            if last.get("why") and not ev.get("why"):
                continue  # a second, plain end of an attempt that a signal already ended: the signal's counts
            last.update(ended_at=ev.get("t"), exit_code=ev.get("rc"), why=ev.get("why"))
            if ev.get("why") == "usr1":  # the wrapper requeues itself next; its record may never come
                last.setdefault("requeued_at", ev.get("t"))  # (Slurm's requeue can kill it first)
        elif kind == "requeue":
            last.update(requeued_at=ev.get("t"), requeue_rc=ev.get("rc"))
    return Attempts(starts=starts, **{k: v for k, v in last.items() if k in Attempts.__dataclass_fields__})


SAID_FILE = "slurm-said.json"


@dataclass(frozen=True)
class SlurmSaid:
    """The last state Slurm gave a task, kept because Slurm forgets: a finished task leaves
    squeue after MinJobAge, accounting may be off, and a task cancelled before it ran never had
    a record of its own (it was a bit of its array's pending record). ``at``: when Slurm said it
    ended (squeue's %e) for a finished task, else when the agent first saw the state."""

    array_id: str
    state: str  # as Slurm spells it: PENDING, RUNNING, CANCELLED...
    at: float
    ran: bool = False  # the task ran in this submission before it reached ``state``
    # CANCELLED, not said by Slurm but read from its listing: the task left its array's pending
    # record while the array stayed listed, which only a cancel does (an scancel outside gpudeck);
    # ``at`` is when the agent found it gone
    gone: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"array_id": self.array_id, "state": self.state, "at": self.at, "ran": self.ran}
        return {**out, "gone": True} if self.gone else out


def read_said(run: Path) -> dict[int, SlurmSaid]:
    """``run/slurm-said.json``: task index -> what Slurm last said of it; {} when none was kept.
    A file that cannot be read or parsed raises OSError or ValueError (the caller says so)."""
    try:
        text = (run / SAID_FILE).read_text()
    except FileNotFoundError:
        return {}
    try:
        doc = json.loads(text)
        return {int(k): SlurmSaid(array_id=str(v["array_id"]), state=str(v["state"]), at=float(v["at"]),
                                  ran=bool(v.get("ran", False)), gone=bool(v.get("gone", False)))
                for k, v in doc.items()}
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"{run / SAID_FILE}: not what gpudeck writes ({type(exc).__name__}: {exc})") from None


def write_said(run: Path, said: dict[int, SlurmSaid]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    text = json.dumps({str(k): v.to_dict() for k, v in sorted(said.items())}, sort_keys=True)
    atomic_write_bytes(run / SAID_FILE, text.encode(), mode=0o644)
