"""The node's history database (agents/history/db.py), driven with snapshots at a fake clock:
the tiers and their roll-ups, pruning, the size bound, a clock stepped back, a corrupt or
foreign file, a full disk. No processes here (tests/system/test_history_system.py starts agents)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from gpudeck.agents.sense import writes
from gpudeck.agents.contract import ops
from gpudeck.agents.contract.jobs import JobKind
from gpudeck.agents.contract.vocab import EngineState, JobState
from gpudeck.agents.contract.wire import Engine, Gpu, Host, JobStatus, Progress, Snapshot
from gpudeck.agents.history.ring import HistoryRing
from gpudeck.agents.history.db import TIERS, HistoryDB, Tier

T0 = 1_700_000_000.0  # a minute's and an hour's start: 1700000000 = 472222 h 13 min 20 s; aligned below
T0 = T0 - T0 % 3600


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def snap(t: float, gpus: int = 2, jobs: int = 2, util: float = 50.0, state: JobState = JobState.RUNNING) -> Snapshot:
    host = Host(hostname="n", cpu_pct=1.0, cpu_count=8, mem_used_bytes=1, mem_total_bytes=2, load1=0.0, load5=0.0, load15=0.0)
    return Snapshot(
        node="n", seq=int(t), t=t, host=host,
        gpus=[Gpu(index=i, uuid=f"GPU-{i}", name="H200", mem_used_mib=1000.0 * (i + 1), mem_total_mib=143771.0,
                  util_pct=util, temp_c=60.0 + i, power_w=300.0) for i in range(gpus)],
        jobs=[JobStatus(name=f"job{i}", kind=JobKind.COMMAND, state=state,
                        progress=Progress(done=int(t - T0), tokens=int(t - T0) * 100, tokens_per_s=100.0 + i),
                        engine=Engine(url="http://x", state=EngineState.READY, running=3, queued=i, kv_usage=0.5))
              for i in range(jobs)])


def fill(db: HistoryDB, start: float, seconds: int, step: float = 1.0, **kw) -> float:
    t = start
    for _ in range(int(seconds / step)):
        db.record(snap(t, **kw))
        t += step
    return t


@pytest.fixture(autouse=True)
def no_leftover_alerts():
    writes._failed.clear()
    yield
    writes._failed.clear()


def test_every_sample_then_minutes_then_hours_with_min_mean_max(tmp_path):
    clock = Clock()
    db = HistoryDB(tmp_path / "history.db", clock=clock)
    for k in range(2 * 3600 + 5):
        clock.t = T0 + k
        db.record(snap(clock.t, util=float(k % 60)))  # a saw-tooth each minute: 0 .. 59
    counts = db.counts()
    assert counts["1m"] == 120 and counts["1h"] == 2, counts  # two hours, each minute and hour rolled
    assert counts["1s"] <= 3600 + 60, counts  # an hour of samples, a minute's pruning at most behind
    res, points = db.read(T0, T0 + 3599, "1m", gpu=0)
    assert res == "1m" and len(points) == 60 and all(p.gpu == "0" for p in points)
    p = points[0]
    assert (p.lo["util_pct"], p.mean["util_pct"], p.hi["util_pct"], p.n) == (0.0, 29.5, 59.0, 60)
    res, hours = db.read(T0, resolution="1h", job="job1")
    assert [h.t for h in hours] == [T0, T0 + 3600, T0 + 7200]
    assert hours[0].n == 3600 and hours[0].mean["tokens_per_s"] == 101.0 and hours[0].state == "running"
    assert hours[0].hi["done"] == 3599 and hours[0].mean["queued"] == 1.0
    # the hour still filling is made from its minutes and its samples, so "now" is never missing
    assert hours[-1].n == 5 and hours[-1].hi["done"] == 7204


def test_auto_resolution_picks_the_finest_tier_that_holds_the_range(tmp_path):
    clock = Clock()
    db = HistoryDB(tmp_path / "history.db", clock=clock)
    clock.t = fill(db, T0, 1200)
    assert db.read(clock.t - 300)[0] == "1s"
    assert db.read(clock.t - 1100)[0] == "1m"
    assert db.read(clock.t - 12 * 3600)[0] == "1m"
    assert db.read(clock.t - 8 * 86400)[0] == "1h"
    res, pts = db.read(clock.t - 300, resolution="auto", job="job0")
    assert res == "1s" and len(pts) == 300 and {p.job for p in pts} == {"job0"} and not pts[0].lo


def test_old_rows_are_pruned_a_bucket_at_a_time_and_rows_never_exceed_the_tiers(tmp_path):
    """The tiers scaled down (a minute of samples, 10 minutes of minutes, 2 hours of hours),
    run for 5 hours: each tier holds at most what it keeps, plus one bucket of pruning behind."""
    tiers = (Tier("1s", "s1", 0, 60), Tier("1m", "m1", 60, 600), Tier("1h", "h1", 3600, 7200))
    clock = Clock()
    db = HistoryDB(tmp_path / "history.db", tiers=tiers, clock=clock)
    most = {"1s": 0, "1m": 0, "1h": 0}
    for k in range(0, 5 * 3600, 2):
        clock.t = T0 + k
        db.record(snap(clock.t))
        if k % 194 == 0:
            most = {n: max(most[n], c) for n, c in db.counts().items()}
    assert most["1s"] <= 30 + 30 and most["1m"] <= 10 + 60 and most["1h"] <= 2 + 24, most
    counts = db.counts()
    assert counts["1s"] <= 31 and counts["1m"] <= 11 and counts["1h"] <= 3, counts
    res, pts = db.read(T0, resolution="1h", gpu=1)
    assert res == "1h" and [p.t for p in pts] == [T0 + 3 * 3600, T0 + 4 * 3600]  # 2 hours kept, the last one filling


def rows_bound(gpus: int, jobs: int, raw: int, minute: int, hour: int) -> int:
    """The bound on the file: the rows each tier keeps times the largest row of ``gpus`` GPUs
    and ``jobs`` jobs (names of 16 characters, every figure different in every sample: 40 and
    80 bytes raw, 120 and 200 rolled up), a quarter more for SQLite's pages and keys, and
    256 KiB of schema and free pages. The WAL comes on top: 4 MiB (journal_size_limit)."""
    return int(1.25 * (raw * (40 * gpus + 80 * jobs) + (minute + hour) * (120 * gpus + 200 * jobs))) + 2**18


def worst_snap(t: float, rng) -> Snapshot:
    """8 GPUs and 16 jobs, every figure changing, with all its digits."""
    s = snap(t, gpus=8, jobs=16)
    import dataclasses

    def r(k: float) -> float:
        return rng.random() * k

    gpus = [dataclasses.replace(g, mem_used_mib=r(143771), util_pct=r(100), temp_c=r(90), power_w=r(700))
            for g in s.gpus]
    jobs = [dataclasses.replace(j, name=f"generate-llama{i:02d}",
                                progress=Progress(done=int(r(1e9)), tokens=int(r(1e12)), tokens_per_s=r(99999)),
                                engine=Engine(url="u", state=EngineState.READY, running=int(r(999)), queued=int(r(9999)),
                                              kv_usage=r(1)))
            for i, j in enumerate(s.jobs)]
    return dataclasses.replace(s, gpus=gpus, jobs=jobs)


def test_the_file_stays_within_its_bound_for_8_gpus_and_16_jobs(tmp_path):
    """The bound of docs/history.md for 8 GPUs and 16 jobs, checked on the tiers scaled down
    (30 samples, 84 minutes, 12 hours) with the largest rows there are."""
    import random

    rng = random.Random(7)
    tiers = (Tier("1s", "s1", 0, 30), Tier("1m", "m1", 60, 84 * 60), Tier("1h", "h1", 3600, 12 * 3600))
    clock = Clock()
    db = HistoryDB(tmp_path / "history.db", tiers=tiers, clock=clock)
    for k in range(0, 13 * 3600, 15):  # every 15 s: a minute of 4 samples has a row as big as one of 60
        clock.t = T0 + k
        db.record(worst_snap(clock.t, rng))
    counts = db.counts()
    db.close()
    assert counts["1s"] <= 6 and counts["1m"] <= 85 and counts["1h"] <= 13, counts  # a bucket of pruning behind
    size = (tmp_path / "history.db").stat().st_size
    assert size <= rows_bound(8, 16, 6, 85, 13), (size, rows_bound(8, 16, 6, 85, 13))
    assert size >= 0.5 * rows_bound(8, 16, 6, 85, 13)  # the bound is near, not a guess by a factor
    full = rows_bound(8, 16, 3600, 10080, 2160) + 4 * 2**20
    assert 60 * 2**20 < full < 80 * 2**20, full / 2**20  # the figure docs/history.md states: 73 MiB


def test_a_clock_stepped_back_leaves_a_gap_never_a_duplicate_or_a_step_back(tmp_path):
    clock = Clock()
    ring = HistoryRing(3600.0, 1.0, path=tmp_path / "history.db", clock=clock)
    for k in range(300):
        clock.t = T0 + k
        ring.record(snap(clock.t))
    for k in range(200):  # NTP steps the clock back 100 s
        clock.t = T0 + 200 + k
        ring.record(snap(clock.t))
    ts = [s.t for s in ring.samples]
    assert ts == sorted(ts) and len(ts) == len(set(ts)) and ts[-1] == T0 + 399
    assert len(ts) == 300 + 100  # the 100 s the clock went over twice are there once
    _, pts = ring.db.read(T0, resolution="1s", gpu=0)
    pts_t = [p.t for p in pts]
    assert pts_t == sorted(pts_t) and len(pts_t) == len(set(pts_t)) == 400
    _, mins = ring.db.read(T0, resolution="1m", gpu=0)
    assert [p.t for p in mins] == [T0 + 60 * i for i in range(7)]


def test_a_clock_stepped_back_by_a_day_drops_what_was_recorded_ahead_of_it(tmp_path):
    clock = Clock(T0 + 86400)
    ring = HistoryRing(3600.0, 1.0, path=tmp_path / "history.db", clock=clock)
    for k in range(600):  # a clock a day ahead, ten minutes
        clock.t = T0 + 86400 + k
        ring.record(snap(clock.t))
    for k in range(120):  # corrected
        clock.t = T0 + k
        ring.record(snap(clock.t))
    ts = [s.t for s in ring.samples]
    assert ts == [T0 + k for k in range(120)]
    page = ring.read(ops.ReadHistory(since=0.0, until=T0 + 2 * 86400, resolution="1s", gpu=1))
    assert [p.t for p in page.points] == ts
    _, mins = ring.db.read(T0, T0 + 2 * 86400, "1m", gpu=1)
    assert [p.t for p in mins] == [T0, T0 + 60]


def test_a_new_ring_starts_from_the_database_and_greets_with_the_last_hours(tmp_path):
    clock = Clock()
    ring = HistoryRing(3600.0, 1.0, path=tmp_path / "history.db", clock=clock)
    for k in range(0, 3 * 3600, 1):
        clock.t = T0 + k
        ring.record(snap(clock.t))
    ring.close()
    clock.t += 30
    again = HistoryRing(3600.0, 1.0, path=tmp_path / "history.db", clock=clock)
    greeting = again.greeting()
    ts = [s.t for s in greeting]
    assert ts == sorted(ts) and len(ts) == len(set(ts))
    assert ts[0] < T0 + 60 and ts[-1] == T0 + 3 * 3600 - 1  # three hours: minutes, then the last hour's samples
    assert sum(1 for s in greeting if s.t < clock.t - 3600) >= 100
    assert greeting[0].job_tokens_per_s["job1"] == 101.0 and greeting[0].job_done["job1"] == 59
    # the compact samples of ReadHistory without a resolution cover the same hours
    page = again.read(ops.ReadHistory(since=T0))
    assert [s.t for s in page.samples] == ts


@pytest.mark.parametrize("content", [b"this is no database, it is a log file\n" * 100, b"SQLite format 3\x00" + b"\xff" * 5000])
def test_a_corrupt_file_is_moved_aside_with_a_warning(tmp_path, content, caplog):
    path = tmp_path / "history.db"
    path.write_bytes(content)
    db = HistoryDB(path, clock=Clock())
    assert db.record(snap(T0)) == "ok"
    aside = list(tmp_path.glob("history.db.bad-*"))
    assert [p.read_bytes() for p in aside if not p.name.endswith(("-wal", "-shm"))] == [content]
    assert "moved aside" in caplog.text
    assert db.counts()["1s"] == 1


def test_a_foreign_sqlite_file_is_moved_aside_not_written_into(tmp_path, caplog):
    path = tmp_path / "history.db"
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE songs (title TEXT)")
    c.execute("INSERT INTO songs VALUES ('a')")
    c.commit()
    c.close()
    db = HistoryDB(path, clock=Clock())
    db.record(snap(T0))
    (aside,) = [p for p in tmp_path.glob("history.db.bad-*") if not p.name.endswith(("-wal", "-shm"))]
    assert sqlite3.connect(aside).execute("SELECT title FROM songs").fetchall() == [("a",)]
    assert "not gpudeck's history" in caplog.text


def test_a_full_disk_stops_the_history_with_a_disk_alert_and_it_resumes(tmp_path):
    clock = Clock()
    ring = HistoryRing(3600.0, 1.0, path=tmp_path / "history.db", clock=clock)
    for k in range(100):
        clock.t = T0 + k
        ring.record(snap(clock.t))
    before = ring.db.counts()["1s"]
    pages = ring.db.conn.execute("PRAGMA page_count").fetchone()[0]
    ring.db.conn.execute(f"PRAGMA max_page_count={pages}")  # the disk is full: not one page more
    for k in range(100, 400):
        clock.t = T0 + k
        ring.record(snap(clock.t, jobs=8))
    alerts = writes.alerts()
    assert [a.kind.value for a in alerts] == ["disk_full"] and "history.db" in alerts[0].message
    assert "No space left" in alerts[0].message
    assert ring.db.counts()["1s"] < before + 300  # it stopped growing ...
    assert ring.samples[-1].t == T0 + 399  # ... while the sparklines go on in memory
    ring.db.conn.execute("PRAGMA max_page_count=1073741823")  # room again
    clock.t = T0 + 400
    ring.record(snap(clock.t))
    assert writes.alerts() == [] and ring.db.read(T0 + 400, resolution="1s", gpu=0)[1][0].t == T0 + 400


def test_a_full_disk_reads_as_one_on_a_python_whose_sqlite3_names_no_result_codes(tmp_path, monkeypatch):
    """Python 3.10's sqlite3 has no SQLITE_FULL, SQLITE_CORRUPT or SQLITE_NOTADB (3.11 named
    them), and the agent runs there too: a full disk is still a disk alert, not an AttributeError
    out of the history's error path."""
    for name in ("SQLITE_FULL", "SQLITE_CORRUPT", "SQLITE_NOTADB"):
        monkeypatch.delattr(sqlite3, name, raising=False)
    clock = Clock()
    ring = HistoryRing(3600.0, 1.0, path=tmp_path / "history.db", clock=clock)
    for k in range(10):
        clock.t = T0 + k
        ring.record(snap(clock.t))
    pages = ring.db.conn.execute("PRAGMA page_count").fetchone()[0]
    ring.db.conn.execute(f"PRAGMA max_page_count={pages}")  # the disk is full: not one page more
    for k in range(10, 100):
        clock.t = T0 + k
        ring.record(snap(clock.t, jobs=8))
    alerts = writes.alerts()
    assert [a.kind.value for a in alerts] == ["disk_full"] and "No space left" in alerts[0].message


