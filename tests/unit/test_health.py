"""A job's health as it reports it (its S3 backlog, its servers resting, ``blocked``) and idle
paid GPUs: progress.json -> ProgressDoc -> Progress on the wire, the watcher's rules
(``s3_backlog``, ``servers_resting``, ``idle_paid``) on a clock the test sets, and what the
console makes of them (rows, ``status --json``, the plain ``status``, the header's figure,
"since you last looked"). No processes: tests/system/test_health_system.py runs the real worker."""

from __future__ import annotations

import json

import pytest

from gpudeck.agents.contract import wire
from gpudeck.agents.contract.documents import read_progress
from gpudeck.agents.contract.vocab import NOTIFY_EVENTS, AlertKind, EventKind, JobState
from gpudeck.agents.contract.watching import AlertThresholds, ConfigError, NotifyTarget, WatchSettings
from gpudeck.agents.contract.wire import (Alert, Gpu, GpuProcess, Host, JobStatus, Progress, ServerHealth,
                                          Snapshot, Uploads)
from gpudeck.agents.sense.progress import ProgressTracker
from gpudeck.agents.contract.units import index_ranges
from gpudeck.agents.watch.checks import Checks, idle_gpus
from gpudeck.agents.watch.conditions import Conditions
from gpudeck.agents.watch.config import WatchConfig
from gpudeck.console.commands.status import render_status
from gpudeck.console.rows import EventRow
from gpudeck.console.since import summarize
from gpudeck.console.state import FleetState
from gpudeck.remote.fleet import FleetError, parse_fleet

NOW = 1_764_504_000.0  # 2025-11-30 12:00:00 UTC
MIN = 60.0

GENERATE_DOC = {
    "done": 120, "total": 1000, "tokens": 50_000, "updated_at": NOW,
    "servers": [{"url": "http://a:1", "state": "ok", "outstanding": 4, "ok": 100, "failed": 0, "last_error": None,
                 "down_since": None},
                {"url": "http://b:2", "state": "resting", "outstanding": 0, "ok": 20, "failed": 9,
                 "last_error": "cannot connect: Connection refused", "down_since": NOW - 20 * MIN}],
    "uploads": {"pending": 3, "uploaded": 7, "failures": 2, "last_error": "upload of shard-3 failed: timeout",
                "done_set_pending": True, "pending_bytes": 3_000_000, "oldest_pending_at": NOW - 40 * MIN,
                "last_upload_at": NOW - 45 * MIN},
    "blocked": None,
    "in_flight": 4, "prompts": "/data/p.jsonl",  # the worker's own: left alone
}


def _tracked(tmp_path, doc: dict) -> Progress:
    path = tmp_path / "progress.json"
    path.write_text(json.dumps(doc))
    p = ProgressTracker(str(path), None, None).poll(NOW)
    assert p is not None
    return p


# ---------------------------------------------------------------- parsing


def test_generate_s_health_is_carried_typed_from_progress_json_to_the_wire(tmp_path):
    p = _tracked(tmp_path, GENERATE_DOC)
    assert p.error is None
    assert p.uploads == Uploads(pending=3, uploaded=7, failures=2, last_error="upload of shard-3 failed: timeout",
                                done_set_pending=True, pending_bytes=3_000_000, oldest_pending_at=NOW - 40 * MIN,
                                last_upload_at=NOW - 45 * MIN)
    assert [(s.url, s.state, s.down_since) for s in p.servers] == [("http://a:1", "ok", None),
                                                                  ("http://b:2", "resting", NOW - 20 * MIN)]
    assert p.servers_down == 1 and p.blocked is None
    # on the wire and back, typed
    job = JobStatus("gen", "generate", JobState.RUNNING, progress=p)
    snap = Snapshot("n", 1, NOW, Host("h", 1.0, 1, 1, 2, 0.0, 0.0, 0.0), [], [job])
    back = wire.decode(wire.encode(snap))
    assert back.jobs[0].progress == p and isinstance(back.jobs[0].progress.uploads, Uploads)


