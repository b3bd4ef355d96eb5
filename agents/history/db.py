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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from ..sense import writes
from ..contract.ops import GPU_FIGURES, HISTORY_KEPT_S, JOB_FIGURES, QUALITY_FIGURES, HistoryPoint
from ..contract.vocab import JobState
from ..contract.wire import Gpu, JobStatus, Sample, Snapshot

log = logging.getLogger(__name__)

# A row as stored (JSON): {"g": {gpu: entity}, "j": {job: entity}}, an entity a list of figures
# (raw_row's) or of stats (an aggregate's, below)
Row = dict[str, dict[str, list[Any]]]
# SQLite's result codes (sqlite3 names them from Python 3.11 on; the agent runs on 3.10 too)
SQLITE_CORRUPT, SQLITE_FULL, SQLITE_NOTADB = 11, 13, 26
APP_ID = 0x67646869  # "gdhi": PRAGMA application_id, so a foreign SQLite file is told apart
SCHEMA = 1  # PRAGMA user_version

# a row's figures in order (agents/contract/ops.py names them): a job's quality shares last,
# from generate's window (agents/workers/generate/quality.py)
GPU_METRICS = GPU_FIGURES
JOB_METRICS = JOB_FIGURES + QUALITY_FIGURES
WINDOW_PROBLEMS = ("cut_at_max_tokens", "empty_answer", "no_answer", "repetition")


@dataclass(frozen=True)
class Tier:
    name: str  # what `gpudeck history --resolution` calls it
    table: str
    bucket_s: int  # 0: every sample
    keep_s: int


TIERS = (Tier("1s", "s1", 0, 3600), Tier("1m", "m1", 60, 7 * 86400), Tier("1h", "h1", 3600, HISTORY_KEPT_S))
POINTS_PER_SERIES = 720  # "auto" picks the finest tier that gives at most this many points a series
REWIND_SKIP_S = 3600.0  # a clock stepped back by at most this: samples wait until it passes the newest row


# a row as compact JSON: json.dumps with separators makes a new encoder each call (a row a tick)
_compact = json.JSONEncoder(separators=(",", ":")).encode


def _r(v: Any, nd: int = 1) -> Optional[float]:
    return None if v is None else round(float(v), nd)


def job_tps(job: JobStatus) -> Optional[float]:
    """A job's tokens/s as the history keeps it: its progress's, else its engine's."""
    if job.progress is not None and job.progress.tokens_per_s is not None:
        return round(job.progress.tokens_per_s, 2)
    if job.engine is not None and job.engine.tokens_per_s is not None:
        return round(job.engine.tokens_per_s, 2)
    return None


def gpu_key(g: Gpu) -> str:
    return f"{g.host}:{g.index}" if g.host else str(g.index)


def raw_row(snap: Snapshot) -> Row:
    """One sample: {"g": {gpu: [mem, util, temp, power]}, "j": {job: [state, tps, done, running,
    queued, kv, tokens, (cut%, empty%, no-answer%, repetition%: a job with a quality window)]}}."""
    gpus = {gpu_key(g): [_r(g.mem_used_mib), _r(g.util_pct), _r(g.temp_c), _r(g.power_w)] for g in snap.gpus}
    jobs = {}
    for j in snap.jobs:
        p, e = j.progress, j.engine
        row = [j.state.value, job_tps(j), p.done if p else None,
               e.running if e else None, e.queued if e else None, _r(e.kv_usage, 3) if e else None,
               p.tokens if p else None]
        w = p.window if p else None
        if w is not None and w.n:
            row += [_r(100.0 * w.counts.get(k, 0) / w.n) for k in WINDOW_PROBLEMS]
        jobs[j.name] = row
    return {"g": gpus, "j": jobs}


# ------------------------------------------------------------ aggregates
# An aggregate entity is [n, state, stat | None per metric]: n the samples it has, state a
# job's last (None for a GPU). A stat is the figure alone when every one of the n samples had
# the same; [lo, mean, hi] when each had one; [lo, mean, hi, count] when only ``count`` did.
# A raw entity is one of n=1 whose stats are its figures, so minutes, hours and the tail beyond
# a mark merge alike.


