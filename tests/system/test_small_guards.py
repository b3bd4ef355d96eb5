"""Small guards an adversarial run asked for (issue 20, item 3.9): a long job name is cut in
errors, an odd deadline is said, a home others may write to is refused, watch.json is 0600
from its first byte.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_small_guards.py."""

from __future__ import annotations

import json
import os

import pytest
from support.cli import gpudeck


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


@pytest.mark.system
def test_a_group_writable_home_is_said_first_not_after_a_guess(tmp_path):
    home = tmp_path / "team-home"
    home.mkdir()
    home.chmod(0o770)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{home}"\nnvml = false\n')
    r = gpudeck("status", "--json", "-f", str(fleet), check=False)
    error = json.loads(r.stdout)["nodes"][0]["error"]
    assert error.startswith(f"node local: the state directory {home} is writable by its group (mode 0770): "), error
    assert error.endswith("the agent exited with code 3 before saying hello"), error
    assert "is gpudeck installed" not in error and error.count("is writable by") == 1, error


@pytest.mark.system
def test_a_name_with_a_control_character_is_refused_where_it_is_given(tmp_path, home):
    # a node name with a newline would print as two lines, the second one looking like a node
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{home}"\nnvml = false\n\n[[nodes]]\nname = "gpu1\\nfake  up"\nlocal = true\n')
    r = gpudeck("status", "-f", str(fleet), check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    assert (f"{fleet}:6: [[nodes]] #1 'name': a node name may not hold a control character; 'gpu1\\nfake  up' "
            "holds '\\n' (U+000A) at position 5") in r.stderr, r.stderr
    # adopt's name: refused on the command line, before any node is asked
    r = gpudeck("adopt", "--pid", str(os.getpid()), "--as", "a\x1b[31mred", check=False)
    assert r.returncode == 2 and "a job name holds only letters" in r.stderr and "\x1b" not in r.stderr, r.stderr
    assert not (home / "jobs").exists()
