"""Bad numbers are refused with the key and line, or the flag, naming what is allowed; never
accepted and never written as NaN (issue 20, item 3.7)."""

from __future__ import annotations

import json

import pytest

from support.cli import gpudeck

pytestmark = pytest.mark.system  # runs the gpudeck CLI as a process


def test_an_infinite_alert_threshold_is_a_fleet_error_with_its_line(tmp_path):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[alerts]\nrepeat_s = inf\n')
    r = gpudeck("status", "-f", str(fleet), check=False)
    assert r.returncode == 2 and "fleet.toml:2:" in r.stderr and "'repeat_s'" in r.stderr and "finite" in r.stderr


@pytest.mark.parametrize("argv, flag", [
    (["plan", "generate", "--prompts", "p.jsonl", "--out", "o", "--server", "http://127.0.0.1:9",
      "--price-per-hour", "nan"], "--price-per-hour"),
    (["plan", "extract", "--model", "m", "--data", "d", "--out", "o", "--tokens", "1000", "--samples", "10",
      "--tokens-per-s", "-5"], "--tokens-per-s"),
    (["plan", "extract", "--model", "m", "--data", "d", "--out", "o", "--tokens", "1000", "--samples", "10",
      "--tokens-per-s", "100", "--s3-price-per-gb-month", "-1"], "--s3-price-per-gb-month"),
])
def test_a_bad_number_on_a_plan_command_is_a_usage_error_naming_the_flag(argv, flag, tmp_path):
    r = gpudeck(*argv, check=False)
    assert r.returncode == 2 and flag in r.stderr and "finite number" in r.stderr, r.stderr
    assert not (tmp_path / "o" / "plan.json").exists()


def test_a_gpu_the_node_does_not_have_is_an_alert_at_status(tmp_path, home):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[[nodes]]\nname = "local"\nhome = "{home}"\nsimulate_gpus = "8xH100:80"\n\n'
                     f'[[jobs]]\nname = "far"\ncommand = "exec sleep 60"\ngpus = [99]\n')
    doc = json.loads(gpudeck("status", "--json", "-f", str(fleet)).stdout)
    alert = next(a for a in doc["alerts"] if a["kind"] == "no_such_gpu")
    assert "GPU 99" in alert["message"] and "8 (0-7)" in alert["message"]
    text = gpudeck("status", "-f", str(fleet)).stdout
    assert "GPU 99" in text
