"""``python -m gpudeck.agents.staging PLAN -- ARGV...``: the staging step at the head of a
job. It reads the plan the supervisor wrote (``stage.json`` in the job's directory: the stage,
the node's home, the memory to keep for the job), takes each destination's lock, copies what is
not in place while it reports in ``staging.json``, records the copies, and ``exec``\\ s ARGV:
the job's own command, with the same pid. On a failure it says why (on stderr, in the job's
log, and in ``staging.json``) and exits 3: the job's command never runs."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Optional

from ..contract.atomic import atomic_write_json
from ..contract.plain import to_plain
from ..contract.exits import EXIT_STAGE_FAILED
from ..contract.units import human_bytes
from ..contract.staging import CHECKING, COPYING, DONE, FAILED, STAGING_FILE, WAITING, StageItem, StagingDoc
from . import record
from .copy import CHUNK, copy_file
from .plan import StagePlan, StageRefused, check_fit, plan_stage

REPORT_S = 0.5  # staging.json at most this often while copying
RATE_WINDOW_S = 5.0


class Reporter:
    """Writes ``staging.json`` (atomically, no fsync: a report) with the bytes and the rate."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started_at = time.time()
        self.fields: dict[str, Any] = {"state": CHECKING}
        self._last = 0.0
        self._samples: deque[tuple[float, int]] = deque()

    def set(self, force: bool = True, **fields: Any) -> None:
        self.fields.update(fields)
        now = time.monotonic()
        copied = self.fields.get("copied_bytes", 0)
        self._samples.append((now, copied))
        while len(self._samples) > 2 and now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()
        if not force and now - self._last < REPORT_S:
            return
        self._last = now
        t0, c0 = self._samples[0]
        rate = (copied - c0) / (now - t0) if now - t0 >= 0.5 else None
        doc = StagingDoc(**{**self.fields, "started_at": self.started_at, "updated_at": time.time(),
                            "bytes_per_s": round(rate, 1) if rate is not None else None})
        try:
            atomic_write_json(self.path, to_plain(doc), fsync=False)
        except OSError:
            pass  # a full disk: the copy goes on; its own write fails soon after, and says so


def _say(text: str) -> None:
    print(f"gpudeck staging: {text}", file=sys.stderr, flush=True)


def stage(plan_path: Path) -> Optional[str]:
    """The stage of ``plan_path`` done; None, or why it failed."""
    doc = json.loads(plan_path.read_text())
    job, home = str(doc.get("job", "")), Path(doc["home"])
    items = [StageItem.read(i, f"stage #{n + 1}") for n, i in enumerate(doc["items"])]
    reserve = int(float(doc.get("reserve_gb", 16.0)) * 1e9)
    limit = float(doc["max_mb_s"]) * 1e6 if doc.get("max_mb_s") else None
    report = Reporter(plan_path.parent / STAGING_FILE)
    report.set(state=CHECKING)
    client = None
    if any(i.from_s3 for i in items):
        try:
            from .launch import s3_client
            client = s3_client({})  # the job's environment is this process's
        except ImportError:
            return "staging from s3:// needs boto3 on this node: pip install 'gpudeck[s3]'"
    locks: list[record.DestLock] = []
    try:
        plan = plan_stage(items, home, lambda: client, job)
        for p in sorted(plan.items, key=lambda p: p.key):  # one order for every job: no two wait on each other
            lock = record.DestLock(home, p.key)
            if not lock.take(wait=False, holder=job):
                who = lock.holder()
                whose = f"job {who}'s" if who else "another job's"
                _say(f"waiting for {whose} copy to {p.dest}")
                report.set(state=WAITING, waiting_for=p.dest)
                lock.take(wait=True, holder=job)
            locks.append(lock)
        plan = plan_stage(items, home, lambda: client, job)  # what the job before us copied is in place now
        check_fit(plan, reserve, job)
        _copy(plan, home, job, report, client, limit)
    except StageRefused as exc:
        return str(exc)
    except OSError as exc:
        return f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}"
    except Exception as exc:  # noqa: BLE001 -- an S3 error: said in one line, the job not started
        from ..workers.common.s3sync.remote import describe_error
        return describe_error(exc)
    finally:
        for lock in locks:
            lock.release()
    return None


def _copy(plan: StagePlan, home: Path, job: str, report: Reporter, client: Any, limit: Optional[float]) -> None:
    total = plan.total_bytes
    done = total - plan.missing_bytes
    files = sum(len(p.files) for p in plan.items)
    counts = {"copied": 0, "files": 0}
    report.set(state=COPYING, total_bytes=total, done_bytes=done, skipped_bytes=done, files=files, waiting_for=None)
    if plan.missing_bytes:
        _say(f"{human_bytes(plan.missing_bytes)} to copy into {', '.join(p.dest for p in plan.items)}"
             f"{f' ({human_bytes(done)} in place)' if done else ''}")

    began = time.monotonic()
    chunk = min(CHUNK, max(1 << 16, int(limit / 4))) if limit else CHUNK

    def moved(n: int) -> None:
        counts["copied"] += n
        report.set(force=False, done_bytes=done + counts["copied"], copied_bytes=counts["copied"])
        if limit:  # stage_max_mb_s: no faster than that, on average since the copy began
            ahead = counts["copied"] / limit - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)

    for p in plan.items:
        if p.missing_bytes or record.read(home, p.key) is None:  # before a byte is copied: unstage finds the partials
            record.write(home, p.key, {"from": p.item.src, "to": p.dest, "job": job, "staged_at": None,
                                       "bytes": p.total_bytes, "complete": False,
                                       "files": {f.rel: {"size": f.size, "stamp": f.stamp}
                                                 for f in p.files if f.rel in p.in_place},
                                       "pending": [f.rel for f in p.files if f.rel not in p.in_place]})
        for f in p.files:
            if f.rel in p.in_place:
                continue
            report.set(force=False, item=p.target(f))
            copy_file(p, f, moved, client, chunk)
            counts["files"] += 1
            report.set(force=False, copied_files=counts["files"])
        record.write(home, p.key, {"from": p.item.src, "to": p.dest, "job": job, "staged_at": time.time(),
                                   "bytes": p.total_bytes, "complete": True,
                                   "files": {f.rel: {"size": f.size, "stamp": f.stamp} for f in p.files}})
    report.set(state=DONE, done_bytes=total, ended_at=time.time(), item=None)
    if counts["copied"]:
        _say(f"staged {human_bytes(counts['copied'])} in {counts['files']} file(s)")
    else:
        _say(f"in place already ({human_bytes(total)}): nothing copied")


def main(argv: Optional[list[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m gpudeck.agents.staging PLAN -- COMMAND...", file=sys.stderr)
        return 2
    plan_path, command = Path(args[0]), args[2:]
    why = stage(plan_path)
    if why is not None:
        _say(f"failed, the job's command was not started: {why}")
        report = Reporter(plan_path.parent / STAGING_FILE)
        try:
            old = json.loads((plan_path.parent / STAGING_FILE).read_text())
            report.fields.update({k: v for k, v in old.items() if k in StagingDoc.__dataclass_fields__
                                  and k not in ("bytes_per_s", "updated_at", "started_at")})
        except (OSError, ValueError):
            pass
        report.set(state=FAILED, error=why, ended_at=time.time())
        return EXIT_STAGE_FAILED
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        _say(f"cannot run {command[0]}: {exc.strerror or exc}")
        return 127
