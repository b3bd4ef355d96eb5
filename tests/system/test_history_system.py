"""The node's history with real agents: a `kill -9` at random moments never corrupts it nor
loses a snapshot that left the agent; a job's history goes on across agents (stand-in GPUs,
a sim-engine job); `gpudeck history` prints it as a table, JSON and CSV."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from support.cli import gpudeck
from support.core import PY, ROOT, AgentProc, env_with_repo
from support.generate import free_port
from support.wait import wait_for

pytestmark = pytest.mark.system


def newest_row(home) -> float:
    c = sqlite3.connect(f"file:{home / 'history.db'}?mode=ro", uri=True)
    try:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return c.execute("SELECT max(t) FROM s1").fetchone()[0] or 0.0
    finally:
        c.close()


def test_kill_9_at_random_moments_never_corrupts_the_history_nor_loses_a_sent_snapshot(home):
    rng = random.Random(int(time.time()))
    seen = 0.0
    for i in range(16):
        if i % 4 == 3:  # killed while it starts: opening, checking, creating the database
            p = subprocess.Popen([PY, "-m", "gpudeck.agents", "--home", str(home), "--node", "testnode",
                                  "--interval", "0.05", "--no-nvml", "--simulate-gpus", "4xH200:141"],
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env=env_with_repo(), cwd=ROOT)
            time.sleep(rng.uniform(0.05, 0.8))
            p.send_signal(signal.SIGKILL)
            p.wait()
        else:
            a = AgentProc(home, interval=0.05, extra_args=("--simulate-gpus", "4xH200:141"))
            a.wait_snapshot(lambda s: True, what="a first snapshot")
            time.sleep(rng.uniform(0.0, 0.7))
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait()
            last = a.latest()
            assert last is not None
            # every snapshot that left the agent was committed before it left
            assert newest_row(home) >= round(last["t"], 3) - 1e-6, (i, last["t"])
            seen = max(seen, round(last["t"], 3))
        assert newest_row(home) >= seen - 1e-6
        assert not list(home.glob("history.db.bad-*")), f"kill {i} left a database that had to be moved aside"
    a = AgentProc(home, interval=0.05, extra_args=("--simulate-gpus", "4xH200:141"))
    try:
        page = a.ok("history", since=0.0, resolution="1s", gpu=2)
        ts = [p["t"] for p in page["points"]]
        assert ts == sorted(ts) and len(ts) == len(set(ts)) and len(ts) > 16
        hist = a.wait_message(lambda m: m["type"] == "history", what="the greeting's history")
        assert hist["samples"][0]["t"] <= ts[0] + 1e-6 and len(hist["samples"][0]["gpu_mem_mib"]) == 4
    finally:
        a.close()


@pytest.fixture
def engine_fleet(tmp_path, home):
    port = free_port()
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(textwrap.dedent(f'''
        [defaults]
        home = "{home}"
        interval = 0.2

        [[nodes]]
        name = "local"
        simulate_gpus = "2xH200:141"

        [[jobs]]
        name = "engine"
        kind = "sglang-server"
        port = {port}
        gpus = [1]
        command = ["{sys.executable}", "-m", "gpudeck.console", "sim-engine", "--port", "{port}"]
    '''))
    yield fleet
    gpudeck("kill", "engine", "-f", str(fleet), "--grace", "2", check=False)


def test_a_jobs_history_goes_on_across_agents_and_gpudeck_history_prints_it(engine_fleet, home):
    f = ["-f", str(engine_fleet)]
    began = time.time()
    gpudeck("launch", "engine", *f)  # an agent starts, launches, and leaves with its console
    wait_for(lambda: next(j for j in json.loads(gpudeck("status", "--json", *f).stdout)["jobs"]
                          if j["name"] == "engine").get("engine", {}) or {}, 90, what="the engine scraped")
    between = time.time()  # the agents so far have left; the next ones read what they kept
    wait_for(lambda: json.loads(gpudeck("status", "--json", *f).stdout)["jobs"][0]["state"] == "running", 30,
             what="a later agent's look")

    r = gpudeck("history", "--job", "engine", "--since", "10m", "--resolution", "1s", "--json", *f)
    points = [json.loads(line) for line in r.stdout.splitlines()]
    assert points and {p["job"] for p in points} == {"engine"} and {p["node"] for p in points} == {"local"}
    ts = [p["t"] for p in points]
    assert ts == sorted(ts) and len(ts) == len(set(ts))
    assert min(ts) < between < max(ts), (began, between, ts[:3], ts[-3:])  # from more than one agent
    assert any("running" in p["mean"] and "kv_usage" in p["mean"] for p in points), points[-1]
    assert any(p["state"] == "running" for p in points)

    r = gpudeck("history", "--gpu", "1", "--since", "10m", "--csv", *f)
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert rows and {row["gpu"] for row in rows} == {"1"} and all(row["job"] == "" for row in rows)
    assert all(float(row["mem_mib_mean"]) >= 0 for row in rows)

    r = gpudeck("history", "--since", "10m", "--resolution", "1m", *f)
    assert "job engine" in r.stdout and "gpu 0" in r.stdout and "gpu 1" in r.stdout, r.stdout[:2000]

    r = gpudeck("history", "--since", "yesterday", *f, check=False)
    assert r.returncode == 2 and "--since" in r.stderr and "Traceback" not in r.stderr
    r = gpudeck("history", "--job", "nosuch", *f, check=False)
    assert r.returncode == 2 and "nosuch" in r.stderr and "engine" in r.stderr, r.stderr


def test_an_agent_with_no_history_keeps_no_database_and_refuses_a_history_read(start_agent, home):
    a = start_agent(extra_args=("--no-history", "--simulate-gpus", "1xH200:141"))
    a.wait_snapshot(lambda s: s["seq"] >= 3, what="three ticks")
    r = a.request("history", since=0.0, resolution="auto")
    assert not r["ok"] and "history is off" in r["error"]
    assert a.ok("history", since=0.0)["samples"]  # the sparklines' hour, in memory
    assert not (home / "history.db").exists()
    assert os.path.exists(home)


@pytest.mark.system
def test_history_since_further_back_than_kept_reads_the_90_days(tmp_path, home):
    """`--since 9999999999999999999999w` is past SQLite's integers: it reads what is kept (90
    days) and says so, never an OverflowError."""
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{home}"\nnvml = false\ninterval = 0.2\n')
    r = gpudeck("history", "--since", "9999999999999999999999w", "--json", "-f", str(fleet), check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "Error" not in r.stderr, r.stderr
    assert "--since 9999999999999999999999w: the nodes keep 90 days of history" in r.stderr, r.stderr
