"""The ground of the local backend (supervisor.py JobSupervisor): its state, and a job's files
in ``<home>/jobs/<name>/`` (state.json, spec.json, notes). The layers above it: liveness.py,
launching.py, kills.py, then supervisor.py.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Optional

from . import joblog
from ..sense import writes
from .contain import Containment
from ..sense.gpu import GpuSampler
from .audit import AuditLog
from .backend import AuditHook, Contained, GpuReader, JobFacts
from ..contract.jobstate import STATE_FILE
from ..contract.jobs import JobSpec, SpecError
from ..contract.vocab import AuditAction
from .owners import Declarations
from ..contract.jobstate import JobRecord
from .records import _Live
from ..contract.atomic import atomic_write_json as write_json_atomic


# the supervisor's one logger, whichever of its parts speaks
log = logging.getLogger(__name__.rsplit(".", 1)[0] + ".supervisor")


class SupervisorStore:
    """What every part of JobSupervisor shares: its state, the jobs' directories and specs, the audit."""

    local = True

    def __init__(self, home: Path, gpu: Optional[GpuReader] = None, node: str = "local",
                 python: str = sys.executable, role: str = "agent") -> None:
        self.home = Path(home)
        self.jobs_dir = self.home / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._audit = AuditLog(self.home / "audit.log", node)
        self.gpu: GpuReader = gpu or GpuSampler(enabled=False)
        self._contain = Containment.detect()
        self.node = node
        self.python = python
        self._declared: dict[str, JobSpec] = {}  # every fleet file's jobs (self._owned keeps them apart)
        self._owned = Declarations(self.home, node)
        self._records: dict[str, JobRecord] = {}
        self._live: dict[str, _Live] = {}
        self._lock = threading.RLock()
        self._busy: set[str] = set()  # jobs with a launch/kill under way
        self._capper = joblog.Capper()
        self._logs_due = 0.0  # when cap_logs looks at the logs next (monotonic)
        self._stored: dict[str, tuple[int, Optional[JobSpec]]] = {}  # spec.json by its mtime
        # what spec_changes said, with the two specs it compared: asked every tick, compared only when one changed
        self._changes: dict[str, tuple[JobSpec, JobSpec, tuple[str, ...]]] = {}
        self._dirs: dict[str, Path] = {}
        self._progress_files: dict[str, str] = {}  # GPUDECK_PROGRESS_FILE of each job, for the agent's readings
        self._role = role
        self._paths: list[str] = []  # disk_paths, made again only when the declarations change
        self._paths_of: Optional[dict[str, JobSpec]] = None  # the declarations _paths was made from
        self._job_errors: dict[str, str] = {}  # the last error logged per job: logged once, not every tick

    # ------------------------------------------------------------ state on disk

    def _job_dir(self, name: str) -> Path:
        d = self._dirs.get(name)
        if d is None:  # asked several times a tick for every job: build the path once
            d = self._dirs[name] = self.jobs_dir / name
        return d

    def _job_file(self, name: str, file: str) -> Path:
        """``<home>/jobs/<name>/<file>``, built once."""
        key = f"{name}/{file}"
        p = self._dirs.get(key)
        if p is None:
            p = self._dirs[key] = self._job_dir(name) / file
        return p

    def _save(self, rec: JobRecord) -> None:
        """state.json, atomically: on a full disk the last good version stays, the record in
        memory goes on, and the failure is an alert (agents/sense/writes.py)."""
        path = self._job_file(rec.name, STATE_FILE)
        try:
            write_json_atomic(path, rec.to_dict())
        except OSError as exc:
            writes.failed(path, exc)
        else:
            writes.ok(path)

    def spec_of(self, name: str) -> Optional[JobSpec]:
        """The declared spec, else the one the job was last launched with."""
        return self._declared.get(name) or self.stored_spec(name)

    def stored_spec(self, name: str) -> Optional[JobSpec]:
        """The spec the job was last launched with."""
        path = self._job_dir(name) / "spec.json"
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            return None
        cached = self._stored.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]  # asked several times a tick: parse the file only when it changed
        spec = None
        try:
            spec = JobSpec.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, SpecError) as exc:
            log.warning("job %s: unreadable spec.json: %s", name, exc)
        self._stored[name] = (stamp, spec)
        return spec

    def names(self) -> list[str]:
        return sorted(set(self._declared) | set(self._records))

    def declared(self) -> Mapping[str, JobSpec]:
        return MappingProxyType(self._declared)

    def knows(self, name: str) -> bool:
        return self.spec_of(name) is not None or name in self._records or self._job_dir(name).is_dir()

    def facts(self, name: str) -> Optional[JobFacts]:
        rec = self._records.get(name)
        return _facts(rec) if rec is not None else None

    def workdir(self, name: str) -> Path:
        """The job's own directory: where it runs when its spec names no ``cwd``."""
        return self._job_dir(name)

    def containment(self) -> Optional[Contained]:
        return Contained(self._contain.mode, self._contain.parent)

    def audit(self, action: AuditAction, job: Optional[str], details: Optional[dict[str, Any]] = None,
              **kw: Any) -> None:
        self._audit.write(action, job, details, **kw)

    def on_audit(self, hook: Optional[AuditHook]) -> None:
        self._audit.on_audit(hook)

    def read_note(self, name: str, note: str) -> Optional[dict[str, Any]]:
        try:
            doc = json.loads(self._job_file(name, note).read_text())
        except FileNotFoundError:
            return None
        if not isinstance(doc, dict):
            raise ValueError(f"{self._job_file(name, note)}: not a JSON object")
        return doc

    def write_note(self, name: str, note: str, doc: dict[str, Any]) -> None:
        path = self._job_file(name, note)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_json_atomic(path, doc, fsync=False)
        except OSError as exc:  # a full disk: an alert (agents/sense/writes.py), the caller's state stays in memory
            writes.failed(path, exc)
        else:
            writes.ok(path)



def _facts(rec: JobRecord) -> JobFacts:
    return JobFacts(name=rec.name, state=rec.state, attempt=rec.attempt, pid=rec.pid, exit_code=rec.exit_code,
                    started_at=rec.started_at, first_started_at=rec.first_started_at, ended_at=rec.ended_at,
                    fenced=rec.fenced)