def test_extract_s_s3_figure_is_its_uploads_and_blocked_is_kept(tmp_path):
    p = _tracked(tmp_path, {"done": 5, "s3": {"pending": 2, "uploaded": 1, "failures": 0, "last_error": None,
                                              "done_set_pending": False}, "blocked": "No space left on device"})
    assert p.uploads is not None and p.uploads.pending == 2 and p.uploads.pending_bytes is None
    assert p.blocked == "No space left on device" and p.servers == []


def test_an_old_document_and_an_old_line_still_parse_with_the_defaults(tmp_path):
    """A worker of before (no servers, uploads or blocked) and a snapshot line without the new
    fields: read, with nothing reported."""
    p = _tracked(tmp_path, {"done": 3, "total": 10})
    assert (p.uploads, p.servers, p.blocked) == (None, [], None)
    line = ('{"type":"snapshot","node":"n","seq":1,"t":1.0,"host":{"hostname":"h","cpu_pct":1,"cpu_count":1,'
            '"mem_used_bytes":1,"mem_total_bytes":2,"load1":0,"load5":0,"load15":0},"gpus":[],'
            '"jobs":[{"name":"g","kind":"generate","state":"running","progress":{"done":3}}],'
            '"alerts":[{"kind":"stalled","message":"m"}]}')
    snap = wire.decode(line)
    assert snap.jobs[0].progress == Progress(done=3) and snap.alerts[0].per_hour is None
    # an old pre-health uploads object, as generate wrote it until now: read
    old = {"pending": 1, "uploaded": 0, "failures": 0, "last_error": None, "done_set_pending": False}
    assert _tracked(tmp_path, {"done": 1, "uploads": old}).uploads == Uploads(pending=1)


