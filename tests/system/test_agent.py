"""The agent process: hello, snapshots, bad input, history, exit on stdin close, --once.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_agent.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpudeck.agents import __version__
from gpudeck.agents.contract import wire
from support import PY, ROOT, command_job, env_with_repo
from support.wait import wait_for


@pytest.mark.system
def test_hello_then_snapshots_at_the_configured_interval(start_agent, home):
    a = start_agent(interval=0.1)
    assert a.hello["version"] == __version__ and a.hello["protocol"] == wire.PROTOCOL
    assert a.hello["node"] == "testnode" and a.hello["home"] == str(home)
    wait_for(lambda: len(a.snapshots) >= 5, what="five snapshots")
    seqs = [s["seq"] for s in a.snapshots[:5]]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    snap = wire.decode(json.dumps(a.snapshots[-1]))
    assert snap.host.cpu_count >= 1 and snap.host.mem_total_bytes > 0
    assert any(d.path == str(home) and d.free_bytes > 0 for d in snap.host.disks)


@pytest.mark.system
def test_no_nvml_reports_no_gpus_with_the_reason(start_agent):
    a = start_agent()
    snap = a.wait_snapshot(lambda s: True)
    assert snap["gpus"] == [] and "NVML" in snap["gpu_error"]
    assert a.hello["gpu_error"] == snap["gpu_error"]


@pytest.mark.system
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
        json.dumps(json.loads(wire.encode(a_snapshot(a)))).encode() + b"\n")["error"]
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
    return wire.decode(json.dumps(a.wait_snapshot(lambda s: True)))


@pytest.mark.system
def test_agent_exits_when_stdin_closes_and_jobs_keep_running(start_agent):
    a = start_agent()
    a.ok("configure", jobs=[command_job("stay", "exec sleep 120")])
    pid = a.ok("launch", job="stay")["pid"]
    assert a.close() == 0
    from support import pid_alive
    assert pid_alive(pid)


@pytest.mark.system
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


@pytest.mark.system
def test_once_prints_one_snapshot(home):
    out = subprocess.run([PY, "-m", "gpudeck.agents", "--once", "--no-nvml", "--home", str(home)], capture_output=True,
                         env=env_with_repo(), cwd=ROOT, timeout=60, check=True)
    lines = out.stdout.decode().splitlines()
    assert len(lines) == 1
    snap = wire.decode(lines[0])
    assert isinstance(snap, wire.Snapshot) and snap.seq == 1 and snap.gpus == []


@pytest.mark.system
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
    out = subprocess.run([PY, "-m", "gpudeck.agents", "--once", "--no-nvml", "--home", str(home)], capture_output=True,
                         env=env_with_repo(), cwd=ROOT, timeout=60, check=True)
    snap = wire.decode(out.stdout.decode().splitlines()[0])
    (job,) = [j for j in snap.jobs if j.name == "steady"]
    assert job.progress.rate_per_s and job.progress.rate_per_s > 0
    assert job.progress.tokens_per_s and job.progress.tokens_per_s > 0
    assert job.progress.eta_s is not None


@pytest.mark.system
def test_a_second_console_shares_the_agent_and_the_last_to_leave_stops_it(start_agent, home, reap_jobs):
    """Two `python -m gpudeck.agents` on one home (the TUI and a CLI command): the second relays to
    the first through <home>/agent.sock; both see the node, each gets its own replies, and
    the agent lives until the last console closes."""
    import os
    import stat

    from support import pid_alive

    a = start_agent(interval=0.1)
    b = start_agent(interval=0.1)
    assert b.hello["pid"] == a.hello["pid"] == a.proc.pid  # b is a relay; the node has one agent
    assert b.proc.pid != a.proc.pid
    sock = home / "agent.sock"
    assert stat.S_ISSOCK(os.stat(sock).st_mode) and stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    wait_for(lambda: any("relaying to the agent already serving" in line for line in b.stderr),
             what="the relay's log line")

    b.ok("configure", jobs=[command_job("shared", "exec sleep 120")])
    pid = b.ok("launch", job="shared")["pid"]
    # the first console sees the job the second launched, in the same agent's snapshots
    a.wait_snapshot(lambda s: (j := a.job(s, "shared")) and j["state"] == "running" and j["pid"] == pid,
                    what="the shared job in the first console's snapshots")
    # replies go to the console that asked, and only there
    a.ok("status")
    b._ids = a._ids = 5000  # the same request id from both consoles
    ra, rb = a.request("frobnicate"), b.request("launch", job="nope")
    assert "unknown op 'frobnicate'" in ra["error"] and "unknown job 'nope'" in rb["error"]

    # the first console leaves: the agent stays for the second
    a.proc.stdin.close()  # (its process is the agent, which must not exit yet)
    wait_for(lambda: any("stdin closed; 1 console(s) still connected" in line for line in a.stderr),
             what="the agent to notice the first console left")
    n = len(b.snapshots)
    wait_for(lambda: len(b.snapshots) >= n + 3, what="snapshots after the first console left")
    assert pid_alive(a.hello["pid"])
    # the last console leaves: the agent exits, the job keeps running
    b.close()
    wait_for(lambda: not pid_alive(a.hello["pid"]), 15, what="the agent to exit with its last console")
    assert pid_alive(pid)
    assert not sock.exists()


@pytest.mark.system
def test_an_agent_of_another_version_is_taken_over_not_relayed_to(start_agent, home, tmp_path):
    """After `gpudeck deploy`, the new version must not relay to the old agent still serving
    another console: it takes the node over (SIGTERM, the old one exits) and serves it."""
    from support import pid_alive
    from support.ssh import old_version_python

    old_python = old_version_python(tmp_path, "0.0.1")
    old = subprocess.Popen([str(old_python), "-m", "gpudeck.agents", "--home", str(home), "--node", "testnode",
                            "--interval", "0.2", "--no-nvml"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, cwd=str(tmp_path))
    try:
        hello = json.loads(old.stdout.readline())
        assert hello["type"] == "hello" and hello["version"] == "0.0.1" and hello["pid"] == old.pid
        wait_for(lambda: (home / "agent.sock").exists(), what="the old agent's socket")
        new = start_agent(extra_args=("--takeover-grace", "3"))
        assert new.hello["pid"] == new.proc.pid and new.hello["version"] == __version__
        assert old.wait(15) == 0  # asked to go
        assert any("is version 0.0.1 (protocol 1), this one" in line for line in new.stderr)
        assert new.ok("status")["node"] == "testnode" and pid_alive(new.proc.pid)
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()


@pytest.mark.system
def test_a_relay_ends_with_its_agent_and_a_stale_socket_is_replaced(start_agent, home):
    """kill -9 of the agent: the relay's console sees its link close (it reconnects), and the
    next agent finds only a dead socket file, takes the node and serves it."""
    import signal

    a = start_agent(interval=0.1)
    b = start_agent(interval=0.1)
    assert b.hello["pid"] == a.proc.pid
    a.proc.send_signal(signal.SIGKILL)
    assert b.proc.wait(15) == 0  # the relay ends with the agent behind it
    assert (home / "agent.sock").exists()  # left behind by the kill
    c = start_agent(interval=0.1)
    assert c.hello["pid"] == c.proc.pid  # a new agent, not a relay to the dead one
    wait_for(lambda: any("no agent answering" in line for line in c.stderr), what="the stale socket noticed")
    d = start_agent(interval=0.1)
    assert d.hello["pid"] == c.proc.pid  # and it serves the next console
    assert d.ok("status")["node"] == "testnode"


@pytest.mark.system
def test_a_console_that_stops_reading_is_dropped_and_holds_up_no_one(start_agent, home, monkeypatch):
    """A console that reads nothing (a laptop asleep): its messages pile up in the socket, its
    relay and then the agent's queue for it; the agent drops it and the other console goes
    on getting snapshots."""
    monkeypatch.setenv("GPUDECK_LINK_QUEUE", "20")
    a = start_agent(interval=0.02)
    asleep = subprocess.Popen([PY, "-m", "gpudeck.agents", "--home", str(home), "--no-nvml"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env_with_repo(), cwd=ROOT)
    try:
        assert json.loads(asleep.stdout.readline())["pid"] == a.proc.pid  # then never read again
        wait_for(lambda: any("has not read its last 20 messages: dropping it" in line for line in a.stderr), 60,
                 what="the agent to drop the console that stopped reading")
        n = len(a.snapshots)
        wait_for(lambda: len(a.snapshots) >= n + 20, what="snapshots to the other console meanwhile")
        assert a.ok("status")["node"] == "testnode"
    finally:
        asleep.kill()
        asleep.wait()


@pytest.mark.system
def test_one_unreadable_job_shows_its_error_and_blinds_no_other(start_agent, reap_jobs):
    a = start_agent()
    too_long = "j" * 300  # 255 bytes is the file-name limit: the agent used to fail every tick
    r = a.request("configure", jobs=[{"name": too_long, "command": ["sleep", "60"]}])
    assert not r["ok"] and "at most 64 characters" in r["error"]
    a.ok("configure", jobs=[{"name": "good", "command": ["sleep", "60"]},
                            {"name": "bad", "command": ["sleep", "60"], "progress": "/tmp/no\u0000such"}])
    a.ok("launch", job="good")
    a.ok("launch", job="bad")
    # (a snapshot from before the second launch has the error too, with the job pending: wait for both running)
    snap = a.wait_snapshot(lambda s: a.job(s, "bad").get("error") and a.job(s, "bad")["state"] == "running"
                           and a.job(s, "good")["state"] == "running",
                           what="the bad job's error beside the good job's state")
    assert "null byte" in a.job(snap, "bad")["error"] and a.job(snap, "bad")["state"] == "running"
    assert a.job(snap, "good")["error"] is None and a.job(snap, "good")["pids"]
    seq = snap["seq"]
    a.wait_snapshot(lambda s: s["seq"] > seq + 3, what="more snapshots")
    assert sum("cannot be read" in line for line in a.stderr) == 1  # said once, not every tick


@pytest.mark.system
@pytest.mark.parametrize("interval", ["0", "-1", "nan", "fast"])
def test_the_agent_refuses_an_interval_that_would_busy_loop(home, interval):
    r = subprocess.run([PY, "-m", "gpudeck.agents", "--once", "--no-nvml", "--home", str(home),
                        "--interval", interval], capture_output=True, text=True, env=env_with_repo(), cwd=ROOT,
                       timeout=60)
    assert r.returncode == 2 and "--interval" in r.stderr


@pytest.mark.system
def test_an_agent_from_before_the_gpudeck_namespace_is_taken_over(start_agent, home, tmp_path):
    """A node deployed before 0.2 runs `python -m agents` (top-level packages). After the
    deploy of this version the new agent takes that node over and adopts its jobs."""
    from support import pid_alive

    old_tree = tmp_path / "old"
    old_tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "e78b01a", "agents"], capture_output=True,
                             timeout=60)
    if archive.returncode != 0:
        pytest.skip(f"the 0.1.0 code is not in this clone's history (git archive: {archive.stderr[-200:]!r})")
    subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive.stdout, check=True, timeout=60)
    env = dict(env_with_repo(), PYTHONPATH=str(old_tree))
    old = subprocess.Popen([PY, "-m", "agents", "--home", str(home), "--node", "testnode", "--interval", "0.2",
                            "--no-nvml"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           cwd=str(tmp_path), env=env)
    try:
        hello = json.loads(old.stdout.readline())
        assert hello["version"] == "0.1.0" and hello["pid"] == old.pid
        wait_for(lambda: (home / "agent.sock").exists(), what="the old agent's socket")
        new = start_agent(extra_args=("--takeover-grace", "3"))
        assert new.hello["pid"] == new.proc.pid and new.hello["version"] == __version__
        assert old.wait(15) == 0
        assert new.ok("status")["node"] == "testnode" and pid_alive(new.proc.pid)
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()


@pytest.mark.system
def test_malformed_requests_get_a_reply_that_says_what_is_wrong(start_agent, reap_jobs):
    a = start_agent()
    r = a.request("configure", jobs="notalist")
    assert not r["ok"] and "configure.jobs: expected a list, got str" in r["error"]
    r = a.request("configure", jobs=["notanobject"])
    assert not r["ok"] and "must be an object" in r["error"]
    r = a.request("configure", jobs=[{"name": "j", "command": ["sleep", 5]}])
    assert not r["ok"] and "'command': expected a list of strings" in r["error"]
    # a string command runs with /bin/sh -c, as a Dockerfile's shell form; never per character
    a.ok("configure", jobs=[{"name": "j", "command": "sh -c 'echo two words'"}])
    launched = a.ok("launch", job="j")
    assert launched["argv"] == ["/bin/sh", "-c", "sh -c 'echo two words'"]
    assert a.ok("status")["node"] == "testnode"
