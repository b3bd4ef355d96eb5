"""A job's model staging as both sides know it: the fleet file's ``stage = [{ from = "...",
to = "..." }]`` (:class:`StageItem`), the document the staging step writes in the job's
directory as it goes (:class:`StagingDoc`, ``staging.json``), and what a snapshot carries of it
(:class:`Staging`). The copy itself is agents/staging/."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from .units import human_bytes

STAGING_FILE = "staging.json"  # in the job's directory: the staging step's progress
STAGE_PLAN_FILE = "stage.json"  # in the job's directory: what the supervisor asked it to copy

# a stage's states: waiting for another job's copy to the same place, checking what is in place,
# copying, done (the job's own command runs), failed (the job's command never ran)
WAITING, CHECKING, COPYING, DONE, FAILED = "waiting", "checking", "copying", "done", "failed"
ACTIVE = (WAITING, CHECKING, COPYING)


class StageError(ValueError):
    """A stage that cannot be: the message says which and why."""


@dataclass(frozen=True)
class StageItem:
    """One ``{ from = "...", to = "..." }``: ``src`` a path on the node (local, or a shared
    file system's) or ``s3://bucket/prefix``; ``dest`` an absolute path on the node."""

    src: str
    dest: str

    @property
    def from_s3(self) -> bool:
        return self.src.startswith("s3://")

    def to_dict(self) -> dict[str, str]:
        return {"from": self.src, "to": self.dest}

    @classmethod
    def read(cls, obj: Any, where: str) -> "StageItem":
        """A fleet file's table (or the wire's dict); StageError naming ``where`` otherwise."""
        if isinstance(obj, StageItem):
            return obj
        if not isinstance(obj, dict):
            raise StageError(f"{where}: expected a table {{ from = \"...\", to = \"...\" }}, got "
                             f"{type(obj).__name__}")
        unknown = sorted(set(obj) - {"from", "to"})
        if unknown:
            raise StageError(f"{where}: unknown key(s) {', '.join(unknown)}; a stage has 'from' and 'to'")
        src, dest = obj.get("from"), obj.get("to")
        for key, value in (("from", src), ("to", dest)):
            if not isinstance(value, str) or not value.strip():
                raise StageError(f"{where}: '{key}' must be a path" + (" or an s3:// URL" if key == "from" else "")
                                 + f", got {value!r}")
        assert isinstance(src, str) and isinstance(dest, str)
        if src.startswith("s3://"):
            if not src[5:].split("/", 1)[0]:
                raise StageError(f"{where}: 'from' {src!r} names no bucket; expected s3://bucket/prefix")
        elif "://" in src:
            raise StageError(f"{where}: 'from' {src!r}: only a path on the node or an s3:// URL can be staged")
        if not os.path.isabs(os.path.expanduser(dest)):
            raise StageError(f"{where}: 'to' {dest!r} must be an absolute path (fast local storage: /dev/shm/..., "
                             f"a local NVMe's mount)")
        if os.path.normpath(os.path.expanduser(dest)) in ("/", os.path.expanduser("~")):
            raise StageError(f"{where}: 'to' {dest!r} would put the copy over a whole file system")
        return cls(src=src, dest=dest)


def read_stage(value: Any, where: str) -> list[StageItem]:
    """A job's ``stage``: a list of tables; StageError naming ``where`` (``job 'x': 'stage'``)
    and the item otherwise."""
    if not isinstance(value, list):
        raise StageError(f"{where}: must be a list of tables [{{ from = \"...\", to = \"...\" }}]")
    items = [StageItem.read(v, f"{where} #{i + 1}") for i, v in enumerate(value)]
    dests = [os.path.normpath(os.path.expanduser(i.dest)) for i in items]
    for i, a in enumerate(dests):
        for b in dests[i + 1:]:
            if a == b or a.startswith(b + "/") or b.startswith(a + "/"):
                raise StageError(f"{where}: copies twice into {min(a, b, key=len)}")
    return items


@dataclass(frozen=True)
class StagingDoc:
    """``staging.json``: where the staging step is (``state``), what it copies now (``item``:
    its ``to``), and its bytes: ``total_bytes`` of the whole stage, ``done_bytes`` of them in
    place (found in place, or copied), ``copied_bytes`` by this attempt, ``bytes_per_s`` over
    the last seconds; ``error`` why it failed; ``waiting_for`` the destination whose lock
    another job holds. Times are unix times, the node's clock."""

    state: str
    total_bytes: Optional[int] = None
    done_bytes: int = 0
    copied_bytes: int = 0
    skipped_bytes: int = 0
    bytes_per_s: Optional[float] = None
    item: Optional[str] = None
    files: int = 0  # files of the stage
    copied_files: int = 0
    started_at: Optional[float] = None
    updated_at: Optional[float] = None
    ended_at: Optional[float] = None
    error: Optional[str] = None
    waiting_for: Optional[str] = None


@dataclass(frozen=True)
class Staging:
    """A job's staging as a snapshot carries it (the agent reads ``staging.json``)."""

    state: str
    total_bytes: Optional[int] = None
    done_bytes: int = 0
    copied_bytes: int = 0
    bytes_per_s: Optional[float] = None
    item: Optional[str] = None
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    error: Optional[str] = None
    waiting_for: Optional[str] = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def pct(self) -> Optional[float]:
        if not self.total_bytes:
            return None
        return min(100.0, 100.0 * self.done_bytes / self.total_bytes)


def staging_text(s: Optional[Staging]) -> Optional[str]:
    """``staging 42% (23 of 54 GB, 1.1 GB/s)`` while a stage copies; what it waits for, or why it
    failed; None when there is none or it is done."""
    if s is None or s.state == DONE:
        return None
    if s.state == FAILED:
        return f"staging failed: {s.error}" if s.error else "staging failed"
    if s.state == WAITING:
        return f"staging: waiting for another job's copy to {s.waiting_for}" if s.waiting_for else "staging: waiting"
    if s.state == CHECKING or s.total_bytes is None:
        return "staging: checking what is in place"
    unit = 10 ** 9 if s.total_bytes >= 10 ** 9 else 10 ** 6
    name = "GB" if unit == 10 ** 9 else "MB"
    rate = f", {human_bytes(s.bytes_per_s)}/s" if s.bytes_per_s else ""
    return (f"staging {s.pct or 0:.0f}% ({_figure(s.done_bytes / unit)} of {_figure(s.total_bytes / unit)} {name}"
            f"{rate})")


def _figure(v: float) -> str:
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"
