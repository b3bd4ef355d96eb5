"""Progress: a done-set counted while it grows, progress.json, rates, ETAs.

The unit tier's tests of this file (starts nothing); the others are in
tests/system/test_progress.py."""

from __future__ import annotations

import json
import os

from gpudeck.agents.sense.progress import DoneSetCounter, ProgressTracker
from gpudeck.agents.sense.rates import CounterRate, eta_seconds


def test_done_set_reads_only_new_bytes_and_waits_for_a_whole_line(tmp_path):
    path = tmp_path / "done.txt"
    path.write_bytes(b"a\nb\n")
    c = DoneSetCounter(str(path))
    assert c.poll() == 2 and c.offset == 4
    with open(path, "ab") as f:
        f.write(b"c\nhalf-writ")
    assert c.poll() == 3
    # the bytes already counted are never read again: overwrite them in place and see
    with open(path, "r+b") as f:
        f.write(b"x\ny\n")
    assert c.poll() == 3
    with open(path, "ab") as f:
        f.write(b"ten\n")
    assert c.poll() == 4


def test_done_set_replaced_or_truncated_starts_over(tmp_path):
    path = tmp_path / "done.txt"
    path.write_bytes(b"1\n2\n3\n")
    c = DoneSetCounter(str(path))
    assert c.poll() == 3
    tmp = tmp_path / "new"
    tmp.write_bytes(b"1\n")
    os.replace(tmp, path)
    assert c.poll() == 1
    assert DoneSetCounter(str(tmp_path / "missing")).poll() == 0


def test_progress_json_rate_eta_and_a_bad_file(tmp_path):
    path = tmp_path / "progress.json"
    t = ProgressTracker(str(path), None, None, window_s=60)
    assert t.poll(now=0.0) is None  # nothing written yet
    path.write_text(json.dumps({"done": 100, "total": 1100, "tokens": 10_000, "quality": {"empty_answer": 2}}))
    p = t.poll(now=100.0)
    assert p.done == 100 and p.total == 1100 and p.rate_per_s is None and p.quality == {"empty_answer": 2}
    path.write_text(json.dumps({"done": 200, "total": 1100, "tokens": 30_000}) + " ")
    p = t.poll(now=110.0)
    assert p.rate_per_s == 10.0 and p.tokens_per_s == 2000.0 and p.eta_s == 90.0
    path.write_text("{not json")
    p = t.poll(now=111.0)
    assert p.done == 200, "the last good reading is kept"
    assert p.error and "progress.json" in p.error
    path.write_text(json.dumps({"done": "many"}))
    assert "done: expected an integer, got 'many'" in t.poll(now=112.0).error


def test_counter_rate_handles_a_reset():
    r = CounterRate(window_s=100)
    for t, v in [(0, 1000), (10, 2000), (20, 100), (30, 1100)]:  # restarted between 10 and 20
        r.add(t, v)
    assert r.rate() == (1000 + 100 + 1000) / 30


def test_eta():
    assert eta_seconds(50, 100, 5.0) == 10.0
    assert eta_seconds(100, 100, None) == 0.0
    assert eta_seconds(50, None, 5.0) is None
    assert eta_seconds(50, 100, 0.0) is None


def test_a_short_window_shows_what_the_job_reports(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text(json.dumps({"done": 10, "total": 100, "tokens": 500, "tokens_per_s": 42.0, "eta_s": 77.0}))
    t = ProgressTracker(str(path), None, None)
    t.poll(now=0.0)
    p = t.poll(now=1.0)  # one second of history is not a rate yet
    assert p.tokens_per_s == 42.0 and p.rate_per_s is None and p.eta_s == 77.0


def test_seeded_points_give_a_rate_at_the_first_look(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text(json.dumps({"done": 300, "total": 1300, "tokens": 30_000}))
    t = ProgressTracker(str(path), None, None, window_s=120)
    t.seed([(0.0, 100, 10_000), (10.0, 200, 20_000)])
    p = t.poll(now=20.0)
    assert p.rate_per_s == 10.0 and p.tokens_per_s == 1000.0 and p.eta_s == 100.0