def stat(s: Any, n: int) -> Optional[tuple[float, float, float, int]]:
    """(lo, mean, hi, count) of a stored stat."""
    if s is None:
        return None
    if not isinstance(s, list):
        return (s, s, s, n)
    return (s[0], s[1], s[2], s[3] if len(s) > 3 else n)


def _stored(lo: float, mean: float, hi: float, count: int, n: int) -> Any:
    mean = round(mean, 3) if abs(mean) < 10 else round(mean, 1)
    if count == n:
        return lo if lo == hi else [lo, mean, hi]
    return [lo, mean, hi, count]


def _as_agg(row: Row, bucketed: bool) -> Row:
    if bucketed:
        return row
    return {"g": {k: [1, None, *vals] for k, vals in row["g"].items()}, "j": {k: [1, *vals] for k, vals in row["j"].items()}}


class MinuteFold:
    """The minute still filling, folded in memory one raw row at a time: per GPU and job, the
    samples, the last state, and per figure [lo, sum, hi, count]. ``whole``: it has every
    sample of its minute (it began with the minute's first, in this process); a minute that
    is not whole is rolled up from its rows instead. ``aggregate()`` is what ``merge`` makes of
    the same rows."""

    __slots__ = ("bucket", "whole", "_ents")

    def __init__(self, bucket: int, whole: bool) -> None:
        self.bucket, self.whole = bucket, whole
        self._ents: Row = {"g": {}, "j": {}}

    def add(self, row: Row) -> None:
        for side, state_first in (("g", False), ("j", True)):
            ents = self._ents[side]
            for key, vals in row[side].items():
                ent: Optional[list[Any]] = ents.get(key)
                figures = vals[1:] if state_first else vals
                if ent is None:
                    fresh: list[Any] = [0, None] + [None] * len(figures)
                    ent = ents[key] = fresh
                elif len(ent) < len(figures) + 2:
                    ent.extend([None] * (len(figures) + 2 - len(ent)))
                ent[0] += 1
                if state_first and vals[0] is not None:
                    ent[1] = vals[0]
                for i, v in enumerate(figures, 2):
                    if v is None:
                        continue
                    st = ent[i]
                    if st is None:
                        ent[i] = [v, v, v, 1]
                    else:
                        if v < st[0]:
                            st[0] = v
                        elif v > st[2]:
                            st[2] = v
                        st[1] += v
                        st[3] += 1

    def aggregate(self) -> Row:
        out: Row = {"g": {}, "j": {}}
        for side, ents in self._ents.items():
            for key, ent in ents.items():
                n = ent[0]
                out[side][key] = [n, ent[1]] + [None if st is None else _stored(st[0], st[1] / st[3], st[2], st[3], n)
                                                for st in ent[2:]]
        return out


def merge(rows: Iterable[Row]) -> Row:
    """Aggregates (in time order) merged into one: min of mins, max of maxes, mean by count,
    the last state."""
    acc: Row = {"g": {}, "j": {}}
    for row in rows:
        for side in ("g", "j"):
            for key, ent in row[side].items():
                n = ent[0]
                cur: Optional[list[Any]] = acc[side].get(key)
                if cur is None:
                    empty: list[Any] = [0, None] + [None] * (len(ent) - 2)
                    cur = acc[side][key] = empty
                cur[0] += n
                if ent[1] is not None:
                    cur[1] = ent[1]
                if len(cur) < len(ent):
                    cur.extend([None] * (len(ent) - len(cur)))
                for i in range(2, len(ent)):
                    s = stat(ent[i], n)
                    if s is None:
                        continue
                    c = cur[i]
                    if c is None:
                        cur[i] = list(s)
                    else:
                        total = c[3] + s[3]
                        cur[i] = [min(c[0], s[0]), (c[1] * c[3] + s[1] * s[3]) / total, max(c[2], s[2]), total]
    for ents in acc.values():
        for ent in ents.values():
            for i in range(2, len(ent)):
                if ent[i] is not None:
                    lo, mean, hi, count = ent[i]  # [lo, mean, hi, count], as made above
                    ent[i] = _stored(lo, mean, hi, count, ent[0])
    return acc


