"""The agent process: hello, snapshots, bad input, history, exit on stdin close, --once."""

from __future__ import annotations

import json
import subprocess

from agents import __version__, protocol
from conftest import PY, ROOT, command_job, env_with_repo, wait_for


def test_hello_then_snapshots_at_the_configured_interval(start_agent, home):
    a = start_agent(interval=0.1)
    assert a.hello["version"] == __version__ and a.hello["protocol"] == protocol.PROTOCOL
    assert a.hello["node"] == "testnode" and a.hello["home"] == str(home)
    wait_for(lambda: len(a.snapshots) >= 5, what="five snapshots")
    seqs = [s["seq"] for s in a.snapshots[:5]]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    snap = protocol.decode(json.dumps(a.snapshots[-1]))
    assert snap.host.cpu_count >= 1 and snap.host.mem_total_bytes > 0
    assert any(d.path == str(home) and d.free_bytes > 0 for d in snap.host.disks)


def test_no_nvml_reports_no_gpus_with_the_reason(start_agent):
    a = start_agent()
    snap = a.wait_snapshot(lambda s: True)
    assert snap["gpus"] == [] and "NVML" in snap["gpu_error"]
    assert a.hello["gpu_error"] == snap["gpu_error"]


def test_malformed_requests_get_an_error_and_the_agent_keeps_running(start_agent):
    a = start_agent()
    def bad_line(data: bytes, rid: int = -1) -> dict:
        a.replies.pop(rid, None)
        a.send_raw(data)
        reply = wait_for(lambda: a.replies.get(rid), what=f"reply to {data!r}")
        assert not reply["ok"]
        return reply

    assert "malformed request: not JSON" in bad_line(b"this is not json\n")["error"]
    assert "expected a request, got a snapshot" in bad_line(
        json.dumps(json.loads(protocol.encode(a_snapshot(a)))).encode() + b"\n")["error"]
    assert "Snapshot: missing field 'node'" in bad_line(b'{"type": "snapshot"}\n')["error"]
    assert "Request.op: expected str" in bad_line(b'{"type": "request", "id": 5, "op": 12}\n', 5)["error"]
    a.send_raw(b"\n")  # blank lines are ignored
    r = a.request("frobnicate")
    assert not r["ok"] and "unknown op 'frobnicate'" in r["error"]
    r = a.request("launch", job="nope")
    assert not r["ok"] and "unknown job 'nope'" in r["error"]
    r = a.request("configure", jobs=[{"name": "x", "kind": "command"}])
    assert not r["ok"] and "needs a 'command'" in r["error"]
    r = a.request("configure", jobs=[{"name": "x", "command": ["true"], "colour": "red"}])
    assert not r["ok"] and "unknown field(s) colour" in r["error"]
    assert a.proc.poll() is None
    assert a.ok("status")["node"] == "testnode"
    assert any("bad request line" in line for line in a.stderr)


def a_snapshot(a):
    return protocol.decode(json.dumps(a.wait_snapshot(lambda s: True)))


def test_agent_exits_when_stdin_closes_and_jobs_keep_running(start_agent):
    a = start_agent()
    a.ok("configure", jobs=[command_job("stay", "exec sleep 120")])
    pid = a.ok("launch", job="stay")["pid"]
    assert a.close() == 0
    from conftest import pid_alive
    assert pid_alive(pid)


def test_history_survives_a_new_agent(start_agent, home):
    a = start_agent(interval=0.05)
    a.ok("configure", jobs=[command_job("hist", 'echo \'{"done": 7}\' > "$GPUDECK_PROGRESS_FILE"; exec sleep 60')])
    a.ok("launch", job="hist")
    a.wait_snapshot(lambda s: (a.job(s, "hist").get("progress") or {}).get("done") == 7, what="progress")
    wait_for(lambda: len(a.ok("history")["samples"]) >= 5, what="history samples")
    a.close()
    b = start_agent()
    hist = b.wait_message(lambda m: m["type"] == "history", what="history message")
    assert len(hist["samples"]) >= 5
    assert hist["samples"][-1]["job_done"] == {"hist": 7}
    ts = [s["t"] for s in hist["samples"]]
    assert ts == sorted(ts)


def test_once_prints_one_snapshot(home):
    out = subprocess.run([PY, "-m", "agents", "--once", "--no-nvml", "--home", str(home)], capture_output=True,
                         env=env_with_repo(), cwd=ROOT, timeout=60, check=True)
    lines = out.stdout.decode().splitlines()
    assert len(lines) == 1
    snap = protocol.decode(lines[0])
    assert isinstance(snap, protocol.Snapshot) and snap.seq == 1 and snap.gpus == []


def test_a_new_agent_shows_rates_at_once_from_the_last_agents_history(start_agent, home, reap_jobs):
    script = ('i=0; while true; do i=$((i+1)); printf \'{"done": %d, "total": 100000, "tokens": %d}\' $i $((i*100)) '
              '> "$GPUDECK_PROGRESS_FILE.tmp"; mv "$GPUDECK_PROGRESS_FILE.tmp" "$GPUDECK_PROGRESS_FILE"; sleep 0.1; done')
    a = start_agent(interval=0.2)
    a.ok("configure", jobs=[command_job("steady", script)])
    a.ok("launch", job="steady")
    # wait until the first agent has a rate of its own: then its history spans the rate window
    a.wait_snapshot(lambda s: (a.job(s, "steady").get("progress") or {}).get("rate_per_s"), timeout=30,
                    what="a rate")
    a.close()
    out = subprocess.run([PY, "-m", "agents", "--once", "--no-nvml", "--home", str(home)], capture_output=True,
                         env=env_with_repo(), cwd=ROOT, timeout=60, check=True)
    snap = protocol.decode(out.stdout.decode().splitlines()[0])
    (job,) = [j for j in snap.jobs if j.name == "steady"]
    assert job.progress.rate_per_s and job.progress.rate_per_s > 0
    assert job.progress.tokens_per_s and job.progress.tokens_per_s > 0
    assert job.progress.eta_s is not None
