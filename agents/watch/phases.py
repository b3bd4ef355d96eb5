"""Phases: a job with ``after = ["generate"]`` starts when every job it names has finished ok,
whether or not a console looks (each tick of the agent, the watcher included).

What "finished ok" means, per job named:

- **on this node**: its record says ``exited`` (exit code 0). It is waited for while it is
  pending, starting, running, or ended badly with a restart still to come (its restart policy
  wants it and it has not given up). It *fails* the dependent when it was killed, or failed or
  was lost with no restart to come (no policy, or ``gave_up``): the dependent is then
  ``blocked``, with the reason in its row, a ``blocked`` event and a notification. So does a
  generate (or extract) job that exited 4, never restarted: its records mostly junk (the reason
  is its ``_QUALITY`` document's), or its input degenerate. If that job runs again (a
  relaunch), the dependent goes back to waiting.
- **moved away** (``fenced`` here: ``gpudeck move`` took it to another node): its marker at
  the new place (its S3 prefix, or its ``success_marker``) once it ends there; never blocked.
- **on another node**: its completion marker, ``_SUCCESS``, which the fleet file's parser
  resolved into ``JobSpec.after_markers`` (a path as this node sees it, or an ``s3://`` URL). A
  failure there is that node's news: here the dependent only waits; but a ``_QUALITY`` beside
  where the marker would be (generate ended with its records mostly junk) blocks it.

A job is started once: only while it was never launched on this node (pending, or blocked).
A cluster's jobs are not started here; Slurm chains them (``--dependency=afterok``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any, Callable, Optional

from ..contract.jobs import MARKER, QUALITY_MARKER, JobSpec, completion_marker, final_exit, quality_marker
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
        self._s3_docs: dict[str, tuple[float, Any]] = {}  # a _QUALITY's url -> (asked at, the document or None)

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
        if marker is not None:  # asked where that job writes it: its own S3 endpoint, with this job's env
            there, error = self._marker(marker, now, spec.after_endpoints.get(dep), spec.env)
            if there:
                return None
            junk = marker[: -len(MARKER)] + QUALITY_MARKER if marker.endswith("/" + MARKER) else None
            why = self._quality(junk, now, spec.after_endpoints.get(dep), spec.env) if junk else None
            if why is not None:  # it ended there, its records mostly junk: no _SUCCESS will come
                return Waiting(f"{dep} ended with too few useful records: {why} ({junk})", blocked=True)
            return Waiting(f"{dep} (its marker {marker}" + (f": {error})" if error else ")"))
        rec = self.jobs.facts(dep)
        if rec is None or rec.state is JobState.PENDING:
            return Waiting(f"{dep} (not started)")
        if rec.state is JobState.EXITED:
            return None
        if rec.state is JobState.FENCED:  # it runs on another node since a move: its marker there says
            dep_spec = self.jobs.spec_of(dep)
            dep_marker = completion_marker(dep_spec) if dep_spec is not None else None
            if dep_spec is not None and dep_marker is not None and (dep_marker.startswith("s3://")
                                                                    or dep_spec.success_marker):
                endpoint = dep_spec.worker.s3_endpoint if dep_spec.worker is not None else None
                if self._marker(dep_marker, now, endpoint, dep_spec.env)[0]:
                    return None
                return Waiting(f"{dep} (moved: {rec.fenced or 'fenced'}; waiting for its marker {dep_marker})")
            return Waiting(f"{dep} (moved: {rec.fenced or 'fenced'}; waiting for it there)")
        if rec.state.alive:
            return Waiting(f"{dep} ({rec.state.value})")
        how = f"exit code {rec.exit_code}" if rec.exit_code is not None else "no exit code"
        if rec.state is JobState.KILLED:
            return Waiting(f"{dep} was killed", blocked=True)
        if rec.state is JobState.BLOCKED:
            return Waiting(f"{dep} is blocked", blocked=True)
        dep_spec = self.jobs.spec_of(dep)
        if final_exit(dep_spec, rec.exit_code):  # its verdict on its data: no restart will come
            junk = quality_marker(dep_spec) if dep_spec is not None else None
            why = self._quality(junk, now) if junk else None
            if why is not None:
                return Waiting(f"{dep} ended with too few useful records: {why} ({junk})", blocked=True)
            return Waiting(f"{dep} {rec.state.value} ({how}: its verdict on its data, never restarted; see its log)",
                           blocked=True)
        if self.gave_up(dep):
            return Waiting(f"{dep} {rec.state.value} ({how}) and its restarts were given up", blocked=True)
        if dep_spec is not None and dep_spec.restart_policy.wants(rec.state):
            return Waiting(f"{dep} ({rec.state.value}, {how}; to be restarted)")
        return Waiting(f"{dep} {rec.state.value} ({how})", blocked=True)

    def _marker(self, marker: str, now: float, endpoint: Optional[str] = None,
                env: Optional[dict[str, str]] = None) -> tuple[bool, Optional[str]]:
        if not marker.startswith("s3://"):
            return os.path.exists(os.path.expanduser(marker)), None
        key = f"{endpoint or ''} {marker}"
        asked = self._s3.get(key)
        if asked is not None and (asked[1] or now - asked[0] < S3_RECHECK_S):
            return asked[1], asked[2]
        there, error = s3_exists(marker, endpoint, env)
        self._s3[key] = (now, there, error)
        return there, error

    def _quality(self, path: str, now: float, endpoint: Optional[str] = None,
                 env: Optional[dict[str, str]] = None) -> Optional[str]:
        """The ``why`` of the ``_QUALITY`` document at ``path`` (a path, or an ``s3://`` URL
        asked at most every :data:`S3_RECHECK_S`, at ``endpoint`` with ``env`` as a marker is),
        or None when there is none."""
        if not path.startswith("s3://"):
            try:
                with open(os.path.expanduser(path)) as f:
                    doc = json.load(f)
            except (OSError, ValueError):
                return None
        else:
            asked = self._s3_docs.get(path)
            if asked is not None and now - asked[0] < S3_RECHECK_S:
                doc = asked[1]
            else:
                doc = s3_json(path, endpoint, env)
                self._s3_docs[path] = (now, doc)
        if not isinstance(doc, dict):
            return None
        why = doc.get("why")
        return str(why) if why else "its _QUALITY document says so"

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


def s3_json(url: str, endpoint: Optional[str] = None, env: Optional[dict[str, str]] = None) -> Any:
    """The JSON document at ``url`` (a small one: a ``_QUALITY``), or None when it is not there
    or cannot be read (boto3, one short try; ``endpoint`` and ``env`` as :func:`s3_exists`)."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError  # the `s3` extra
    except ImportError:
        return None
    from ..jobs.fenceread import s3_client

    bucket, _, key = url[len("s3://"):].partition("/")
    try:
        body = s3_client(endpoint, env or {}).get_object(Bucket=bucket, Key=key)["Body"].read(1 << 20)
        return json.loads(body)
    except (ClientError, BotoCoreError, ValueError):
        return None


def s3_exists(url: str, endpoint: Optional[str] = None, env: Optional[dict[str, str]] = None
              ) -> tuple[bool, Optional[str]]:
    """Whether the object at ``url`` exists (boto3's HEAD, one short try), and the error that
    kept it from being asked. ``endpoint``: the S3-compatible store of the job that writes it
    (its ``s3_endpoint``; else AWS_ENDPOINT_URL_S3, else AWS); ``env``: the waiting job's
    environment, over the agent's (its credentials)."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError  # the `s3` extra
    except ImportError:
        return False, "boto3 is not installed for the agent's python: pip install 'gpudeck[s3]'"
    from ..jobs.fenceread import s3_client

    bucket, _, key = url[len("s3://"):].partition("/")
    try:
        s3_client(endpoint, env or {}).head_object(Bucket=bucket, Key=key)
        return True, None
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        return False, None if code in ("404", "NoSuchKey", "NotFound") else str(exc)
    except BotoCoreError as exc:
        return False, str(exc)