def test_read_history_checks_its_arguments():
    from gpudeck.agents.contract.plain import ProtocolError
    from gpudeck.agents.contract.wire import Request

    with pytest.raises(ProtocolError, match="resolution"):
        ops.op_of(Request(id=1, op="history", args={"resolution": "5m"}))
    with pytest.raises(ProtocolError, match="before 'since'"):
        ops.op_of(Request(id=1, op="history", args={"since": 10.0, "until": 5.0}))
    op = ops.op_of(Request(id=1, op="history", args={"since": 1.0, "job": "gen", "resolution": "1m"}))
    assert op == ops.ReadHistory(since=1.0, job="gen", resolution="1m")
    page = op.answer({"points": [{"t": 1.0, "job": "gen", "n": 60, "mean": {"done": 5.0}}], "resolution": "1m"})
    assert page.points[0].mean == {"done": 5.0}
    with pytest.raises(ProtocolError, match="'gpus_only' leaves the jobs out"):
        ops.op_of(Request(id=1, op="history", args={"job": "gen", "gpus_only": True}))


def test_a_nodes_chart_reads_every_gpu_and_no_job(tmp_path):
    """``gpus_only`` (the console's chart of a node): each GPU's points, none of a job's."""
    clock = Clock()
    ring = HistoryRing(3600.0, 1.0, path=tmp_path / "history.db", clock=clock)
    for k in range(0, 180):
        clock.t = T0 + k
        ring.record(snap(clock.t, gpus=3, jobs=2, util=10.0 * (k // 60)))
    page = ring.read(ops.ReadHistory(since=T0, resolution="1m", gpus_only=True))
    assert page.resolution == "1m" and {p.gpu for p in page.points} == {"0", "1", "2"}
    assert all(p.job is None for p in page.points)
    assert [p.mean["util_pct"] for p in page.points if p.gpu == "1"] == [0.0, 10.0, 20.0]
    both = ring.read(ops.ReadHistory(since=T0, resolution="1m"))
    assert {p.job for p in both.points} == {None, "job0", "job1"}  # without it: the jobs too, as before


def test_rows_are_json_an_operator_can_read_with_sqlite3(tmp_path):
    db = HistoryDB(tmp_path / "history.db", clock=Clock())
    db.record(snap(T0, gpus=1, jobs=1))
    (d,) = sqlite3.connect(tmp_path / "history.db").execute("SELECT d FROM s1").fetchone()
    assert json.loads(d) == {"g": {"0": [1000.0, 50.0, 60.0, 300.0]},
                             "j": {"job0": ["running", 100.0, 0, 3, 0, 0.5, 0]}}
    assert [t.name for t in TIERS] == ["1s", "1m", "1h"]


def test_the_minute_folded_in_memory_is_the_minute_rolled_up_from_its_rows(tmp_path):
    """The minute accumulator writes what ``merge`` makes of the minute's rows; a minute that
    began before a restart is rolled up from its rows, whole."""
    import random

    from gpudeck.agents.history.db import MinuteFold, merge, raw_row, _as_agg

    rng = random.Random(3)
    rows = [raw_row(worst_snap(T0 + k, rng)) for k in range(60)]
    fold = MinuteFold(int(T0), True)
    for r in rows:
        fold.add(json.loads(json.dumps(r)))
    folded, merged = fold.aggregate(), merge(_as_agg(json.loads(json.dumps(r)), False) for r in rows)
    assert folded.keys() == merged.keys() and all(folded[s].keys() == merged[s].keys() for s in folded)

    def near(a, b):  # a mean rounded on the other side of its last digit (a sum, against a running mean)
        if isinstance(a, list):
            return len(a) == len(b) and all(near(x, y) for x, y in zip(a, b))
        return a == b or (isinstance(a, float) and abs(a - b) <= 0.1 + 1e-9)

    assert all(near(folded[s][k], merged[s][k]) for s in folded for k in folded[s])

    clock = Clock()
    db = HistoryDB(tmp_path / "history.db", clock=clock)
    for k in range(90):  # a minute and a half ...
        clock.t = T0 + k
        db.record(snap(clock.t, util=float(k)))
    db.close()
    again = HistoryDB(tmp_path / "history.db", clock=clock)  # ... a restart within the second minute
    for k in range(90, 130):
        clock.t = T0 + k
        again.record(snap(clock.t, util=float(k)))
    _, mins = again.read(T0, resolution="1m", gpu=0)
    assert [(p.t, p.n, p.mean["util_pct"], p.lo["util_pct"], p.hi["util_pct"]) for p in mins[:2]] == [
        (T0, 60, 29.5, 0.0, 59.0), (T0 + 60, 60, 89.5, 60.0, 119.0)]
    assert again.fold is not None and again.fold.whole  # the third minute began in this process
