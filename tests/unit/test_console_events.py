"""The console's side of the timeline, without a screen: "since you last looked" said in one
line, the last look kept per fleet, the merged and bounded list of events, what a live event
tells the operator, and URLs kept out of all of it."""

from __future__ import annotations

import json
import os
import time

import pytest

from gpudeck.agents.contract import ops
from gpudeck.agents.contract.plain import ProtocolError, from_dict
from gpudeck.agents.contract.vocab import EventKind
from gpudeck.agents.contract.wire import Event
from gpudeck.agents.watch.events import EventLog
from gpudeck.console.looked import LOOKBACK_S, LookedStore, default_path, fleet_key
from gpudeck.console.rows import EventRow
from gpudeck.console.since import since_label, span, summarize
from gpudeck.console.timeline import Timeline, event_row, live_notice, redact_urls

T = 1_764_504_000.0  # 2025-11-30 12:00:00 UTC


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def ev(dt: float, seq: int, kind: str, job=None, gpu=None, cond=None, of=None, node="gpu-a", message="m") -> EventRow:
    return EventRow(f"{node}:{seq}", T + dt, seq, node, kind, message, job, gpu, cond, of)


# ---------------------------------------------------------------- the summary


def test_deaths_and_restarts_are_counted_per_job():
    events = [ev(60, 1, "died", "gen"), ev(70, 2, "restarted", "gen"), ev(600, 3, "died", "gen"),
              ev(610, 4, "state", "gen"), ev(620, 5, "action", "gen"), ev(900, 6, "restarted", "gen"),
              ev(950, 7, "restarted", "gen"), ev(1000, 8, "finished", "audit")]
    assert summarize(events, T, T + 3600) == "since 12:00: gen died twice and was restarted 3 times; audit finished"


def test_an_alert_lasts_until_its_resolved_event_or_is_still_on():
    throttle = "gpu_health:throttle:3:hw_slowdown"
    events = [ev(100, 1, "gpu_health", gpu=3, cond=throttle),
              ev(100 + 40 * 60, 2, "resolved", gpu=3, cond=throttle, of="gpu_health"),
              ev(200, 3, "temperature", gpu=1, cond="temperature:1")]
    line = summarize(events, T, T + 200 + 17 * 60)
    assert line == "since 12:00: GPU 3 throttled for 40 min; GPU 1 hot for 17 min (still)"


def test_a_condition_from_before_the_last_look_counts_while_it_lasts():
    events = [ev(-3 * 3600, 1, "disk", cond="disk:/data"), ev(-7200, 2, "stalled", "gen", cond="stalled:gen"),
              ev(-3600, 3, "resolved", "gen", cond="stalled:gen", of="stalled"),  # over before: not news
              ev(-600, 4, "died", "old")]  # before the last look: not news
    assert summarize(events, T, T + 600) == "since 12:00: disk /data low on space for 3 h 10 min (still)"


def test_what_is_not_news_and_nothing_at_all():
    events = [ev(10, 1, "state", "gen"), ev(20, 2, "notified"), ev(30, 3, "alert", cond="alert:shared_gpu:gpu3"),
              ev(40, 4, "resolved", cond="alert:shared_gpu:gpu3", of="alert"), ev(50, 5, "watch")]
    assert summarize(events, T, T + 60) == ("since 12:00: 1 state change, 1 notification sent, 1 alert, 1 resolved "
                                            "and 1 watcher start or stop")  # not news, but not nothing
    assert summarize(events, T + 50, T + 60) == "nothing happened since 12:00"
    assert summarize([], T, T + 60) == "nothing happened since 12:00"


def test_problems_first_and_a_long_line_is_capped():
    events = [ev(10, 1, "finished", "a"), ev(20, 2, "restarted", "b")] + \
             [ev(30 + i, 3 + i, "died", f"job-{i}") for i in range(8)] + [ev(90, 20, "gave_up", "job-0")]
    line = summarize(events, T, T + 100, max_chars=90)
    assert line.startswith("since 12:00: job-0 died and gave up; job-1 died; ")
    assert len(line) <= 90 and line.endswith(" more")
    shown = line.count(";") - 1 + 1  # phrases shown, the "… and N more" apart
    more = int(line.rsplit(" and ", 1)[1].split()[0])
    assert shown + more == 10  # 8 jobs that died, b restarted, a finished: nothing lost in the count
    assert "a finished" not in line  # the good news goes last, so it is the first cut


