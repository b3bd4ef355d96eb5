"""The documents one process writes and another reads (agents/contract/documents.py): one
writer, and a reader that checks each field by its type."""

from __future__ import annotations

import json

import pytest

from gpudeck.agents.contract.documents import (PlanDoc, ProgressDoc, read_document, read_plan, read_progress,
                                               write_document, write_plan)


def test_a_progress_document_and_the_worker_s_own_fields(tmp_path):
    path = tmp_path / "progress.json"
    doc = ProgressDoc(done=3, total=10, tokens=300, tokens_per_s=12.5, quality={"errors": 1})
    write_document(path, doc, {"in_flight": [{"id": "p1"}], "state": "running"})
    assert read_progress(path) == doc
    assert json.loads(path.read_text())["in_flight"] == [{"id": "p1"}]  # kept for whoever reads the file
    with pytest.raises(ValueError, match=r"extra fields \['done'\] are the document's own"):
        write_document(path, doc, {"done": 4})
    assert read_progress(path) == doc, "a refused write leaves the last one"


@pytest.mark.parametrize("text, message", [
    ('{"total": 3}', "missing field 'done'"),
    ('{"done": "many"}', "done: expected an integer, got 'many'"),
    ('{"done": -1}', "done: expected an integer >= 0"),
    ('{"done": 1, "total": 2.5}', "total: expected an integer, got 2.5"),
    ('[1, 2]', "expected a JSON object, got list"),
    ('{"done": 1', "not valid JSON"),
    ("[" * 100_000, "nested too deep|not valid JSON"),
])
def test_a_bad_progress_document_says_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "progress.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_progress(path)


def test_a_document_too_large_is_not_read_whole(tmp_path):
    path = tmp_path / "big.json"
    path.write_text('{"done": 1, "pad": "' + "x" * 2048 + '"}')
    with pytest.raises(ValueError, match="larger than"):
        read_document(ProgressDoc, path, max_bytes=1024)


def test_a_plan_keeps_what_the_agent_reads_and_the_rest(tmp_path):
    path = tmp_path / "plan.json"
    write_plan(str(path), {"projected_wall_s": 3600.0, "written_at": 1.5e9, "verdict": "go"})
    assert read_plan(str(path)) == (3600.0, 1.5e9)
    assert json.loads(path.read_text())["verdict"] == "go"
    with pytest.raises(ValueError, match="must be seconds above 0"):
        write_plan(str(path), {"projected_wall_s": 0})
    assert PlanDoc() == PlanDoc(None, None)
