"""The node's Prometheus textfile (agents/node/promfile.py): the fleet key that turns it on, a real
agent writing ``gpudeck.prom`` whose every series agrees with the snapshot it was written from,
and a directory that cannot be written: one alert, the agent ticks on, a retry at most every
RETRY_S seconds.

The unit tier's tests of this file (starts nothing); the others are in
tests/system/test_promfile.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from gpudeck.agents.node import promfile
from gpudeck.agents.sense import writes
from gpudeck.agents.contract.wire import Alert, Gpu, GpuProcess, Host, JobStatus, Progress, Snapshot
from gpudeck.agents.contract.vocab import AlertKind, JobState
from gpudeck.agents.contract.jobs import JobKind
from gpudeck.remote.fleet import LOCAL, FleetError, parse_fleet
from gpudeck.remote.link import agent_argv
from support.promfile import MIB, parse


# ---------------------------------------------------------------- the fleet key


def test_textfile_dir_is_a_node_key_with_a_default_and_reaches_the_agent_argv():
    f = parse_fleet('[defaults]\ntextfile_dir = "/var/lib/node_exporter/textfile"\n\n'
                    '[[nodes]]\nname = "a"\n\n[[nodes]]\nname = "b"\ntextfile_dir = "~/prom"\n', "f.toml")
    assert f.node("a").textfile_dir == "/var/lib/node_exporter/textfile"
    assert f.node("b").textfile_dir == "~/prom"
    # the implicit local node is the console's machine: a [defaults] path meant for the GPU nodes is not its
    assert f.node(LOCAL).textfile_dir is None
    argv = agent_argv(f.node("b"), "python3")
    assert argv[argv.index("--textfile-dir") + 1] == "~/prom"
    assert "--textfile-dir" not in agent_argv(f.node(LOCAL), "python3")


def test_textfile_dir_must_be_a_string():
    with pytest.raises(FleetError, match=r"f.toml:3: \[\[nodes\]\] #1 'textfile_dir': expected a string"):
        parse_fleet('[[nodes]]\nname = "a"\ntextfile_dir = 3\n', "f.toml")
    with pytest.raises(FleetError, match=r"f.toml:2: \[defaults\] 'textfile_dir': expected a string"):
        parse_fleet('[defaults]\ntextfile_dir = true\n', "f.toml")


def test_families_omit_what_is_not_known_and_split_gpu_memory_by_job():
    snap = Snapshot(node="n", seq=1, t=1.5, host=Host("h", 0, 1, 0, 1, 0, 0, 0), gpus=[
        Gpu(0, "u0", "H200", mem_used_mib=5000, mem_total_mib=141000, processes=[
            GpuProcess(10, 3000, "gen"), GpuProcess(11, 1000, "gen"), GpuProcess(12, 500, None)])],
        jobs=[JobStatus("gen", JobKind.COMMAND, JobState.RUNNING, progress=Progress(done=5)),
              JobStatus("idle", JobKind.COMMAND, JobState.PENDING)],
        alerts=[Alert(AlertKind.UNOWNED_GPU_PROCESS, "pid 12")])
    got = parse(promfile.generate_text(snap))
    assert got["gpudeck_job_done"] == [({"node": "n", "job": "gen"}, 5.0)]
    for name in ("gpudeck_job_total", "gpudeck_job_eta_seconds", "gpudeck_job_tokens_per_second",
                 "gpudeck_job_restarts_total", "gpudeck_s3_pending_uploads"):
        assert got[name] == [], name  # not known: no sample, never a 0
    mem = {s[0]["job"]: s[1] for s in got["gpudeck_gpu_memory_used_bytes"]}
    assert mem == {"gen": 4000 * MIB, "": 1000 * MIB}
    assert ({"node": "n", "kind": "unowned_gpu_process"}, 1.0) in got["gpudeck_alerts_active"]


# ---------------------------------------------------------------- the retry, in-process


def test_a_failing_dir_is_tried_again_after_retry_s_and_clears_its_alert(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(promfile.time, "monotonic", lambda: clock[0])
    calls = []
    real = promfile.write_to_textfile
    monkeypatch.setattr(promfile, "write_to_textfile", lambda p, r, **kw: (calls.append(p), real(p, r, **kw)))
    blocker = tmp_path / "a-file"  # a path under a file: not writable, even for root
    blocker.write_text("")
    w = promfile.TextfileWriter(str(blocker / "prom"))
    path = str(blocker / "prom" / "gpudeck.prom")
    snap = Snapshot(node="n", seq=1, t=1.0, host=Host("h", 0, 1, 0, 1, 0, 0, 0), gpus=[], jobs=[])
    try:
        w.write(snap)
        assert [a.message for a in writes.alerts() if path in a.message]
        for seq in range(2, 10):  # every tick within RETRY_S: no second attempt
            clock[0] += 1.0
            w.write(dataclasses.replace(snap, seq=seq))
        assert len(calls) == 1
        blocker.unlink()
        (blocker / "prom").mkdir(parents=True)
        clock[0] += promfile.RETRY_S
        w.write(dataclasses.replace(snap, seq=20))
        assert len(calls) == 2
        assert not [a for a in writes.alerts() if path in a.message]
        assert "gpudeck_snapshot_timestamp_seconds" in (blocker / "prom" / "gpudeck.prom").read_text()
        w.write(dataclasses.replace(snap, seq=21))  # written: the next tick writes again
        assert len(calls) == 3
    finally:
        writes.ok(path)


# ---------------------------------------------------------------- the dashboard


def test_the_grafana_dashboard_reads_only_series_the_agent_writes():
    import json
    import re

    doc = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-gpudeck.json").read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    snap = Snapshot(node="n", seq=1, t=1.0, host=Host("h", 0, 1, 0, 1, 0, 0, 0), gpus=[], jobs=[])
    written = set(parse(promfile.generate_text(snap)))
    used = {name for e in exprs for name in re.findall(r"\bgpudeck_[a-z0-9_]+\b", e)} - {"gpudeck_job"}
    assert used and used <= written, used - written
    for series in ("gpudeck_job_tokens_per_second", "gpudeck_job_done", "gpudeck_job_total", "gpudeck_job_eta_seconds",
                   "gpudeck_gpu_memory_used_bytes", "gpudeck_s3_pending_uploads", "gpudeck_alerts_active"):
        assert series in used, f"no panel reads {series}"