def test_a_health_field_of_the_wrong_shape_is_named_and_the_last_good_reading_kept(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text(json.dumps(GENERATE_DOC))
    tracker = ProgressTracker(str(path), None, None)
    good = tracker.poll(NOW)
    path.write_text(json.dumps({**GENERATE_DOC, "done": 121, "servers": ["http://a:1"]}))
    with pytest.raises(ValueError, match=r"servers\[0\]: expected an object"):
        read_progress(path)
    bad = tracker.poll(NOW + 1)
    assert bad.error and "servers" in bad.error and bad.servers == good.servers and bad.done == 120


# ---------------------------------------------------------------- the rules


def _gen(progress: Progress, state=JobState.RUNNING, gpus=()) -> JobStatus:
    return JobStatus("gen", "generate", state, list(gpus), progress=progress)


def _evaluate(checks: Checks, now: float, jobs, gpus=(), limits=AlertThresholds(), price=None):
    now_true, once = checks.evaluate(now, list(gpus), list(jobs), None, [], [], limits, {}, price)
    assert once == []
    return {c.key: c for c in now_true}


def test_s3_backlog_comes_up_past_its_threshold_only_while_the_job_lives():
    limits = AlertThresholds(s3_backlog_s=30 * MIN)
    uploads = Uploads(pending=3, pending_bytes=3_000_000, oldest_pending_at=NOW, last_upload_at=NOW - 5 * MIN,
                      last_error="upload of shard-3 failed: timeout")
    job = _gen(Progress(done=1, uploads=uploads))
    checks = Checks("b200")
    assert "s3_backlog:gen" not in _evaluate(checks, NOW + 30 * MIN, [job], limits=limits)  # not more than 30 min
    c = _evaluate(checks, NOW + 31 * MIN, [job], limits=limits)["s3_backlog:gen"]
    assert (c.event, c.alert, c.job) == (EventKind.S3_BACKLOG, AlertKind.S3_BACKLOG, "gen")
    assert c.message == ("job gen: 3 file(s) (3.0 MB) waiting to go to S3, the oldest for 31m 00s; last upload "
                         "36m 00s ago: upload of shard-3 failed: timeout")
    assert not _evaluate(checks, NOW + 31 * MIN, [_gen(Progress(done=1, uploads=uploads), JobState.FAILED)],
                         limits=limits)
    drained = Uploads(pending=0, oldest_pending_at=None, last_upload_at=NOW + 31 * MIN)
    assert not _evaluate(checks, NOW + 32 * MIN, [_gen(Progress(done=1, uploads=drained))], limits=limits)


def test_servers_resting_needs_more_than_the_share_for_more_than_the_time():
    limits = AlertThresholds(servers_resting_pct=25, servers_resting_s=10 * MIN)

    def servers(down: int, of: int, since: float) -> list[ServerHealth]:
        return [ServerHealth(f"http://s{i}:1", "resting" if i < down else "ok", last_error="HTTP 503" if i < down
                             else None, down_since=since if i < down else None) for i in range(of)]

    checks = Checks()
    quarter = _gen(Progress(done=1, servers=servers(2, 8, NOW)))  # 25%: not more than the share
    assert not _evaluate(checks, NOW + 20 * MIN, [quarter], limits=limits)
    three = _gen(Progress(done=1, servers=servers(3, 8, NOW)))
    assert not _evaluate(checks, NOW + 10 * MIN, [three], limits=limits)  # not yet longer than 10 min
    c = _evaluate(checks, NOW + 11 * MIN, [three], limits=limits)["servers_resting:gen"]
    assert (c.event, c.alert) == (EventKind.SERVERS_RESTING, AlertKind.SERVERS_RESTING)
    assert c.message == ("job gen: 3/8 servers resting or failing, the longest for 11m 00s (http://s0:1, "
                         "http://s1:1, http://s2:1): HTTP 503")
    # one of two down (a stopped sim engine), failing between rests: counted from its first failure
    half = [ServerHealth("http://a:1", "ok"), ServerHealth("http://b:1", "failing", down_since=NOW)]
    assert "servers_resting:gen" in _evaluate(checks, NOW + 11 * MIN, [_gen(Progress(done=1, servers=half))],
                                              limits=limits)


def _gpu(i: int, util, procs=()) -> Gpu:
    return Gpu(i, f"GPU-{i}", "NVIDIA B200", 1000.0, 180_000.0, util, 40.0, 100.0, list(procs))


def test_idle_gpus_are_those_at_zero_use_or_unreported_and_unheld():
    held = JobStatus("gen", "generate", JobState.RUNNING, [1, 3])
    gpus = [_gpu(0, 0.0), _gpu(1, 0.0), _gpu(2, 55.0), _gpu(3, 80.0), _gpu(4, None), _gpu(5, None, [GpuProcess(7, 1.0)]),
            _gpu(6, None)]
    assert idle_gpus(gpus, [held]) == [0, 1, 4, 6]  # GPU 1: its job at 0%; 5: a process; 6: no job, no use known
    assert index_ranges([6, 0, 1, 2, 3, 9, 10]) == "0-3,6,9-10"


def test_idle_paid_says_the_money_and_since_when_then_clears_when_a_job_uses_them():
    """8 GPUs at $57.60/h: 4 idle are $28.80/h. The clock is the test's: up at idle_paid_s, with
    the time it went idle; a GPU put to work clears it."""
    limits = AlertThresholds(idle_paid_s=30 * MIN)
    busy = JobStatus("gen", "generate", JobState.RUNNING, [4, 5, 6, 7])
    gpus = [_gpu(i, 0.0) for i in range(4)] + [_gpu(i, 90.0) for i in range(4, 8)]
    checks = Checks("b200")
    went_idle = NOW - 9 * 3600 - 50 * MIN  # 02:10 UTC
    assert not _evaluate(checks, went_idle, [busy], gpus, limits, price=57.6)
    assert not _evaluate(checks, went_idle + 29 * MIN, [busy], gpus, limits, price=57.6)
    c = _evaluate(checks, went_idle + 30 * MIN, [busy], gpus, limits, price=57.6)["idle_paid:0-3"]
    assert c.message == "GPU 0-3 on b200: $28.80/h idle since 02:10 UTC"
    assert (c.event, c.alert, c.per_hour, c.gpu) == (EventKind.IDLE_PAID, AlertKind.IDLE_PAID, pytest.approx(28.8),
                                                    None)
    # a job at 0% on GPU 3 keeps it idle; a job that uses 0-3 clears it
    at_zero = JobStatus("other", "command", JobState.RUNNING, [3])
    assert "idle_paid:0-3" in _evaluate(checks, went_idle + 31 * MIN, [busy, at_zero], gpus, limits, price=57.6)
    working = [_gpu(i, 70.0) for i in range(8)]
    assert not _evaluate(checks, went_idle + 32 * MIN, [busy], working, limits, price=57.6)
    # idle again: counted afresh from now, not from 02:10
    assert not _evaluate(checks, went_idle + 33 * MIN, [busy], gpus, limits, price=57.6)


def test_idle_paid_needs_a_price():
    gpus = [_gpu(0, 0.0)]
    checks = Checks("n")
    for t in (NOW, NOW + 3 * 3600):
        assert not _evaluate(checks, t, [], gpus, AlertThresholds(idle_paid_s=60), price=None)
        assert not _evaluate(checks, t, [], gpus, AlertThresholds(idle_paid_s=60), price=0.0)
    c = _evaluate(Checks(), NOW, [], gpus, AlertThresholds(idle_paid_s=0), price=10.0)["idle_paid:0"]
    assert c.message == "GPU 0: $10.00/h idle since 12:00 UTC" and c.gpu == 0


def test_the_new_conditions_are_notified_and_resolved_like_every_other(tmp_path):
    emitted = []
    conds = Conditions(tmp_path, lambda kind, message, **kw: emitted.append((kind, kw.get("key"), kw.get("notify"))))
    job = _gen(Progress(done=1, uploads=Uploads(pending=1, oldest_pending_at=NOW - 3600)))
    now_true = list(_evaluate(Checks(), NOW, [job]).values())
    conds.update(NOW, now_true, 900)
    conds.update(NOW + 60, [], 900)
    assert emitted == [(EventKind.S3_BACKLOG, "s3_backlog:gen", True), (EventKind.RESOLVED, "s3_backlog:gen", True)]
    for kind in (EventKind.S3_BACKLOG, EventKind.SERVERS_RESTING, EventKind.IDLE_PAID):
        assert kind in NOTIFY_EVENTS and NotifyTarget(url="https://x.example/h").wants(kind)


# ---------------------------------------------------------------- the fleet file and the node's price


FLEET = """
[alerts]
s3_backlog_s = 600
servers_resting_pct = 40
servers_resting_s = 120
idle_paid_s = 900

[[nodes]]
name = "b200"
host = "b200.example"
price_per_hour = 57.6

[[nodes]]
name = "free"
host = "free.example"
"""


def test_the_alerts_keys_and_each_node_s_price_go_to_its_watcher(tmp_path):
    fleet = parse_fleet(FLEET, "fleet.toml")
    a = fleet.alerts
    assert (a.s3_backlog_s, a.servers_resting_pct, a.servers_resting_s, a.idle_paid_s) == (600, 40, 120, 900)
    assert AlertThresholds() == AlertThresholds(s3_backlog_s=1800, servers_resting_pct=25, servers_resting_s=600,
                                                idle_paid_s=1800)
    b200, free = fleet.watch_settings("b200"), fleet.watch_settings("free")
    assert b200.price_per_hour == 57.6 and free.price_per_hour is None
    # through configure (plain JSON) and watch.json, kept
    from gpudeck.agents.contract.plain import to_plain
    back = WatchSettings.from_plain(json.loads(json.dumps(to_plain(b200))))
    assert back == b200
    config = WatchConfig()
    config.apply(back, [])
    config.save(tmp_path)
    assert WatchConfig.load(tmp_path).price_per_hour == 57.6
    with pytest.raises(ConfigError, match="price_per_hour"):
        WatchSettings.from_plain({"price_per_hour": -1})
    with pytest.raises(FleetError, match="idle_paid_s"):
        parse_fleet("[alerts]\nidle_paid_s = -5\n", "fleet.toml")


# ---------------------------------------------------------------- the console


PRICED = """
[[nodes]]
name = "b200"
host = "b200.example"
price_per_hour = 57.6

[[jobs]]
name = "gen"
node = "b200"
kind = "generate"
servers = ["http://a:1", "http://b:2"]
prompts = "/data/p.jsonl"
out = "/data/gen"
"""


def health_state(tmp_path) -> FleetState:
    state = FleetState(parse_fleet(PRICED, "priced.toml"), clock=lambda: NOW)
    p = _tracked(tmp_path, GENERATE_DOC)
    job = JobStatus("gen", "generate", JobState.RUNNING, [], pid=10, started_at=NOW - 3600, progress=p)
    idle = Alert(AlertKind.IDLE_PAID, "GPU 0-3 on b200: $28.80/h idle since 02:10 UTC", per_hour=28.8)
    state.apply(Snapshot("b200", 1, NOW, Host("h", 1.0, 1, 1, 2, 0.0, 0.0, 0.0), [], [job], [idle]))
    return state


def test_the_console_s_rows_json_and_text_carry_the_health(tmp_path):
    state = health_state(tmp_path)
    (row,) = state.job_rows()
    assert (row.uploads_pending, row.uploads_bytes, row.last_upload_s) == (3, 3_000_000, 45 * MIN)
    assert (row.servers_down, row.servers_total) == (1, 2)
    assert state.totals().idle_per_hour == 28.8
    doc = state.to_json()
    (j,) = doc["jobs"]
    assert j["uploads"]["pending"] == 3 and j["uploads"]["pending_bytes"] == 3_000_000
    assert j["uploads"]["oldest_pending_at"] == NOW - 40 * MIN and j["uploads"]["last_upload_at"] == NOW - 45 * MIN
    assert (j["servers_resting"], j["servers_total"], j["blocked"]) == (1, 2, None)
    assert j["servers"][1]["state"] == "resting" and j["servers"][1]["down_since"] == NOW - 20 * MIN
    assert doc["fleet"]["idle_per_hour"] == 28.8 and doc["alerts"][0]["per_hour"] == 28.8
    text = render_status(state)
    assert ("  s3: 3 file(s) (3.0 MB) waiting, the oldest for 40m 00s; last upload 45m 00s ago; last error: "
            "upload of shard-3 failed: timeout") in text
    assert "  servers: 1/2 resting; http://b:2 resting (cannot connect: Connection refused)" in text
    assert "$28.80/h idle" in text


def test_a_job_that_reports_no_health_has_none_and_blocked_is_a_flag(tmp_path):
    state = FleetState(parse_fleet(PRICED, "priced.toml"), clock=lambda: NOW)
    job = JobStatus("gen", "generate", JobState.RUNNING, [], progress=Progress(done=1, blocked="disk full"))
    state.apply(Snapshot("b200", 1, NOW, Host("h", 1.0, 1, 1, 2, 0.0, 0.0, 0.0), [], [job]))
    (row,) = state.job_rows()
    assert (row.uploads_pending, row.servers_total) == (None, None) and "blocked" in row.flags
    assert state.totals().idle_per_hour is None and state.to_json()["fleet"]["idle_per_hour"] is None
    j = state.to_json()["jobs"][0]
    assert (j["uploads"], j["servers"], j["blocked"]) == (None, [], "disk full")


def test_since_you_last_looked_says_the_new_conditions():
    def ev(seq, t, kind, message, job=None, cond=None, of=None):
        return EventRow(f"b200:{seq}", t, seq, "b200", kind, message, job, None, cond, of)

    rows = [ev(1, NOW - 3 * 3600, "s3_backlog", "job gen: 3 file(s) ...", "gen", "s3_backlog:gen"),
            ev(2, NOW - 2 * 3600, "resolved", "resolved", "gen", "s3_backlog:gen", of="s3_backlog"),
            ev(3, NOW - 3600, "idle_paid", "GPU 0-3 on b200: $28.80/h idle since 11:00 UTC", None, "idle_paid:0-3"),
            ev(4, NOW - 1800, "servers_resting", "job gen: 2/8 ...", "gen", "servers_resting:gen")]
    line = summarize(rows, NOW - 4 * 3600, NOW)
    assert "gen behind on its S3 uploads for 1 h" in line
    assert "had servers resting for 30 min (still)" in line
    assert "GPU 0-3 idle and paid for for 1 h (still)" in line
