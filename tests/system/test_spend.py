"""Spend where it goes, on a real node: a job launched, killed and launched again on stand-in
GPUs of a priced node; `status --json` has each attempt with its dollars, and the killed one
is burned. Real CLI, real agent, real processes."""

from __future__ import annotations

import json

import pytest

from support.watch import gpudeck_watch, stop_watch, wait_state

pytestmark = pytest.mark.system  # an agent and its jobs


@pytest.mark.timeout(180)
def test_status_json_has_the_spend_of_each_attempt_and_what_the_killed_one_burned(tmp_path, home):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'''
[[nodes]]
name = "gpu1"
local = true
home = "{home}"
nvml = false
interval = 0.2
simulate_gpus = "4xH200:141"
price_per_hour = 36000

[[jobs]]
name = "train"
node = "gpu1"
command = ["sleep", "600"]
gpus = [0, 1]
''')
    f = ("-f", str(fleet))
    try:
        for args in (("watch", "start", "--supervise", "none"), ("launch", "train")):
            r = gpudeck_watch(*args, *f)
            assert r.returncode == 0, r.stdout + r.stderr
        wait_state(home, "train", lambda s: s.get("state") == "running", 30, what="attempt 1 running")
        r = gpudeck_watch("kill", "train", "--grace", "1", *f)
        assert r.returncode == 0, r.stdout + r.stderr
        r = gpudeck_watch("launch", "train", *f)
        assert r.returncode == 0, r.stdout + r.stderr
        wait_state(home, "train", lambda s: s.get("attempt") == 2 and s.get("state") == "running", 30,
                   what="attempt 2 running")
        r = gpudeck_watch("status", "--json", *f)
        assert r.returncode == 0, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        (job,) = [j for j in doc["jobs"] if j["name"] == "train"]
        first, second = job["attempts"]
        assert (first["attempt"], first["state"], second["attempt"], second["state"]) == (1, "killed", 2, "running")
        assert first["gpus"] == 2 and first["node_gpus"] == 4 and first["node"] == "gpu1"
        # $36,000 a node-hour, half the node's GPUs: $5 a second
        held = first["ended_at"] - first["started_at"]
        assert first["dollars"] == pytest.approx(held * 5, rel=1e-3)
        assert job["burned"] == pytest.approx(first["dollars"], rel=1e-3) and doc["fleet"]["burned"] == job["burned"]
        assert job["spent"] == pytest.approx(first["dollars"] + second["dollars"], rel=1e-3)
        assert second["ended_at"] is None and second["dollars"] > 0
    finally:
        stop_watch(home)
