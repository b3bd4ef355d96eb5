"""The documents one process writes and another reads: a job's progress.json (written by a
worker, read by the agent) and plan.json (written by `gpudeck plan`, read by the agent), each
read back with its fields checked (:func:`read_document`) and written by the one writer
(:func:`write_document`, over :mod:`.atomic`). The node's events file holds ``wire.Event``
lines, read the same way (agents/watch/events.py); watch.json is the watcher's own
(agents/watch/config.py)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional, TypeVar

from .atomic import atomic_write_json
from .plain import ProtocolError, from_dict, quick_init, to_plain
from .units import human_duration
from .wire import QualityWindow, ServerHealth, Uploads

D = TypeVar("D")


def read_document(cls: type[D], path: "str | os.PathLike[str]", max_bytes: int, size: Optional[int] = None) -> D:
    """The document at ``path``, its fields checked by its type; ValueError says what is wrong
    (OSError: it cannot be read). Fields the type does not know are the writer's own: left.
    ``size``: its size, where the caller has just read it (read_at_most)."""
    data = read_at_most(path, max_bytes + 1, size)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes // 2**20} MiB: not a {cls.__name__}")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    except RecursionError:
        raise ValueError("JSON nested too deep") from None
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
    try:
        out: D = from_dict(cls, doc)
    except ProtocolError as exc:  # "ProgressDoc.total: expected an integer, got 'x'": the field, without the type
        text = str(exc)
        for head in (f"{cls.__name__}.", f"{cls.__name__}: "):
            text = text.removeprefix(head)
        raise ValueError(text) from None
    return out


def read_at_most(path: "str | os.PathLike[str]", limit: int, size: Optional[int] = None) -> bytes:
    """Up to ``limit`` bytes of the file at ``path``, read in buffers of the size it has (plus
    one byte, to see whether it grew): ``read(limit)`` would make a buffer of ``limit`` bytes
    first (16 MiB for a progress file read every tick: most of the read's cost). ``size``: the
    size a stat of the caller's just gave (else it is asked here); a file replaced since is
    read whole all the same. Plain os.read: a file object costs a third more for a file this
    small."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        want = min((os.fstat(fd).st_size if size is None else size) + 1, limit)
        data = os.read(fd, want)
        while len(data) == want and len(data) < limit:  # it grew since fstat (or a file of no size: /proc)
            want = min(len(data) + (1 << 20), limit)
            more = os.read(fd, want - len(data))
            if not more:
                break
            data += more
    finally:
        os.close(fd)
    return data


def write_document(path: "str | os.PathLike[str]", doc: Any, extra: Optional[dict[str, Any]] = None,
                   fsync: bool = True, mode: int = 0o644) -> None:
    """The one writer of a document: its fields, then the writer's ``extra`` ones (which may
    not reuse a field's name), replaced atomically (agents/contract/atomic.py)."""
    body: dict[str, Any] = to_plain(doc)
    clash = sorted(set(body) & set(extra or {}))
    if clash:
        raise ValueError(f"{type(doc).__name__}: extra fields {clash} are the document's own")
    atomic_write_json(path, {**body, **(extra or {})}, fsync=fsync, mode=mode)


# ---------------------------------------------------------------- progress.json

PROGRESS_FILE = "progress.json"
MAX_PROGRESS_BYTES = 16 * 2**20


@quick_init  # read for every job at every tick (agents/contract/plain.py)
@dataclass(frozen=True)
class ProgressDoc:
    """A job's progress.json: written by its worker every second or two (atomically, without
    fsync: a report, never a source of truth), read by the agent each tick. ``done`` is
    required. ``useful`` of ``useful_of`` records are neither cut at max_tokens, nor empty,
    nor failed (the console's dollars per useful completion). ``servers``, ``uploads`` (or
    ``s3``) and ``blocked`` are the job's health, carried to the console. A worker adds fields
    of its own (``in_flight``, ``state``...) for whoever reads the file; the agent skips them."""

    done: int
    total: Optional[int] = None
    tokens: Optional[int] = None
    tokens_per_s: Optional[float] = None  # the job's own figures, shown until the agent has its own rates
    rate_per_s: Optional[float] = None
    eta_s: Optional[float] = None
    updated_at: Optional[float] = None
    quality: dict[str, Any] = field(default_factory=dict)  # counts a human should look at, by name
    useful: Optional[int] = None
    useful_of: Optional[int] = None
    # generate: its servers' health, its uploads to S3, why it cannot write (a full disk);
    # extract writes its uploads as ``s3``
    servers: list[ServerHealth] = field(default_factory=list)
    uploads: Optional[Uploads] = None
    s3: Optional[Uploads] = None
    blocked: Optional[str] = None
    # where the job is in its start-up (extract: "starting", "loading", "compiling",
    # "preparing", then "running"; agents/contract/stall.py) and since when (unix time): the
    # watcher takes no start-up phase for a stall; ``startup_s``: the process's start to its
    # first durable output, once there was one
    phase: Optional[str] = None
    phase_since: Optional[float] = None
    startup_s: Optional[float] = None
    # generate: its last completions' quality problems (wire.QualityWindow), for the watcher
    window: Optional[QualityWindow] = None

    def __post_init__(self) -> None:
        if self.done < 0:
            raise ProtocolError(f"ProgressDoc.done: expected an integer >= 0, got {self.done}")


def read_progress(path: "str | os.PathLike[str]", size: Optional[int] = None) -> ProgressDoc:
    return read_document(ProgressDoc, path, MAX_PROGRESS_BYTES, size)

# ---------------------------------------------------------------- plan.json

PLAN_FILE = "plan.json"
MAX_PLAN_BYTES = 4 * 2**20  # a plan is a few KiB; anything this big is not one


@dataclass(frozen=True)
class PlanDoc:
    """What the agent reads of a plan.json (`gpudeck plan` writes it beside the output, with
    the whole plan as fields of its own): the wall time the run was planned for, and when; and
    the bytes its output was projected to take (`gpudeck doctor` sets them against the free disk)."""

    projected_wall_s: Optional[float] = None
    written_at: Optional[float] = None
    projected_bytes: Optional[float] = None

    def __post_init__(self) -> None:
        if self.projected_wall_s is not None and not self.projected_wall_s > 0:
            raise ProtocolError(f"PlanDoc.projected_wall_s: must be seconds above 0 (or null), "
                                f"got {self.projected_wall_s!r}")


def write_plan(path: str, plan: dict[str, Any]) -> None:
    """A plan.json: the fields the agent reads, then the rest of the plan."""
    rest = dict(plan)
    doc = PlanDoc(projected_wall_s=rest.pop("projected_wall_s", None), written_at=rest.pop("written_at", None),
                  projected_bytes=rest.pop("projected_bytes", None))
    write_document(path, doc, rest)


def read_plan(path: str) -> tuple[Optional[float], Optional[float]]:
    """(projected_wall_s, written_at) of a plan.json; ValueError says what is wrong with it."""
    doc = read_document(PlanDoc, path, MAX_PLAN_BYTES)
    return doc.projected_wall_s, doc.written_at


def drift_pct(planned_s: Optional[float], projected_s: Optional[float]) -> Optional[float]:
    """How far the projection is off the plan, in percent of the plan (+: slower); one decimal."""
    if planned_s is None or projected_s is None or not planned_s > 0:
        return None
    return round((projected_s / planned_s - 1.0) * 100.0, 1)


def over_plan(drift: Optional[float], limit_pct: float) -> bool:
    """Whether a run heads for more than ``limit_pct`` percent over its plan: what the
    ``plan_drift`` alert, the console's flag and its warning colour mean. Never the faster side."""
    return drift is not None and drift > limit_pct


def drift_text(planned_s: Optional[float], projected_s: Optional[float]) -> str:
    """``planned 5d 2h, now 16d 11h (+224%)``; ``planned 5d 2h, now -`` while there is no projection."""
    if planned_s is None:
        return "no planned wall time"
    pct = drift_pct(planned_s, projected_s)
    if pct is None:
        return f"planned {human_duration(planned_s)}, now -"
    return f"planned {human_duration(planned_s)}, now {human_duration(projected_s)} ({pct:+.0f}%)"