class HistoryDB:
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

    # ------------------------------------------------------------ reading

    def _reader(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5.0)

    def counts(self) -> dict[str, int]:
        with _closing(self._reader()) as c:
            return {t.name: c.execute(f"SELECT count(*) FROM {t.table}").fetchone()[0] for t in self.tiers}

    def _buckets(self, c: sqlite3.Connection, level: int, since: float, until: float) -> list[tuple[float, Row]]:
        """Level ``level``'s rows in [since, until] as aggregates, with the tail its roll-ups have
        not reached yet made from the level below (the current hour from its minutes and the
        current minute's samples)."""
        tier = self.tiers[level]
        if not tier.bucket_s:
            return [(t, _as_agg(json.loads(d), False))
                    for t, d in c.execute(f"SELECT t, d FROM {tier.table} WHERE t >= ? AND t <= ? ORDER BY t",
                                          (since, until))]
        b = tier.bucket_s
        start = int(since // b) * b
        mark = self._mark_of(c, tier.table)
        end = until if mark is None else min(until, mark - 1e-9)
        out = [(float(t), json.loads(d))
               for t, d in c.execute(f"SELECT t, d FROM {tier.table} WHERE t >= ? AND t <= ? ORDER BY t", (start, end))]
        tail_from = max(start, mark if mark is not None else start)
        if tail_from <= until:
            groups: dict[int, list[Row]] = {}
            for t, agg in self._buckets(c, level - 1, tail_from, until):
                groups.setdefault(int(t // b) * b, []).append(agg)
            last = out[-1][0] if out else -1.0
            out += [(float(k), merge(v)) for k, v in sorted(groups.items()) if k > last]
        return out

    @staticmethod
    def _mark_of(c: sqlite3.Connection, table: str) -> Optional[int]:
        row = c.execute("SELECT v FROM meta WHERE k = ?", (table,)).fetchone()
        return int(row[0]) if row else None

    def resolution_for(self, since: float, until: float, now: float) -> Tier:
        """The finest tier that still holds ``since`` and gives at most a few thousand points."""
        span = until - since
        for tier in self.tiers:
            if since >= now - tier.keep_s and span / max(tier.bucket_s, 1) <= POINTS_PER_SERIES:
                return tier
        return self.tiers[-1]

    def read(self, since: float, until: Optional[float] = None, resolution: str = "auto",
             gpu: Optional[int] = None, job: Optional[str] = None,
             gpus_only: bool = False) -> tuple[str, list[HistoryPoint]]:
        """Points in [since, until] at ``resolution`` ("1s", "1m", "1h", "auto"), a GPU's and a
        job's each, in time order; ``gpu``, ``job``: only that one (a GPU filter leaves the jobs out,
        and a job filter the GPUs, unless both are given); ``gpus_only``: no job's."""
        now = self.clock()
        until = now if until is None else until
        # nothing is kept before the last tier's span: a time further back (a console's
        # "9999999999w") asks for the same rows and would not fit an SQLite integer
        since, until = (max(t, now - self.tiers[-1].keep_s) for t in (since, until))
        tier = self.resolution_for(since, until, now) if resolution == "auto" else self._tier(resolution)
        if not self.path.exists():
            return tier.name, []
        level = self.tiers.index(tier)
        with _closing(self._reader()) as c:
            rows = self._buckets(c, level, since, until)
        want_gpus = job is None or gpu is not None
        want_jobs = (gpu is None or job is not None) and not gpus_only
        out: list[HistoryPoint] = []
        for t, agg in rows:
            if want_gpus:
                for key, ent in agg["g"].items():
                    if gpu is None or key.rsplit(":", 1)[-1] == str(gpu):
                        out.append(_point(t, ent, GPU_METRICS, gpu=key))
            if want_jobs:
                for key, ent in agg["j"].items():
                    if job is None or key == job:
                        out.append(_point(t, ent, JOB_METRICS, job=key))
        return tier.name, out

    def _tier(self, name: str) -> Tier:
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise ValueError(f"history: no resolution {name!r}; expected auto, {', '.join(t.name for t in self.tiers)}")

    def samples(self, since: float, until: Optional[float] = None) -> list[Sample]:
        """Compact samples for the sparklines: a minute's means (items and tokens: its last) for
        each minute in [since, until]."""
        now = self.clock()
        until = now if until is None else until
        if not self.path.exists():
            return []
        with _closing(self._reader()) as c:
            return [minute_sample(t, agg) for t, agg in self._buckets(c, 1, since, until)]


    def raw_samples(self, since: float) -> list[Sample]:
        """The samples of the raw tier after ``since``, compact."""
        if not self.path.exists():
            return []
        with _closing(self._reader()) as c:
            rows = c.execute(f"SELECT t, d FROM {self.tiers[0].table} WHERE t > ? ORDER BY t", (since,)).fetchall()
        return [raw_sample(t, json.loads(d)) for t, d in rows]


def raw_sample(t: float, row: Row) -> Sample:
    gpus = [v for _, v in sorted(row["g"].items(), key=lambda kv: _gpu_order(kv[0]))]
    jobs = row["j"]
    alive = (JobState.RUNNING.value, JobState.STARTING.value)
    return Sample(t=t, gpu_mem_mib=[g[0] or 0.0 for g in gpus], gpu_util=[g[1] for g in gpus],
                  job_tokens_per_s={k: v[1] for k, v in jobs.items() if v[0] in alive},
                  job_done={k: v[2] for k, v in jobs.items() if v[2] is not None},
                  job_tokens={k: v[6] for k, v in jobs.items() if v[6] is not None})


def minute_sample(t: float, agg: Row) -> Sample:
    """A minute's aggregate as a compact sample at the minute's middle."""
    def mean(ent: list[Any], i: int) -> Optional[float]:
        s = stat(ent[2 + i], ent[0]) if 2 + i < len(ent) else None
        return None if s is None else s[1]

    def top(ent: list[Any], i: int) -> Optional[int]:
        s = stat(ent[2 + i], ent[0]) if 2 + i < len(ent) else None
        return None if s is None else int(s[2])

    gpus = sorted(agg["g"].items(), key=lambda kv: _gpu_order(kv[0]))
    jobs = agg["j"]
    return Sample(
        t=t + 30.0,
        gpu_mem_mib=[mean(e, 0) or 0.0 for _, e in gpus],
        gpu_util=[mean(e, 1) for _, e in gpus],
        job_tokens_per_s={k: mean(e, 0) for k, e in jobs.items()
                          if e[1] in (JobState.RUNNING.value, JobState.STARTING.value)},
        job_done={k: d for k, e in jobs.items() if (d := top(e, 1)) is not None},
        job_tokens={k: d for k, e in jobs.items() if (d := top(e, 5)) is not None},
    )


def _gpu_order(key: str) -> tuple[str, int]:
    host, _, index = key.rpartition(":")
    return (host, int(index) if index.isdigit() else 0)


def _point(t: float, ent: list[Any], names: tuple[str, ...], gpu: Optional[str] = None,
           job: Optional[str] = None) -> HistoryPoint:
    lo: dict[str, Optional[float]] = {}
    mean: dict[str, Optional[float]] = {}
    hi: dict[str, Optional[float]] = {}
    for i, name in enumerate(names):
        s = stat(ent[2 + i], ent[0]) if 2 + i < len(ent) else None
        if s is not None:
            lo[name], mean[name], hi[name] = s[0], s[1], s[2]
    return HistoryPoint(t=t, gpu=gpu, job=job, state=ent[1], n=ent[0], mean=mean,
                        lo=lo if ent[0] > 1 else {}, hi=hi if ent[0] > 1 else {})


def _os_error(exc: sqlite3.Error) -> OSError:
    """A SQLite failure as the OSError writes.py reports (a full disk reads as one)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code == SQLITE_FULL or "full" in str(exc):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return OSError(errno.EIO, f"{type(exc).__name__}: {exc}")


class _closing:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, *exc: Any) -> None:
        self.conn.close()
