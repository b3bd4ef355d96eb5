"""What tests/e2e/test_ssh.py and tests/system/test_ssh.py share (split out of tests/test_ssh.py when the
suite went into tiers)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil
from gpudeck.agents.contract.wire import Snapshot
from gpudeck.remote.client import FleetClient
from gpudeck.remote.ssh import SshTransport
from support.ssh import PY, ROOT

KEEPALIVE_S = 3.0  # short, so a dropped link shows in seconds; the agent ticks every 0.5 s
TAKEOVER = ["--takeover-grace", "3"]


def transport(**kw) -> SshTransport:
    # config=None: the tests never read the operator's ~/.ssh/config
    return SshTransport(**{"config": None, "keepalive_s": KEEPALIVE_S, "agent_args": TAKEOVER, **kw})


def write_fleet(tmp_path: Path, text: str, name: str = "fleet.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpudeck.console", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def job_in(snap: Snapshot, name: str):
    return next((j for j in snap.jobs if j.name == name), None)


# ---------------------------------------------------------------- three netns nodes


async def hello_from(fleet, node: str):
    """Connect to one node as the console does, and close again: the hello of its agent."""
    client = FleetClient(fleet, {"ssh": transport()})
    try:
        return (await client.connect(fleet.node(node))).hello
    finally:
        await client.close()
