"""A hostile or broken agent: a 300 MB line with no newline, a deeply nested JSON line. The
console keeps its per-node deadline, says what is wrong with the node, never a traceback; the
agent answers a nested request with a protocol error and keeps going; a nested plan.json
costs a job its plan figures, not its row."""

from __future__ import annotations

import sys

import pytest

from support.cli import gpudeck
from support.wait import wait_for

pytestmark = pytest.mark.system  # real agents and the gpudeck CLI

HOSTILE = '''
import sys, time
from gpudeck.agents.contract import wire
sys.stdout.buffer.write(wire.encode(wire.hello("local", 1, time.time(), "/tmp", None)))
sys.stdout.buffer.flush()
mode = {mode!r}
if mode == "longline":
    chunk = b"x" * (1 << 20)
    for _ in range(300):
        sys.stdout.buffer.write(chunk)
    sys.stdout.buffer.flush()
else:
    sys.stdout.buffer.write(b'{{"type": "snapshot", "x": ' + b"[" * 200000 + b"]" * 200000 + b"}}\\n")
    sys.stdout.buffer.flush()
time.sleep(600)
'''


@pytest.mark.parametrize("mode", ["longline", "nested"])
def test_a_hostile_agent_costs_one_node_its_deadline_never_a_hang_or_a_traceback(mode, tmp_path):
    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE.format(mode=mode))
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    python.chmod(0o755)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[[nodes]]\nname = "local"\npython = "{python}"\nnvml = false\n')
    r = gpudeck("status", "--timeout", "10", "-f", str(fleet), check=False, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr  # the node could not be read: said, not raised
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stdout + r.stderr
    assert "local" in r.stdout and "UNREACHABLE" in r.stdout.upper()


def test_a_nested_request_gets_a_protocol_error_and_the_agent_goes_on(start_agent):
    a = start_agent()
    a.send_raw(b'{"type": "request", "id": 7, "op": "status", "args": ' + b"[" * 100000 + b"]" * 100000 + b"}\n")
    reply = wait_for(lambda: a.replies.get(-1), 30, what="the reply to the nested request")
    assert reply["ok"] is False and "nested too deep" in reply["error"], reply
    assert a.ok("status")["node"]  # still answering


def test_a_nested_plan_json_costs_the_job_its_plan_not_its_row(start_agent, home, tmp_path):
    from support import command_job

    a = start_agent()
    a.ok("configure", jobs=[command_job("planned", "exec sleep 60")])
    a.ok("launch", job="planned")
    (home / "jobs" / "planned" / "plan.json").write_text('{"projected_wall_s": ' + "[" * 100000 + "]" * 100000 + "}")
    snap = a.wait_snapshot(lambda s: any(j["name"] == "planned" and j["state"] == "running" for j in s["jobs"]),
                           what="the job's row")
    job = next(j for j in snap["jobs"] if j["name"] == "planned")
    assert job["state"] == "running" and job["error"] is None, job
    a.ok("kill", job="planned", grace_s=1)
