"""The node's staged copies, as ``gpudeck doctor`` lists them and ``gpudeck unstage`` removes
them. A copy is removed file by file, from its record (only what the stage put there, and the
partials it left), under its destination's lock: never while a job copies into it, never while
a live job's stage names it."""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from ..contract.ops import Check, StagedCopy, Unstaged
from ..contract.units import human_bytes, human_duration
from ..contract.vocab import Verdict
from . import record


def _target(rec: dict[str, Any], rel: str) -> str:
    return rec["to"] if rel == "" else os.path.join(rec["to"], rel)


def _present(rec: dict[str, Any]) -> bool:
    files = rec.get("files") or {}
    if rec.get("complete") is False:
        return False
    for rel, f in files.items():
        try:
            if os.stat(_target(rec, rel)).st_size != f.get("size"):
                return False
        except OSError:
            return False
    return bool(files)


def staged_copies(home: Path) -> list[StagedCopy]:
    return [StagedCopy(to=r["to"], source=str(r.get("from", "")), bytes=int(r.get("bytes") or 0),
                       job=r.get("job"), staged_at=r.get("staged_at"), present=_present(r))
            for r in record.all_records(home)]


def check_staged(home: Path, now: Optional[float] = None) -> Check:
    """doctor's ``staged`` line: the copies stages made on this node, and how to remove them."""
    now = time.time() if now is None else now
    copies = staged_copies(home)
    if not copies:
        return Check("staged", Verdict.OK, "no staged copies on this node")
    parts = []
    for c in copies:
        age = f", {human_duration(now - c.staged_at)} ago" if c.staged_at else ""
        state = "in place" if c.present else "not whole (a copy stopped, or memory emptied by a reboot): the next " \
                                               "launch copies what is missing"
        parts.append(f"{c.to} ({human_bytes(c.bytes)} from {c.source}, by job {c.job}{age}; {state})")
    total = sum(c.bytes for c in copies if c.present)
    return Check("staged", Verdict.OK, f"{len(copies)} staged cop{'y' if len(copies) == 1 else 'ies'}, "
                                       f"{human_bytes(total)} in place: " + "; ".join(parts),
                 "`gpudeck unstage` removes them (a copy a live job uses is kept)")


def unstage(home: Path, paths: Iterable[str], users: Callable[[str], Optional[str]]) -> Unstaged:
    """Remove the staged copies at ``paths`` (all of them when empty). ``users(to)``: the live
    job whose stage names ``to``, which keeps it."""
    wanted = {os.path.normpath(os.path.expanduser(p)) for p in paths}
    removed, kept, freed = [], [], 0
    found = set()
    for rec in record.all_records(home):
        to = rec["to"]
        if wanted and os.path.normpath(to) not in wanted:
            continue
        found.add(os.path.normpath(to))
        user = users(to)
        if user is not None:
            kept.append(f"{to}: in use by job {user} (running): kill it first")
            continue
        lock = record.DestLock(home, rec["key"])
        if not lock.take(wait=False, holder="unstage"):
            kept.append(f"{to}: job {lock.holder() or '?'} is staging into it")
            continue
        try:
            present = _present(rec)
            freed += _remove(rec)
            record.remove(home, rec["key"])
        finally:
            lock.release()
        removed.append(StagedCopy(to=to, source=str(rec.get("from", "")), bytes=int(rec.get("bytes") or 0),
                                  job=rec.get("job"), staged_at=rec.get("staged_at"), present=present))
    for p in sorted(wanted - found):
        kept.append(f"{p}: no staged copy there (gpudeck doctor lists them)")
    return Unstaged(removed=removed, kept=kept, freed_bytes=freed)


def _remove(rec: dict[str, Any]) -> int:
    """The record's files and their partials, then the folders they leave empty; the bytes freed."""
    freed = 0
    dirs = set()
    for rel in [*(rec.get("files") or {}), *(rec.get("pending") or [])]:
        target = _target(rec, rel)
        d, name = os.path.split(target)
        for path in [target, *glob.glob(os.path.join(glob.escape(d), f".{glob.escape(name)}.*.partial"))]:
            try:
                freed += os.stat(path).st_size
                os.unlink(path)
            except FileNotFoundError:
                pass
        while d and os.path.normpath(d) != os.path.dirname(os.path.normpath(rec["to"])):
            dirs.add(d)
            d = os.path.dirname(d)
    for d in sorted(dirs, key=len, reverse=True):  # deepest first; a folder holding another's files stays
        try:
            os.rmdir(d)
        except OSError:
            pass
    return freed


def live_user(jobs: Any, to: str) -> Optional[str]:
    """The live job (of the node's backend ``jobs``, agents/jobs/backend.py) whose stage copies
    into ``to``, or None."""
    target = os.path.normpath(to)
    for name in jobs.names():
        facts = jobs.facts(name)
        spec = jobs.spec_of(name) if facts is not None and facts.state.alive else None
        for item in spec.stage if spec is not None else ():
            dest = os.path.normpath(os.path.expanduser(item.dest))
            if target == dest or target.startswith(dest + "/"):
                return str(name)
    return None
