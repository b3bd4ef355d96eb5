"""The wrapper's attempts file read back (agents/cluster/runs.py read_attempts): what a task's
row says after each way an attempt can end, including the records a signal leaves half-done."""

from __future__ import annotations

import json

from gpudeck.agents.cluster.runs import read_attempts


def write(path, *events: dict) -> None:
    base = {"job_id": "4", "array_id": "4", "task": 2, "host": "n1"}
    path.write_text("".join(json.dumps({**base, **e}) + "\n" for e in events))


def test_an_attempt_that_ends_by_itself(tmp_path):
    f = tmp_path / "2.jsonl"
    write(f, {"t": 10.0, "event": "start", "restart": 0, "gpus": "2"}, {"t": 20.0, "event": "end", "rc": 0, "restart": 0})
    a = read_attempts(f)
    assert (a.starts, a.started_at, a.ended_at, a.exit_code, a.why, a.gpus, a.running) == (1, 10.0, 20.0, 0, None, "2",
                                                                                          False)
    assert a.requeued_at is None


def test_a_usr1_requeue_recorded_whole_is_kept_across_the_next_start(tmp_path):
    f = tmp_path / "2.jsonl"
    write(f, {"t": 10.0, "event": "start", "restart": 0}, {"t": 11.0, "event": "signal", "signal": "USR1", "restart": 0},
          {"t": 11.1, "event": "end", "rc": 143, "why": "usr1", "restart": 0},
          {"t": 11.3, "event": "requeue", "rc": 0, "restart": 0}, {"t": 40.0, "event": "start", "restart": 1})
    a = read_attempts(f)
    assert (a.starts, a.running, a.restart, a.requeued_at, a.requeue_rc) == (2, True, 1, 11.3, 0)


def test_a_requeue_whose_record_never_came_is_proven_by_the_next_start(tmp_path):
    # Slurm's requeue can stop the wrapper before it writes the requeue's result, and a plain
    # end of the same attempt can follow the signal's: the signal's end counts
    f = tmp_path / "2.jsonl"
    write(f, {"t": 10.0, "event": "start", "restart": 0}, {"t": 11.0, "event": "signal", "signal": "USR1", "restart": 0},
          {"t": 11.1, "event": "end", "rc": 143, "why": "usr1", "restart": 0},
          {"t": 11.2, "event": "end", "rc": 143, "restart": 0})
    a = read_attempts(f)
    assert (a.why, a.ended_at, a.requeued_at, a.requeue_rc) == ("usr1", 11.1, 11.1, None)  # asked; not yet proven
    with f.open("a") as out:
        out.write('{"t": 40.0, "event": "sta')  # a line cut by a kill -9: skipped
        out.write("\n" + json.dumps({"t": 41.0, "event": "start", "job_id": "4", "task": 2, "restart": 1}) + "\n")
    a = read_attempts(f)
    assert (a.starts, a.running, a.requeued_at, a.requeue_rc) == (2, True, 11.1, 0)


def test_a_requeue_that_failed_says_its_exit_code(tmp_path):
    f = tmp_path / "2.jsonl"
    write(f, {"t": 10.0, "event": "start", "restart": 0}, {"t": 11.1, "event": "end", "rc": 143, "why": "usr1"},
          {"t": 11.3, "event": "requeue", "rc": 1})
    a = read_attempts(f)
    assert (a.requeued_at, a.requeue_rc) == (11.3, 1)


def test_no_file_is_no_attempt(tmp_path):
    assert read_attempts(tmp_path / "missing.jsonl").starts == 0
