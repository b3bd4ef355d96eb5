"""What the watcher's commands say is what the node said ("Nothing on screen lies"): `watch
start` with a console open, settings that changed under a running watcher, the watcher's own
death and return, a `gave_up` acknowledged. Real agents, real CLI, real processes."""

from __future__ import annotations

import json

import pytest

from support.watch import agent_pid, gpudeck_watch, stop_watch, write_fleet

pytestmark = pytest.mark.system  # real agents, the CLI, detached watchers


@pytest.fixture
def watched(home):
    yield home
    stop_watch(home)


def test_watch_start_with_a_console_open_answers_at_once_and_says_who_takes_over(tmp_path, home, watched,
                                                                                  start_agent):
    fleet = write_fleet(tmp_path / "fleet.toml", home, jobs='''
        [[jobs]]
        name = "a"
        command = ["sh", "-c", "sleep 30"]
    ''')
    console = start_agent(extra_args=("--node", "local"))  # a console connected, as `gpudeck up` is
    r = gpudeck_watch("watch", "start", "-f", str(fleet))
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert "UNREACHABLE" not in r.stdout
    assert "takes over when the last console closes" in r.stdout, r.stdout
    assert f"agent pid {console.proc.pid}" in r.stdout
    # it is set up, wholly: the flag is on and the console's agent still serves the node
    assert json.loads((home / "watch.json").read_text())["watching"] is True
    assert agent_pid(home) == console.proc.pid
    doc = json.loads(gpudeck_watch("watch", "status", "-f", str(fleet), "--json").stdout)
    assert doc["local"]["watching"] is True and doc["local"]["detached"] is False


def test_a_node_that_answers_and_refuses_is_never_called_unreachable(tmp_path, home, watched):
    """systemd without a user manager (as in a container): the node answered, and refused."""
    import shutil
    import subprocess

    if shutil.which("systemctl") and subprocess.run(["systemctl", "--user", "show-environment"],
                                                    capture_output=True, timeout=10).returncode == 0:
        pytest.skip("systemctl --user works on this machine: nothing to refuse")
    fleet = write_fleet(tmp_path / "fleet.toml", home, jobs="")
    r = gpudeck_watch("watch", "start", "-f", str(fleet), "--supervise", "systemd")
    assert r.returncode == 1, f"{r.stdout}\n{r.stderr}"
    assert "UNREACHABLE" not in r.stdout and "local: REFUSED (" in r.stdout, r.stdout
    assert "systemctl --user does not work here" in r.stdout
    assert not json.loads((home / "watch.json").read_text()).get("watching") if (home / "watch.json").exists() else 1
    doc = json.loads(gpudeck_watch("watch", "start", "-f", str(fleet), "--supervise", "systemd", "--json").stdout)
    assert doc["local"]["state"] == "refused"
