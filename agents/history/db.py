"""The node's history in SQLite (``<home>/history.db``): what each GPU and each job did, kept
for 90 days at falling resolution, so a console opened in the morning (and `gpudeck history`)
can see the night.

Three tiers, one table each, one row per tick or per bucket: the row is a small JSON object
holding every GPU and every job of the node at that time.

    tier  table  a row                      kept
    1s    s1     every sample (a tick)      1 hour
    1m    m1     a minute: min/mean/max     7 days
    1h    h1     an hour: min/mean/max      90 days

Per GPU: memory used, utilization, temperature, power. Per job: its state (a bucket's last),
tokens/s, items done, the engine's running and queued requests and KV use, the tokens
counter, and for a generate job the shares of its last completions cut, empty, without an
answer and looping. A row of 8 GPUs and 16 jobs is about 1 KiB raw, 2.5 KiB rolled up; rows are never
more than 3,600 + 10,080 + 2,160, so the file is bounded (docs/history.md gives the figure,
bench/history_size.py measures it).

The rules that keep it whole and cheap:

- **One transaction a tick.** The sample, any roll-up it completes (with the mark saying how
  far roll-ups have gone) and the pruning commit together, in WAL mode with
  ``synchronous=NORMAL``: a commit is in the WAL before the snapshot leaves the agent, so a
  ``kill -9`` at any moment loses nothing committed (a power cut: at most the last
  checkpoint's worth), and SQLite's own recovery never leaves a torn row.
- **Incremental.** A tick rolls up at most one minute and one hour (from its 60 minute rows),
  and prunes at most one bucket's worth of each tier: no tick ever carries a big pass. The
  minute still filling is folded into an accumulator in memory as its samples come
  (``MinuteFold``), so rolling it up reads nothing back; a minute that began before this
  process (a restart within it) is rolled up from its rows, as before. Each tier's oldest row
  is kept in memory (a bound from below), so a tick runs BEGIN, the INSERT, the DELETE of the
  sample that left the hour and COMMIT, and asks nothing.
- **Time only goes forward.** A sample at or before the newest row is not stored: a clock
  stepped back by up to an hour leaves a gap, never a duplicate. A clock stepped back by
  more takes the rows ahead of it for the mistake they were and drops them.
- **A file that is not ours** (not SQLite, another application's, a newer schema, a failed
  quick check) is moved aside as ``history.db.bad-<time>`` with a warning, and a new one is
  begun. A write that fails (a full disk) is a ``disk_full`` alert through writes.py; history
  stops growing until a write succeeds again, and nothing else stops.
"""

from __future__ import annotations

import errno
import json
import math
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Callable, Optional

from ..sense import writes
from ..contract.wire import Snapshot
from .reads import HistoryReads
from .rows import (GPU_METRICS, JOB_METRICS, POINTS_PER_SERIES, TIERS, WINDOW_PROBLEMS, MinuteFold, Row, Tier,
                   _as_agg, gpu_key, job_tps, merge, minute_sample, raw_row, raw_sample, stat)

log = logging.getLogger(__name__)

# SQLite's result codes (sqlite3 names them from Python 3.11 on; the agent runs on 3.10 too)
SQLITE_CORRUPT, SQLITE_FULL, SQLITE_NOTADB = 11, 13, 26
APP_ID = 0x67646869  # "gdhi": PRAGMA application_id, so a foreign SQLite file is told apart
SCHEMA = 1  # PRAGMA user_version

REWIND_SKIP_S = 3600.0  # a clock stepped back by at most this: samples wait until it passes the newest row


# a row as compact JSON: json.dumps with separators makes a new encoder each call (a row a tick)
_compact = json.JSONEncoder(separators=(",", ":")).encode


