"""Small guards an adversarial run asked for (issue 20, item 3.9): a long job name is cut in
errors, an odd deadline is said, a home others may write to is refused, watch.json is 0600
from its first byte.

The unit tier's tests of this file (starts nothing); the others are in
tests/system/test_small_guards.py."""

from __future__ import annotations

import os

import pytest

from gpudeck.remote.fleet import FleetError, parse_fleet


def test_a_fleet_error_cuts_a_long_job_name():
    name = "x" * 300
    with pytest.raises(FleetError) as e:
        parse_fleet(f'[[jobs]]\nname = "{name}"\ncommand = "true"\nprot = 1\n', "fleet.toml")
    assert "x" * 64 not in str(e.value) and "…" in str(e.value) and len(str(e.value)) < 600, str(e.value)


def test_watch_json_is_0600_from_its_first_byte(tmp_path, monkeypatch):
    from gpudeck.agents.watch.config import WatchConfig

    monkeypatch.setattr(os, "chmod", lambda *a, **k: None)  # no chmod after the fact to lean on
    monkeypatch.setattr(os, "umask", os.umask)
    old = os.umask(0)
    try:
        WatchConfig(watching=True).save(tmp_path)
    finally:
        os.umask(old)
    assert (tmp_path / "watch.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("table, where", [
    ('[[clusters]]\nname = "c\\tx"\nlogin = "h"\nshared_dir = "/s"\n', "fleet.toml:2: [[clusters]]"),
    ('[[plans]]\nname = "fast\\u202e"\npath = "p"\n', "fleet.toml:2: [[plans]] #1 'name'"),
    ('[[jobs]]\nname = "j\\nx"\ncommand = "true"\n', "fleet.toml:1: [[jobs]] #1"),  # its table's line
])
def test_every_name_of_the_fleet_file_refuses_control_characters(table, where):
    with pytest.raises(FleetError) as e:
        parse_fleet(table, "fleet.toml")
    assert str(e.value).startswith(where), str(e.value)


@pytest.mark.parametrize("text", ["[]", '"watching"', '{"watching": true, "jobs": 5, "notify": 7}', "{"])
def test_a_watch_json_of_another_shape_is_no_settings_not_a_crash(tmp_path, text):
    """watch.json's one reader (agents/contract/watchfile.py): a file that is no object, or holds
    the wrong types, gives the defaults (or the flag alone), never an exception in the watcher."""
    from gpudeck.agents.watch.config import WatchConfig

    (tmp_path / "watch.json").write_text(text)
    config = WatchConfig.load(tmp_path)
    assert config.jobs == [] and config.notify == [] and config.watching is (text.startswith('{"watching"'))


@pytest.mark.parametrize("text, said", [("[]", "expected a JSON object, got list"), ("{", "not valid JSON"),
                                        ('{"name": "j", "state": "sleepy"}', "'sleepy' is not a valid JobState")])
def test_a_state_json_of_another_shape_is_refused_by_its_one_reader(tmp_path, text, said):
    import json

    from gpudeck.agents.contract.jobstate import JobRecord, read_state

    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        read_state(path)
    assert str(err.value).startswith(f"{path}: ") and said in str(err.value)
    path.write_text(json.dumps(JobRecord(name="j", attempt=2).to_dict()))
    assert read_state(path) == JobRecord(name="j", attempt=2)