def test_one_offs_are_counted_and_nodes_are_named_when_there_are_several():
    events = [ev(10, 1, "gpu_health", gpu=0, cond="gpu_health:xid:0:79"),
              ev(20, 2, "gpu_health", gpu=0, cond="gpu_health:xid:0:79"),
              ev(30, 1, "temperature", gpu=0, cond="temperature:0", node="gpu-b"),
              ev(90, 2, "resolved", gpu=0, cond="temperature:0", of="temperature", node="gpu-b"),
              ev(40, 3, "stalled", "gen", cond="stall-restart:gen"), ev(41, 4, "restarted", "gen")]
    line = summarize(events, T, T + 100)
    assert "GPU 0 on gpu-a had 2 XID errors" in line
    assert "GPU 0 on gpu-b hot for 1 min" in line
    assert "gen stalled and was restarted" in line


def test_times_and_spans_read_as_words():
    assert since_label(T - 2 * 3600, T) == "10:00"
    assert since_label(T - 86400, T) == "Sat 12:00"
    assert since_label(T - 30 * 86400, T) == "2025-10-31 12:00"
    assert (span(20), span(40 * 60), span(2 * 3600 + 300), span(3 * 86400 + 4 * 3600)) == \
        ("1 min", "40 min", "2 h 05 min", "3 d 4 h")


# ---------------------------------------------------------------- the last look


def test_the_first_look_goes_back_8_hours_then_each_look_is_remembered(tmp_path, state_home):
    store = LookedStore()
    assert store.path == state_home / "gpudeck" / "last-looked.json" == default_path()
    key = fleet_key("fleet.toml")
    assert key == os.path.abspath("fleet.toml") and fleet_key(None) == "this machine"
    assert store.last(key) is None and store.since(key, T) == T - LOOKBACK_S == T - 8 * 3600
    assert store.record(key, T) is None
    assert LookedStore().since(key, T + 60) == T  # a new console reads it back
    assert LookedStore().last("/elsewhere/fleet.toml") is None  # per fleet
    assert json.loads(store.path.read_text()) == {"fleets": {key: T}}
    assert store.warning is None


@pytest.mark.parametrize("content", ["{not json", '["a list"]', '{"fleets": 3}', "\udcff"])
def test_a_broken_file_is_ignored_with_a_warning_and_replaced(tmp_path, content):
    path = tmp_path / "state" / "last-looked.json"
    path.parent.mkdir()
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    store = LookedStore(path)
    assert store.since("k", T) == T - LOOKBACK_S
    assert store.warning is not None and str(path) in store.warning and "looking back 8 h" in store.warning
    assert store.record("k", T) is None
    assert LookedStore(path).last("k") == T


def test_the_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "last-looked.json"
    store = LookedStore(path)
    store.record("a", T)
    before = path.read_text()

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    why = store.record("b", T + 1)
    assert why is not None and "cannot be written" in why and "No space left" in why
    monkeypatch.undo()
    assert path.read_text() == before  # the old moment, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last-looked.json"]  # no temp file left behind


def test_a_file_of_many_fleets_keeps_the_newest(tmp_path):
    store = LookedStore(tmp_path / "looked.json")
    for i in range(130):
        store.record(f"/fleet-{i}.toml", T + i)
    kept = json.loads(store.path.read_text())["fleets"]
    assert len(kept) == 100 and "/fleet-129.toml" in kept and "/fleet-29.toml" not in kept


# ---------------------------------------------------------------- the timeline


def test_events_are_merged_in_time_order_kept_once_and_bounded():
    tl = Timeline(limit=5)
    a = [ev(10, 1, "died", "x", node="a"), ev(30, 2, "restarted", "x", node="a")]
    b = [ev(20, 7, "finished", "y", node="b")]
    assert [r.key for r in tl.add(a)] == ["a:1", "a:2"]
    assert [r.key for r in tl.add(b + a)] == ["b:7"]  # a's again: not new
    assert [r.key for r in tl.rows()] == ["a:1", "b:7", "a:2"]
    newer = [ev(40 + i, 10 + i, "state", node="b") for i in range(4)]
    tl.add(newer)
    assert len(tl) == 5 and tl.rows()[0].key == "a:2"  # the oldest two went
    assert tl.add([ev(5, 99, "died", "z", node="c")]) == []  # older than all kept, when full: dropped
    tl.followed("a", 2)
    tl.followed("a", 1)
    assert tl.after == {"a": 2}


