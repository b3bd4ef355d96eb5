"""A closing shard is audited as it closes: its quality figures are written beside it, whole,
at every state a kill -9 can leave; and `gpudeck audit` of a generate output takes them, or
counts the shards itself with the same code."""

from __future__ import annotations

import json

from gpudeck.agents.workers.audit import audit_generate_dir, render_generate_quality
from gpudeck.agents.workers.common.doneset import DoneSet
from gpudeck.agents.workers.generate.quality import CUT, EMPTY, NO_ANSWER, REPETITION
from gpudeck.agents.workers.generate.shards import QUALITY_DIR, ShardWriter, figures_path

LOOP = "so we need to check the value again and " * 40  # a tail that repeats itself


def rec(i: int) -> dict:
    """Record i: every fifth cut (and looping), every fifth empty, every fifth reasoning with
    no answer, the rest useful."""
    kind = i % 5
    if kind == 0:
        return {"id": f"a{i}", "reasoning": LOOP, "answer": "", "finish_reason": "length"}
    if kind == 1:
        return {"id": f"a{i}", "reasoning": "", "answer": "  ", "finish_reason": "stop"}
    if kind == 2:
        return {"id": f"a{i}", "reasoning": "hmm, let me think", "answer": "", "finish_reason": "stop"}
    return {"id": f"a{i}", "reasoning": "thought", "answer": f"answer {i}", "finish_reason": "stop"}


def line(i: int) -> bytes:
    return json.dumps(rec(i)).encode()


def figures(out, shard: str) -> dict:
    return json.loads(open(figures_path(str(out), shard)).read())


def expected(ids) -> dict:
    ids = list(ids)
    kinds = [i % 5 for i in ids]
    return {"records": len(ids), "useful": sum(k >= 3 for k in kinds),
            "problems": {CUT: kinds.count(0), EMPTY: kinds.count(1), NO_ANSWER: kinds.count(2),
                         REPETITION: kinds.count(0)}}


def test_a_closing_shard_gets_its_quality_figures_beside_it(tmp_path):
    w = ShardWriter(str(tmp_path), DoneSet.open(str(tmp_path / "done.txt")), shard_size=10)
    for i in range(10):  # the generator passes the record and its problems; a line alone is parsed
        w.add(f"a{i}", line(i), record=rec(i) if i % 2 else None)
    doc = figures(tmp_path, "shard-000000.jsonl")
    assert {k: doc[k] for k in ("records", "useful", "problems")} == expected(range(10))
    assert doc["useful_pct"] == 40.0 and doc["shard"] == "shard-000000.jsonl"
    assert doc["examples"] == {CUT: "a0", EMPTY: "a1", NO_ANSWER: "a2", REPETITION: "a0"}
    assert doc["bytes"] == (tmp_path / "shard-000000.jsonl").stat().st_size
    assert w.last_figures == doc
    for i in range(10, 13):  # the last, partial shard of a finished run
        w.add(f"a{i}", line(i))
    assert not (tmp_path / QUALITY_DIR / "shard-000001.json").exists()  # open: no figures yet
    w.close(final=True)
    assert {k: figures(tmp_path, "shard-000001.jsonl")[k] for k in ("records", "useful", "problems")} == \
        expected(range(10, 13))


def test_a_kill_before_the_newest_shard_s_figures_is_repaired_at_recovery(tmp_path):
    w = ShardWriter(str(tmp_path), DoneSet.open(str(tmp_path / "done.txt")), shard_size=5)
    for i in range(15):
        w.add(f"a{i}", line(i))
    w.close(final=False)
    # a kill after shard 2's rename and before its figures; shard 0's figures lost too (an older run)
    for n in (0, 2):
        (tmp_path / QUALITY_DIR / f"shard-00000{n}.json").unlink()
    (tmp_path / QUALITY_DIR / "shard-000002.json.999.tmp").write_text('{"records": 3')  # a figures write a kill cut
    w2 = ShardWriter(str(tmp_path), DoneSet.open(str(tmp_path / "done.txt")), shard_size=5)
    r = w2.recover()
    assert r.audited == ["shard-000002.jsonl"]
    assert {k: figures(tmp_path, "shard-000002.jsonl")[k] for k in ("records", "useful", "problems")} == \
        expected(range(10, 15))
    assert sorted(p.name for p in (tmp_path / QUALITY_DIR).iterdir()) == ["shard-000001.json", "shard-000002.json"]


def test_shards_closed_or_continued_after_a_crash_count_the_records_written_before_it(tmp_path):
    (tmp_path / "shard-000000.jsonl.tmp").write_bytes(b"".join(line(i) + b"\n" for i in range(5)))  # full
    (tmp_path / "shard-000001.jsonl.tmp").write_bytes(b"".join(line(i) + b"\n" for i in range(5, 8)) + line(8)[:7])
    w = ShardWriter(str(tmp_path), DoneSet.open(str(tmp_path / "done.txt")), shard_size=5)
    r = w.recover()
    assert r.closed_now == ["shard-000000.jsonl"] and r.open_records == 3
    assert {k: figures(tmp_path, "shard-000000.jsonl")[k] for k in ("records", "useful", "problems")} == \
        expected(range(5))
    for i in range(8, 10):  # the cut record is made again; the shard closes with the records of both runs
        w.add(f"a{i}", line(i), record=rec(i))
    assert {k: figures(tmp_path, "shard-000001.jsonl")[k] for k in ("records", "useful", "problems")} == \
        expected(range(5, 10))


def test_audit_of_a_generate_directory_takes_the_figures_or_reads_the_shards(tmp_path):
    out = tmp_path / "out"
    (out / "part-0-of-2").mkdir(parents=True)
    w = ShardWriter(str(out / "part-0-of-2"), DoneSet.open(str(out / "part-0-of-2" / "done.txt")), shard_size=4)
    for i in range(10):  # two closed shards and an open one of two records
        w.add(f"a{i}", line(i))
    w.close(final=False)
    (out / "part-0-of-2" / QUALITY_DIR / "shard-000001.json").unlink()  # an older worker wrote none
    doc = audit_generate_dir(str(out), min_useful_pct=50)
    assert [(s["shard"], s["from"], s["open"], s["records"]) for s in doc["shards"]] == [
        ("part-0-of-2/shard-000000.jsonl", "figures", False, 4), ("part-0-of-2/shard-000001.jsonl", "read", False, 4),
        ("part-0-of-2/shard-000002.jsonl.tmp", "read", True, 2)]
    assert {k: doc[k] for k in ("records", "useful", "problems")} == expected(range(10))
    assert doc["useful_pct"] == 40.0 and doc["degenerate"]
    assert doc["reasons"] == ["40% of the 10 records are useful, under 50% (--min-useful-pct); the most common "
                              "problem: cut_at_max_tokens (2)."]
    text = render_generate_quality(doc)
    assert "cut at max_tokens:            2   20.0%  e.g. id a0" in text and text.endswith(doc["reasons"][0])
    # figures that no longer match their shard's size are not taken
    with open(out / "part-0-of-2" / "shard-000000.jsonl", "ab") as f:
        f.write(line(3) + b"\n")
    doc = audit_generate_dir(str(out), min_useful_pct=0)
    assert doc["shards"][0]["from"] == "read" and doc["records"] == 11 and not doc["degenerate"]
    assert audit_generate_dir(str(tmp_path / "out" / "part-0-of-2" / QUALITY_DIR)) is None
