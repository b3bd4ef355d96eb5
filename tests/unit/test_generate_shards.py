"""The shard writer and the done-set at the states a kill -9 can leave behind."""

from __future__ import annotations

import json

from gpudeck.agents.workers.common.doneset import DoneLog, DoneSet, read_ids
from gpudeck.agents.workers.generate.shards import ShardWriter, ids_in_jsonl


def rec(i: int) -> bytes:
    return json.dumps({"id": f"a{i}", "answer": "x" * 20}).encode()


def test_a_half_written_record_is_cut_and_ids_the_done_set_missed_are_added(tmp_path):
    (tmp_path / "done.txt").write_text("".join(f"a{i}\n" for i in range(10)))
    # 15 complete records (a kill came after their write, before 5 of their ids reached the
    # done-set) and a record cut in the middle
    (tmp_path / "shard-000000.jsonl.tmp").write_bytes(b"".join(rec(i) + b"\n" for i in range(15)) + rec(15)[:9])
    done = DoneSet.open(str(tmp_path / "done.txt"))
    w = ShardWriter(str(tmp_path), done, shard_size=20)
    r = w.recover()
    assert (r.open_records, r.ids_added, r.cut_bytes) == (15, 5, 9)
    assert read_ids(str(tmp_path / "done.txt")) == {f"a{i}" for i in range(15)}
    for i in range(15, 20):  # the cut record is generated again and goes into the same shard
        w.add(f"a{i}", rec(i))
    w.flush()
    assert (tmp_path / "shard-000000.jsonl").exists() and not (tmp_path / "shard-000000.jsonl.tmp").exists()
    assert ids_in_jsonl(str(tmp_path / "shard-000000.jsonl")) == [f"a{i}" for i in range(20)]
    assert w.next_number == 1


def test_a_full_open_shard_is_closed_at_recovery(tmp_path):
    (tmp_path / "done.txt").write_text("".join(f"a{i}\n" for i in range(1000)))
    (tmp_path / "shard-000007.jsonl.tmp").write_bytes(b"".join(rec(i) + b"\n" for i in range(1000)))
    w = ShardWriter(str(tmp_path), DoneSet.open(str(tmp_path / "done.txt")))
    r = w.recover()
    assert r.closed_now == ["shard-000007.jsonl"] and r.closed == ["shard-000007.jsonl"]
    assert w.next_number == 8


def test_shard_numbers_already_in_s3_are_never_reused(tmp_path):
    (tmp_path / "shard-000003.jsonl.tmp").write_bytes(rec(1) + b"\n")
    w = ShardWriter(str(tmp_path), DoneSet.open(str(tmp_path / "done.txt")))
    r = w.recover(reserved_numbers={0, 1, 2, 3, 4})  # another node uploaded 0..4
    assert r.closed_now == ["shard-000005.jsonl"]  # the local open shard moves out of the way
    assert w.next_number == 6


def test_ids_reach_the_done_set_only_after_their_record(tmp_path):
    done = DoneSet.open(str(tmp_path / "done.txt"))
    w = ShardWriter(str(tmp_path), done, shard_size=3)
    w.add("a0", rec(0))
    assert ids_in_jsonl(str(tmp_path / "shard-000000.jsonl.tmp")) == ["a0"]  # written at once
    assert read_ids(str(tmp_path / "done.txt")) == set()  # the id waits for the next flush
    w.flush()
    assert read_ids(str(tmp_path / "done.txt")) == {"a0"}
    w.add("a1", rec(1))
    w.add("a2", rec(2))  # full: flushed and closed before the rename
    assert read_ids(str(tmp_path / "done.txt")) == {"a0", "a1", "a2"}
    assert (tmp_path / "shard-000000.jsonl").exists()
    w.close(final=True)


def test_done_set_repairs_a_half_line_and_round_trips_awkward_ids(tmp_path):
    path = tmp_path / "done.txt"
    path.write_bytes(b"x1\nx2\nx3-half")
    assert read_ids(str(path)) == {"x1", "x2"}
    assert path.read_bytes() == b"x1\nx2\n"
    done = DoneSet.open(str(path))
    awkward = ["with\nnewline", '"quoted', " padded ", "", "ünïcode", "42"]
    assert done.add(awkward + ["x1"], sync=True) == len(awkward)
    done.close()
    assert read_ids(str(path)) == {"x1", "x2", *awkward}
    assert path.read_text().count("\n") == 2 + len(awkward)  # one line each, none split


def test_done_log_appends_without_holding_ids(tmp_path):
    path = tmp_path / "log.txt"
    path.write_bytes(b"a\nb")
    log = DoneLog(str(path))
    assert log.size == 2 and path.read_bytes() == b"a\n"
    log.append(["c", "d"], sync=True)
    log.close()
    assert read_ids(str(path)) == {"a", "c", "d"}
