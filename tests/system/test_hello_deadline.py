"""An agent slow to say hello (gpudeck imported cold from an NFS venv): the wait follows the
node's ``hello_timeout_s`` and a command's ``--timeout``, the larger; when it runs out, the
error names the key to raise.

The node's ``python`` is a shell script that sleeps 3 s before it execs the real python, so
the agent's hello comes 3 s late, every time."""

from __future__ import annotations

import json
import shlex
import sys
import textwrap

import pytest

from gpudeck.remote.client import AgentError, FleetClient
from gpudeck.remote.fleet import load_fleet
from support.cli import gpudeck

pytestmark = pytest.mark.system  # starts agents (and the gpudeck CLI) as processes

LATE_S = 3


def slow_fleet(tmp_path, name: str, hello_timeout_s: float) -> str:
    python = tmp_path / "slow-python"
    python.write_text(f"#!/bin/sh\nsleep {LATE_S}\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    python.chmod(0o755)
    home = tmp_path / f"home-{name}"
    home.mkdir(mode=0o700)
    fleet = tmp_path / f"{name}.toml"
    fleet.write_text(textwrap.dedent(f'''
        [[nodes]]
        name = "{name}"
        local = true
        home = "{home}"
        python = "{python}"
        nvml = false
        interval = 0.2
        hello_timeout_s = {hello_timeout_s}
    '''))
    return str(fleet)


async def test_the_hello_waits_as_long_as_the_nodes_hello_timeout_s(tmp_path):
    fleet = load_fleet(slow_fleet(tmp_path, "short", 1))
    client = FleetClient(fleet)
    try:
        with pytest.raises(AgentError) as err:
            await client.connect(fleet.node("short"))
    finally:
        await client.close()
    assert err.value.reason.startswith("the agent sent no hello within 1 s; raise `hello_timeout_s` for node "
                                       "short"), str(err.value)

    fleet = load_fleet(slow_fleet(tmp_path, "patient", 10))
    client = FleetClient(fleet)
    try:
        link = await client.connect(fleet.node("patient"))
        assert link.hello is not None and link.hello_wait_s >= LATE_S  # it did come late, and was waited for
    finally:
        await client.close()


def test_status_timeout_raises_the_hello_wait(tmp_path):
    fleet = slow_fleet(tmp_path, "nfs", 1)
    short = gpudeck("status", "--json", "--timeout", "1", "-f", fleet, check=False)
    assert short.returncode == 3, short.stderr  # the node did not answer
    (node,) = json.loads(short.stdout)["nodes"]
    assert not node["reachable"] and "raise `hello_timeout_s` for node nfs" in node["error"], node

    patient = gpudeck("status", "--json", "--timeout", "10", "-f", fleet, check=False)
    assert patient.returncode == 0, patient.stdout + patient.stderr
    (node,) = json.loads(patient.stdout)["nodes"]
    assert node["reachable"], node