def test_a_live_event_says_how_bad_it_is():
    died = live_notice(ev(0, 1, "died", "gen", message="job gen died (exit code 1) on attempt 1"))
    assert died is not None and died.severity == "error" and died.title == "gpu-a: died (gen)"
    assert died.text == "job gen died (exit code 1) on attempt 1"
    assert live_notice(ev(0, 2, "temperature", gpu=3)).severity == "warning"
    assert live_notice(ev(0, 3, "finished", "gen")).severity == "information"
    assert live_notice(ev(0, 4, "resolved", gpu=3, of="temperature")).severity == "information"
    for quiet in (ev(0, 5, "state"), ev(0, 6, "notified"), ev(0, 7, "action"),
                  ev(0, 8, "resolved", of="alert"), ev(0, 9, "alert")):
        assert live_notice(quiet) is None
    told = {k.value for k in EventKind if live_notice(ev(0, 1, k.value, of="died")) is not None}
    assert told == {"died", "restarted", "gave_up", "stalled", "finished", "gpu_health", "disk", "temperature",
                    "deadline", "plan_drift", "s3_backlog", "servers_resting", "idle_paid", "node_unreachable",
                    "resolved", "blocked", "quality", "watcher_restarted", "acknowledged", "note",
                    "idle_action"}


def test_no_url_reaches_the_screen_with_its_token():
    token = "T0KEN-s3cr3t-9f8e7d6c5b4a"
    raw = {"t": T, "seq": 4, "node": "agent-name", "kind": "notify_failed", "job": "gen", "gpu": None,
           "message": f"died to slack https://hooks.slack.com/services/{token}?x=1: ConnectError "
                      f"(also https://ntfy.sh/{token} and http://user:{token}@10.0.0.1:8080/a)",
           "key": None, "details": {"of": 3}}
    row = event_row("gpu-a", from_dict(Event, raw))
    assert token not in row.message
    assert all(shown in row.message for shown in ("https://hooks…/…", "https://ntfy.…/…", "http://user…/…"))
    assert row.node == "gpu-a" and row.key == "gpu-a:4"  # the fleet's name of the node
    assert redact_urls("no url here: 3 GiB free on /data") == "no url here: 3 GiB free on /data"
    for bad in (None, [], {"t": "x", "seq": 1}, {"t": 1.0, "seq": True}, {"t": 1.0}):  # refused on the way in
        with pytest.raises(ProtocolError):
            ops.ReadEvents().answer({"node": "n", "seq": 1, "events": [bad]})


def test_a_follower_asking_for_nothing_new_reads_no_file(tmp_path, monkeypatch):
    from gpudeck.agents.watch import events as events_module

    log = EventLog(tmp_path, "n")
    for i in range(3):
        log.add(EventKind.STATE, f"s{i}")
    assert [e.message for e in log.read(after_seq=2)] == ["s2"]
    opened = []
    real_open = open
    monkeypatch.setattr(events_module, "open", lambda *a, **kw: opened.append(a[0]) or real_open(*a, **kw),
                        raising=False)
    assert log.read(after_seq=3) == [] and opened == []  # asked every second by each console: no read
    log.add(EventKind.STATE, "s3")
    assert [e.message for e in log.read(after_seq=3)] == ["s3"] and opened


def test_a_follower_reading_while_an_event_is_being_added_misses_nothing(tmp_path, monkeypatch):
    """The agent answers ReadEvents off its loop, in a thread, while another thread adds an
    event: a poll that lands after the event is numbered and before its line is in the file
    must not move the follower past it (a note once never reached an open console this way)."""
    import threading

    from gpudeck.agents.watch import events as events_module

    log = EventLog(tmp_path, "n")
    log.add(EventKind.STATE, "before")
    entered, release = threading.Event(), threading.Event()
    real = events_module.to_plain

    def held(obj):  # the note's add stops here, inside its lock, until the poll below is done
        if getattr(obj, "message", None) == "the note":
            entered.set()
            assert release.wait(30)
        return real(obj)

    monkeypatch.setattr(events_module, "to_plain", held)
    adder = threading.Thread(target=log.add, args=(EventKind.NOTE, "the note"))
    adder.start()
    try:
        assert entered.wait(30)
        seq = log.seq  # as the agent's ReadEvents answers: the seq, then the read
        seen = log.read(after_seq=1)
    finally:
        release.set()
        adder.join(30)
    after = max([seq, 1] + [e.seq for e in seen])  # where the console's follower asks from next
    seen += log.read(after_seq=after)
    assert [e.message for e in seen] == ["the note"]


def test_a_line_still_being_written_is_no_event_and_no_warning(tmp_path, caplog):
    log = EventLog(tmp_path, "n")
    log.add(EventKind.STATE, "whole")
    with open(log.path, "a") as f:
        f.write('{"t": 1.0, "seq": 2, "node"')  # another thread's write, half done
    with caplog.at_level("WARNING", logger="agents"):
        assert [e.message for e in log.read()] == ["whole"]
    assert not caplog.records
