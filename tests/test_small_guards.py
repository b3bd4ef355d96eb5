"""Small guards an adversarial run asked for (issue 20, item 3.9): a long job name is cut in
errors, an odd deadline is said, a home others may write to is refused, watch.json is 0600
from its first byte."""

from __future__ import annotations

import json
import os

import pytest

from gpudeck.remote.fleet import FleetError, parse_fleet
from support.cli import gpudeck


def test_a_fleet_error_cuts_a_long_job_name():
    name = "x" * 300
    with pytest.raises(FleetError) as e:
        parse_fleet(f'[[jobs]]\nname = "{name}"\ncommand = "true"\nprot = 1\n', "fleet.toml")
    assert "x" * 64 not in str(e.value) and "…" in str(e.value) and len(str(e.value)) < 600, str(e.value)


@pytest.mark.system
def test_a_deadline_in_the_past_or_without_a_time_is_said_with_its_line(tmp_path, home):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{home}"\nnvml = false\n\n'
                     f'[[jobs]]\nname = "late"\ncommand = "true"\ndeadline = 2020-01-01\n')
    r = gpudeck("status", "-f", str(fleet))
    warning = next(ln for ln in r.stderr.splitlines() if "warning" in ln)
    assert "fleet.toml:8:" in warning and "'late'" in warning
    assert "a date without a time" in r.stderr and "is in the past" in r.stderr


@pytest.mark.system
def test_a_home_others_may_write_to_is_refused(tmp_path):
    home = tmp_path / "open-home"
    home.mkdir()
    home.chmod(0o777)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{home}"\nnvml = false\n')
    r = gpudeck("status", "--json", "-f", str(fleet), check=False)
    node = json.loads(r.stdout)["nodes"][0]
    assert r.returncode == 3 and not node["reachable"]
    assert "writable by group and others" in node["error"] and f"chmod 700 {home}" in node["error"], node["error"]
    assert not (home / "jobs").exists()  # refused before anything was written there


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
