"""gpudeck audit on good and on degenerate data, through the command line and the API.

The unit tier's tests of this file (starts nothing); the others are in tests/system/test_audit.py."""

from __future__ import annotations

import json

from gpudeck.agents.workers.audit import audit_file, audit_records


def test_generated_records_roles_turns_and_duplicates(tmp_path):
    recs = []
    for i in range(300):
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Question {i % 200}"}]
        recs.append({"id": str(i), "messages": msgs, "reasoning": "Let me think about it. " * 20,
                     "answer": "Here is a full answer with real content. " * 10})
    report = audit_records(recs)
    assert not report.degenerate, report.reasons
    assert report.duplicates == 100
    assert report.roles == {"system": 300, "user": 300, "assistant": 300}
    assert report.kinds == {"generated": 300}
    text = report.render()
    assert "duplicates: 100 samples repeat an earlier prompt (33.3%)" in text


def test_duplicate_ids_are_counted_with_the_first_repeat(tmp_path):
    path = tmp_path / "prompts.jsonl"
    lines = [{"id": "p0", "messages": [{"role": "user", "content": "first text"}]},
             {"id": "p0", "messages": [{"role": "user", "content": "a different text"}]},
             {"id": "p1", "messages": [{"role": "user", "content": "third"}]},
             {"id": 7, "prompt": "x"}, {"id": 7, "prompt": "y"}, {"prompt": "no id: known by its line"}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = audit_file(str(path), mode="prompts")
    assert r.duplicates == 0, "no prompt repeats"
    assert r.duplicate_ids == 2 and r.first_duplicate_id == f"{path}:2: id 'p0'"
    assert f"duplicate ids: 2 lines repeat an earlier line's id (first: {path}:2: id 'p0')" in r.render()
    assert r.to_json()["duplicate_ids"] == 2
