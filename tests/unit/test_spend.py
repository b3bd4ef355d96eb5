"""Spend where it goes: an attempt's dollars (its hours x its node's price x the GPUs it held
/ the node's GPUs), a job's over every node it ran on (a move: each node at its own price),
what its killed, failed and lost attempts burned, and the node's record of its attempts that
those come from. Pure functions and records: no process (tests/system/test_spend.py runs an
agent)."""

from __future__ import annotations

import pytest

from gpudeck.agents.contract.vocab import JobState
from gpudeck.agents.contract.wire import AttemptSpan, Gpu, Host, JobStatus, Snapshot
from gpudeck.agents.records import JobRecord
from gpudeck.console import cost
from gpudeck.console.state import FleetState
from gpudeck.remote.fleet import parse_fleet

NOW = 1_764_504_000.0
HOUR = 3600.0


def _span(attempt, start_h, end_h, state, gpus=2):
    return AttemptSpan(attempt=attempt, started_at=NOW - start_h * HOUR,
                       ended_at=None if end_h is None else NOW - end_h * HOUR, state=state, gpus=gpus)


def test_an_attempt_costs_its_hours_x_the_price_x_its_share_of_the_node_s_gpus():
    # 3 hours on 2 of 8 GPUs of a $40 node-hour: $30
    assert cost.attempt_dollars(_span(1, 5, 2, JobState.KILLED), 40.0, 8, NOW) == pytest.approx(30.0)
    assert cost.attempt_dollars(_span(1, 1, None, JobState.RUNNING), 40.0, 8, NOW) == pytest.approx(10.0)  # to now
    assert cost.attempt_dollars(_span(1, 1, None, JobState.LOST), 40.0, 8, NOW) is None  # its end never recorded
    assert cost.attempt_dollars(_span(1, 5, 2, JobState.EXITED, gpus=0), 40.0, 8, NOW) == 0.0  # a client, no GPU
    assert cost.attempt_dollars(_span(1, 5, 2, JobState.EXITED), None, 8, NOW) is None  # no price: unknown
    assert cost.attempt_dollars(_span(1, 5, 2, JobState.EXITED), 40.0, 0, NOW) is None  # GPUs not known


def test_a_job_s_spend_sums_its_attempts_on_both_nodes_of_a_move_each_at_its_price_and_burned_the_bad_ones():
    on_a = JobStatus("gen", "command", JobState.FENCED, attempts=[
        _span(1, 10, 8, JobState.FAILED), _span(2, 8, 6, JobState.KILLED), _span(3, 6, 5, JobState.FENCED)])
    on_b = JobStatus("gen", "command", JobState.RUNNING, attempts=[_span(1, 4, None, JobState.RUNNING, gpus=4)])
    s = cost.job_spend([("a", on_a, 40.0, 8), ("b", on_b, 10.0, 4)], NOW)
    # a: 2 h + 2 h + 1 h at $10/h (2 of 8 GPUs of $40); b: 4 h at $10/h (4 of 4 GPUs of $10)
    assert s.spent == pytest.approx(50.0 + 40.0) and s.burned == pytest.approx(40.0)  # failed + killed on a
    assert [(a.node, a.attempt, a.state, a.dollars) for a in s.attempts] == [
        ("a", 1, "failed", pytest.approx(20.0)), ("a", 2, "killed", pytest.approx(20.0)),
        ("a", 3, "fenced", pytest.approx(10.0)), ("b", 1, "running", pytest.approx(40.0))]
    doc = cost.spend_json(s)
    assert doc["spent"] == 90.0 and doc["burned"] == 40.0 and doc["attempts"][0]["node_gpus"] == 8
    assert cost.spend_json(None) == {"spent": None, "burned": None, "attempts": []}
    unpriced = cost.job_spend([("a", on_a, None, 8)], NOW)
    assert (unpriced.spent, unpriced.burned) == (None, None) and len(unpriced.attempts) == 3


def test_the_node_keeps_each_attempt_it_ran_and_reads_them_back():
    rec = JobRecord(name="gen", state=JobState.KILLED, attempt=2, started_at=NOW - 2 * HOUR, ended_at=NOW - HOUR,
                    gpus=2, past=[_span(1, 5, 3, JobState.FAILED)])
    carried = rec.carried()
    assert [s.attempt for s in carried] == [1, 2] and carried[1].state is JobState.KILLED and carried[1].gpus == 2
    back = JobRecord.from_dict(JobRecord(name="gen", attempt=3, past=carried).to_dict())
    assert back.past == carried and [s.attempt for s in back.spans()] == [1, 2, 3]
    # an attempt never settled (its agent gone with it): kept as lost, with no end, worth no dollars
    stale = JobRecord(name="gen", state=JobState.RUNNING, attempt=1, started_at=NOW - HOUR, gpus=1)
    (lost,) = stale.carried()
    assert lost.state is JobState.LOST and lost.ended_at is None
    assert JobRecord.from_dict({"name": "gen", "past": [{"attempt": "x"}, {"attempt": 4}]}).past == \
        [AttemptSpan(attempt=4)]  # a span this version cannot read is left out, never fatal


def test_status_json_and_the_header_say_the_spend_and_the_burned():
    fleet = parse_fleet('[[nodes]]\nname = "a"\nprice_per_hour = 40\n[[nodes]]\nname = "b"\nprice_per_hour = 10\n'
                        '[[jobs]]\nname = "gen"\nnode = "b"\ncommand = "true"\n', "f.toml")
    state = FleetState(fleet, clock=lambda: NOW)
    host = Host("h", 1.0, 1, 1, 2, 0.0, 0.0, 0.0)
    gpus = [Gpu(i, f"u{i}", "H200", mem_used_mib=0.0, mem_total_mib=1.0) for i in range(8)]
    state.apply(Snapshot("a", 1, NOW, host, gpus, [JobStatus("gen", "command", JobState.FENCED, attempts=[
        _span(1, 10, 8, JobState.KILLED)])]))
    state.apply(Snapshot("b", 1, NOW, host, gpus[:4], [JobStatus("gen", "command", JobState.RUNNING, attempts=[
        _span(1, 4, None, JobState.RUNNING, gpus=4)])]))
    doc = state.to_json()
    assert doc["fleet"]["burned"] == 20.0
    rows = [j for j in doc["jobs"] if j["name"] == "gen"]
    assert len(rows) == 2 and all(r["spent"] == 60.0 and r["burned"] == 20.0 for r in rows)
    assert [(a["node"], a["state"], a["dollars"]) for a in rows[0]["attempts"]] == [("a", "killed", 20.0),
                                                                                    ("b", "running", 40.0)]
    assert state.totals().burned == 20.0
    detail = state.job_detail("b/gen")
    assert detail.spend.spent == pytest.approx(60.0) and detail.spend.burned == pytest.approx(20.0)