class HistoryDB(HistoryReads):
    """The tiers in one SQLite file; ``record`` once a tick (the loop's thread), ``read`` from
    any thread (each read opens its own connection: WAL lets it read while a tick writes)."""

    def __init__(self, path: Path, tiers: tuple[Tier, ...] = TIERS, clock: Callable[[], float] = time.time,
                 readonly: bool = False) -> None:
        self.path = Path(path)
        self.tiers = tiers
        self.clock = clock  # the seam for tests: what "now" is when reading without an `until`
        self.conn: Optional[sqlite3.Connection] = None
        self.newest: Optional[float] = None  # the newest raw row's time
        self.marks: dict[str, Optional[int]] = {}  # tier -> the start of its next bucket to roll up
        self._rewound_logged = False
        self.on_minute: Optional[Callable[[float, Row], None]] = None  # each minute rolled up: (t, aggregate)
        self.fold: Optional[MinuteFold] = None  # the minute still filling, in memory
        self._oldest: dict[str, Optional[float]] = {}  # each tier's oldest row (pruning asks no SELECT)
        self.readonly = readonly  # reads only (--once): the file is neither made nor checked
        if not readonly:
            self._open()

    # ------------------------------------------------------------ opening

    def _open(self) -> None:
        try:
            self._connect()
        except sqlite3.DatabaseError as exc:
            self._set_aside(f"{type(exc).__name__}: {exc}")
            try:
                self._connect()
            except sqlite3.Error as exc2:  # a home we cannot write: no history, an alert
                self.conn = None
                writes.failed(self.path, _os_error(exc2))

    def _connect(self) -> None:
        conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=2.0)
        try:
            why = self._foreign(conn)
            if why:
                conn.close()
                self._set_aside(why)
                conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=2.0)
            conn.execute("PRAGMA page_size=16384")  # rows of 1 to 4 KiB: few of them split over pages (new files only)
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("history %s: journal mode %s, not wal", self.path, mode)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA journal_size_limit=4194304")
            conn.execute("PRAGMA wal_autocheckpoint=256")  # 4 MiB of 16 KiB pages
            conn.execute("BEGIN")
            conn.execute(f"PRAGMA application_id={APP_ID}")
            conn.execute(f"PRAGMA user_version={SCHEMA}")
            for tier in self.tiers:
                conn.execute(f"CREATE TABLE IF NOT EXISTS {tier.table} (t {'REAL' if not tier.bucket_s else 'INTEGER'} "
                             f"PRIMARY KEY, d TEXT NOT NULL)")
            conn.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v)")
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        self.marks = {t.table: None for t in self.tiers[1:]}
        for k, v in conn.execute("SELECT k, v FROM meta"):
            if k in self.marks:
                self.marks[k] = int(v)
        row = conn.execute(f"SELECT max(t) FROM {self.tiers[0].table}").fetchone()
        self.newest = row[0]
        self._oldest = {t.table: conn.execute(f"SELECT min(t) FROM {t.table}").fetchone()[0] for t in self.tiers}
        self.fold = None

    def _foreign(self, conn: sqlite3.Connection) -> str:
        """Why the file is not a history of ours (empty: it is one, or it is new)."""
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if app == 0 and not tables:
            return ""  # new
        if app != APP_ID:
            return f"not gpudeck's history (application_id {app:#x}, tables {', '.join(sorted(tables)) or 'none'})"
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA:
            return f"schema {version}, this agent writes {SCHEMA}"
        check = conn.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            return f"quick_check: {check}"
        return ""

    def _set_aside(self, why: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.bad-{stamp}")
        log.warning("history %s cannot be used (%s): moved aside to %s; a new history begins", self.path, why, aside)
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            try:
                if suffix == "-shm":
                    src.unlink()
                else:
                    os.replace(src, Path(str(aside) + suffix))
            except FileNotFoundError:
                pass

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except sqlite3.Error:
                pass
            self.conn = None

    # ------------------------------------------------------------ writing

    def record(self, snap: Snapshot) -> str:
        """The tick's sample, the roll-ups and pruning it completes, in one transaction.
        Returns "ok", "skip" (the clock is behind the newest row), "rewind" (the rows ahead of a
        clock stepped far back were dropped, then the sample stored) or "failed" (not stored: a
        full disk, an alert meanwhile)."""
        t = float(snap.t)
        verdict = "ok"
        if self.newest is not None and t <= self.newest:
            if self.newest - t <= REWIND_SKIP_S:
                if not self._rewound_logged:
                    log.warning("history: the clock went back %.1f s; samples resume when it passes the newest row",
                                self.newest - t)
                    self._rewound_logged = True
                return "skip"
            verdict = "rewind"
        self._rewound_logged = False
        if self.readonly:
            return "failed"
        if self.conn is None:
            self._reopen()
            if self.conn is None:
                return "failed"
        conn = self.conn
        row = raw_row(snap)
        fold, done = self._fold(t, row, verdict)
        oldest = dict(self._oldest)
        try:
            conn.execute("BEGIN IMMEDIATE")
            if verdict == "rewind":
                self._drop_after(t)
            conn.execute(f"INSERT OR REPLACE INTO {self.tiers[0].table} (t, d) VALUES (?, ?)",
                         (round(t, 3), _compact(row)))
            if self._oldest.get(self.tiers[0].table) is None:
                self._oldest[self.tiers[0].table] = round(t, 3)
            rolled = self._roll(t, done)
            self._prune(t)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self._oldest = oldest
            self.fold = None  # the sample is not stored: the minute is rolled up from its rows
            self._failed(exc)
            return "failed"
        self.fold = fold
        self.newest = round(t, 3)
        writes.ok(self.path)
        if rolled is not None and self.on_minute is not None:
            self.on_minute(*rolled)
        return verdict

    def _failed(self, exc: sqlite3.Error) -> None:
        writes.failed(self.path, _os_error(exc))
        code = getattr(exc, "sqlite_errorcode", None)
        if code in (SQLITE_CORRUPT, SQLITE_NOTADB):
            self.close()
            self._set_aside(f"{type(exc).__name__}: {exc}")

    def _reopen(self) -> None:
        try:
            self._open()
        except sqlite3.Error as exc:
            self.conn = None
            writes.failed(self.path, _os_error(exc))

    def _drop_after(self, t: float) -> None:
        assert self.conn is not None
        log.warning("history: the clock went back %.0f s; the rows recorded ahead of it are dropped",
                    (self.newest or t) - t)
        for tier in self.tiers:
            start = t if not tier.bucket_s else int(t // tier.bucket_s) * tier.bucket_s
            self.conn.execute(f"DELETE FROM {tier.table} WHERE t >= ?", (start,))
            mark = self.marks.get(tier.table)
            if mark is not None and mark > start:
                self._set_mark(tier.table, int(start))  # a bucketed tier's (only those have marks)
            self._oldest[tier.table] = self.conn.execute(f"SELECT min(t) FROM {tier.table}").fetchone()[0]

    def _set_mark(self, table: str, value: int) -> None:
        assert self.conn is not None
        self.marks[table] = value
        self.conn.execute("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", (table, value))

    def _fold(self, t: float, row: Row, verdict: str) -> tuple[MinuteFold, Optional[MinuteFold]]:
        """The minute accumulator with ``row`` folded in (a new one when ``t`` begins a minute),
        and the one of the minute that ended, if this sample ended one."""
        b = int(t // 60) * 60
        done = None
        fold = self.fold
        if fold is not None and fold.bucket != b:
            done, fold = fold, None
        if fold is None or verdict == "rewind":
            fold = MinuteFold(b, verdict != "rewind" and (self.newest is None or self.newest < b))
        fold.add(row)  # (kept only once the sample is stored: a failed write drops the fold)
        return fold, done

    def _roll(self, now: float, done: Optional[MinuteFold] = None) -> Optional[tuple[float, Row]]:
        """At most one bucket of each tier rolled up from the tier below: the oldest complete
        one not yet rolled (a minute from ``done``, its fold in memory, when that is it and
        whole). Returns the minute rolled, if one was."""
        assert self.conn is not None
        out = None
        for lower, tier in zip(self.tiers, self.tiers[1:]):
            b = tier.bucket_s
            complete = int(now // b) * b  # buckets before this one are complete ...
            if lower.bucket_s:  # ... once the tier below has rolled all of them up
                complete = min(complete, self.marks.get(lower.table) or 0)
            mark = self.marks.get(tier.table)
            if mark is None:  # the first row ever: nothing earlier to roll
                first = self.conn.execute(f"SELECT min(t) FROM {lower.table}").fetchone()[0]
                mark = int((first if first is not None else now) // b) * b
                self._set_mark(tier.table, mark)
            if mark >= complete:
                continue
            if tier is self.tiers[1] and b == 60 and done is not None and done.whole and done.bucket == mark:
                agg = done.aggregate()
                self.conn.execute(f"INSERT OR REPLACE INTO {tier.table} (t, d) VALUES (?, ?)",
                                  (mark, _compact(agg)))
                self._set_mark(tier.table, mark + b)
                if self._oldest.get(tier.table) is None:
                    self._oldest[tier.table] = mark
                out = (float(mark), agg)
                continue
            rows = self.conn.execute(f"SELECT d FROM {lower.table} WHERE t >= ? AND t < ? ORDER BY t",
                                     (mark, mark + b)).fetchall()
            if not rows:  # a gap (the agent was down): on to the next bucket that has rows
                nxt = self.conn.execute(f"SELECT min(t) FROM {lower.table} WHERE t >= ?", (mark,)).fetchone()[0]
                self._set_mark(tier.table, min(complete, int(nxt // b) * b) if nxt is not None else complete)
                continue
            agg = merge(_as_agg(json.loads(r[0]), bool(lower.bucket_s)) for r in rows)
            self.conn.execute(f"INSERT OR REPLACE INTO {tier.table} (t, d) VALUES (?, ?)",
                              (mark, _compact(agg)))
            self._set_mark(tier.table, mark + b)
            if self._oldest.get(tier.table) is None:
                self._oldest[tier.table] = mark
            if tier is self.tiers[1]:
                out = (float(mark), agg)
        return out

    def _prune(self, now: float) -> None:
        """Rows older than each tier keeps: at most one bucket's span of them (a minute of
        samples, an hour of minutes, a day of hours) a tick. The oldest row of each tier is
        kept in memory as a bound from below (after a DELETE of rows before ``x``, the first
        bucket at or after ``x``), so a tick asks nothing and deletes only when rows are due:
        the sample that left the hour, a minute row once a minute, an hour row once an hour."""
        assert self.conn is not None
        for tier in self.tiers:
            cutoff = now - tier.keep_s
            oldest = self._oldest.get(tier.table)
            if oldest is None or oldest >= cutoff:
                continue
            span = {0: 60, 60: 3600}.get(tier.bucket_s, 86400)
            upto = min(cutoff, oldest + span)
            self.conn.execute(f"DELETE FROM {tier.table} WHERE t < ?", (upto,))
            b = tier.bucket_s
            self._oldest[tier.table] = math.ceil(upto / b) * b if b else upto


def _os_error(exc: sqlite3.Error) -> OSError:
    """A SQLite failure as the OSError writes.py reports (a full disk reads as one)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code == SQLITE_FULL or "full" in str(exc):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return OSError(errno.EIO, f"{type(exc).__name__}: {exc}")


# what this module named before rows.py and reads.py took them (importers of db keep them)
__all__ = ["APP_ID", "GPU_METRICS", "JOB_METRICS", "POINTS_PER_SERIES", "REWIND_SKIP_S", "SCHEMA", "TIERS",
           "WINDOW_PROBLEMS", "HistoryDB", "HistoryReads", "MinuteFold", "Row", "Tier", "_as_agg", "gpu_key",
           "job_tps", "merge", "minute_sample", "raw_row", "raw_sample", "stat"]
