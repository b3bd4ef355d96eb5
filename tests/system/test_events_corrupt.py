"""A corrupt timeline (``<home>/events.jsonl``) never blocks the agent or `gpudeck events`:
a bad line is skipped with a warning that names the file and the line."""

from __future__ import annotations

import json

import pytest

from support.cli import gpudeck
from support.wait import wait_for

pytestmark = pytest.mark.system  # a real agent and the gpudeck CLI

GOOD = {"t": 1_700_000_000.0, "seq": 1, "node": "testnode", "kind": "watch", "message": "watch started"}


def _corrupt(home):
    lines = [json.dumps(GOOD), '{"t": "abc", "seq": 2, "kind": "died", "message": "x"}',
             json.dumps({**GOOD, "seq": 3, "message": "a later good one"}), '{"t": 1.0, "seq": 1e999}']
    (home / "events.jsonl").write_text("\n".join(lines) + "\n")


def test_an_agent_starts_on_a_corrupt_timeline_and_skips_the_bad_lines(start_agent, home):
    _corrupt(home)
    a = start_agent()  # a last line with "seq": 1e999 stopped every agent from starting
    page = a.ok("events", since=0)
    assert [e["message"] for e in page["events"]] == ["watch started", "a later good one"]
    assert page["seq"] == 3
    wait_for(lambda: any(f"{home / 'events.jsonl'} line 2 skipped" in ln for ln in a.stderr), 10,
             what="the warning naming the file and line")
    assert any("line 4 skipped" in ln for ln in a.stderr)


def test_gpudeck_events_prints_the_good_lines_of_a_corrupt_timeline(tmp_path, home):
    _corrupt(home)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{home}"\nnvml = false\n')
    r = gpudeck("events", "--since", "100000d", "-f", str(fleet), check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "watch started" in r.stdout and "a later good one" in r.stdout
