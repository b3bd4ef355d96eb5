"""Phases: a job with ``after = ["generate"]`` starts when every job it names has finished ok,
whether or not a console looks (each tick of the agent, the watcher included).

What "finished ok" means, per job named:

- **on this node**: its record says ``exited`` (exit code 0). It is waited for while it is
  pending, starting, running, or ended badly with a restart still to come (its restart policy
  wants it and it has not given up). It *fails* the dependent when it was killed, or failed or
  was lost with no restart to come (no policy, or ``gave_up``): the dependent is then
  ``blocked``, with the reason in its row, a ``blocked`` event and a notification. If that job
  runs again (a relaunch), the dependent goes back to waiting.
- **moved away** (``fenced`` here: ``gpudeck move`` took it to another node): its marker at
  the new place (its S3 prefix, or its ``success_marker``) once it ends there; never blocked.
- **on another node**: its completion marker, ``_SUCCESS``, which the fleet file's parser
  resolved into ``JobSpec.after_markers`` (a path as this node sees it, or an ``s3://`` URL). A
  failure there is that node's news: here the dependent only waits.

A job is started once: only while it was never launched on this node (pending, or blocked).
A cluster's jobs are not started here; Slurm chains them (``--dependency=afterok``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Optional

from ..contract.jobs import JobSpec, completion_marker
from ..contract.vocab import EventKind, JobState
from ..jobs.backend import JobBackend

log = logging.getLogger("agents")

S3_RECHECK_S = 30.0  # an s3:// marker is asked for at most this often


class Waiting:
    """Why a job has not started: ``blocked`` (it never will by itself) or only waiting."""

    def __init__(self, note: str, blocked: bool = False) -> None:
        self.note, self.blocked = note, blocked


class Phases:
    def __init__(self, jobs: JobBackend, emit: Callable[..., Any], gave_up: Callable[[str], bool]) -> None:
        self.jobs = jobs
        self.emit = emit  # (EventKind, message, job=..., key=..., notify=..., **details)
        self.gave_up = gave_up  # whether a job's restarts were given up (the watcher's RestartEngine)
        self.notes: dict[str, str] = {}  # job -> what it waits for, or why it is blocked (JobStatus.waiting)
        self._starting: set[str] = set()
        self._s3: dict[str, tuple[float, bool, Optional[str]]] = {}  # url -> (asked at, there, error)

    def tick(self, now: Optional[float] = None) -> None:
        now = time.time() if now is None else now
        for name, spec in list(self.jobs.declared().items()):
            if not spec.after or spec.cluster is not None or name in self._starting:
                self.notes.pop(name, None)
                continue
            rec = self.jobs.facts(name)
            state = rec.state if rec is not None else JobState.PENDING
            if state not in (JobState.PENDING, JobState.BLOCKED):
                self.notes.pop(name, None)
                continue
            waits = [w for dep in spec.after if (w := self.dependency(spec, dep, now)) is not None]
            if not waits:
                self._start(name, spec)
                continue
            blocked = [w for w in waits if w.blocked]
            note = "; ".join(w.note for w in (blocked or waits))
            self.notes[name] = ("blocked: " if blocked else "waiting for ") + note
            if blocked and state is not JobState.BLOCKED:
                self.jobs.set_blocked(name, blocked=True)
                self.emit(EventKind.BLOCKED, f"job {name} is blocked: {note}", job=name, key=f"blocked:{name}",
                          after=list(spec.after))
            elif not blocked and state is JobState.BLOCKED:
                self.jobs.set_blocked(name, blocked=False)
                self.emit(EventKind.RESOLVED, f"job {name} is no longer blocked: waiting for {note}", job=name,
                          key=f"blocked:{name}", notify=False)

    def dependency(self, spec: JobSpec, dep: str, now: float) -> Optional[Waiting]:
        """None when ``dep`` finished ok; else what the job waits for, or why it is blocked."""
        marker = spec.after_markers.get(dep)
        if marker is not None:
            there, error = self._marker(marker, now)
            if there:
                return None
            return Waiting(f"{dep} (its marker {marker}" + (f": {error})" if error else ")"))
        rec = self.jobs.facts(dep)
        if rec is None or rec.state is JobState.PENDING:
            return Waiting(f"{dep} (not started)")
        if rec.state is JobState.EXITED:
            return None
        if rec.state is JobState.FENCED:  # it runs on another node since a move: its marker there says
            dep_spec = self.jobs.spec_of(dep)
            there = completion_marker(dep_spec) if dep_spec is not None else None
            if there is not None and (there.startswith("s3://") or dep_spec.success_marker):
                if self._marker(there, now)[0]:
                    return None
                return Waiting(f"{dep} (moved: {rec.fenced or 'fenced'}; waiting for its marker {there})")
            return Waiting(f"{dep} (moved: {rec.fenced or 'fenced'}; waiting for it there)")
        if rec.state.alive:
            return Waiting(f"{dep} ({rec.state.value})")
        how = f"exit code {rec.exit_code}" if rec.exit_code is not None else "no exit code"
        if rec.state is JobState.KILLED:
            return Waiting(f"{dep} was killed", blocked=True)
        if rec.state is JobState.BLOCKED:
            return Waiting(f"{dep} is blocked", blocked=True)
        dep_spec = self.jobs.spec_of(dep)
        if self.gave_up(dep):
            return Waiting(f"{dep} {rec.state.value} ({how}) and its restarts were given up", blocked=True)
        if dep_spec is not None and dep_spec.restart_policy.wants(rec.state):
            return Waiting(f"{dep} ({rec.state.value}, {how}; to be restarted)")
        return Waiting(f"{dep} {rec.state.value} ({how})", blocked=True)

    def _marker(self, marker: str, now: float) -> tuple[bool, Optional[str]]:
        if not marker.startswith("s3://"):
            return os.path.exists(os.path.expanduser(marker)), None
        asked = self._s3.get(marker)
        if asked is not None and (asked[1] or now - asked[0] < S3_RECHECK_S):
            return asked[1], asked[2]
        there, error = s3_exists(marker)
        self._s3[marker] = (now, there, error)
        return there, error

    def _start(self, name: str, spec: JobSpec) -> None:
        """The launch, in a thread of its own (a launch checks the job's interpreter first)."""
        self._starting.add(name)
        self.notes.pop(name, None)

        def launch() -> None:
            try:
                result = self.jobs.launch(name)
            except Exception as exc:  # noqa: BLE001 -- a refusal (its command cannot start): said, not raised
                self.notes[name] = f"blocked: its launch failed: {exc}"
                self.jobs.set_blocked(name, blocked=True)
                self.emit(EventKind.BLOCKED, f"job {name}: every job it runs after finished ok, but its launch "
                                             f"failed: {exc}", job=name, key=f"blocked:{name}")
            else:
                self.emit(EventKind.ACTION, f"job {name} started: {', '.join(spec.after)} finished ok "
                                            f"(attempt {result.attempt}, pid {result.pid})", job=name,
                          notify=False, action="after", attempt=result.attempt, pid=result.pid)
            finally:
                self._starting.discard(name)

        threading.Thread(target=launch, name=f"after-{name}", daemon=True).start()


def s3_exists(url: str) -> tuple[bool, Optional[str]]:
    """Whether the object at ``url`` exists (boto3's HEAD; its credentials as the node has
    them), and the error that kept it from being asked."""
    try:
        import boto3  # the `s3` extra
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        return False, "boto3 is not installed for the agent's python: pip install 'gpudeck[s3]'"
    bucket, _, key = url[len("s3://"):].partition("/")
    try:
        boto3.client("s3").head_object(Bucket=bucket, Key=key)  # AWS_ENDPOINT_URL_S3: another S3
        return True, None
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        return False, None if code in ("404", "NoSuchKey", "NotFound") else str(exc)
    except BotoCoreError as exc:
        return False, str(exc)
