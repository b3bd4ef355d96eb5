"""The SSH fleet with real OpenSSH: a loopback sshd, and three nodes as network namespaces.

The netns tests skip only where network namespaces cannot be created (no root, no
iproute2, a sandbox that forbids them); the reason says which.


The system tier's tests of this file (real processes and servers); the others are in
tests/e2e/test_ssh.py."""

from __future__ import annotations

import asyncio
import getpass
import json
from pathlib import Path

import psutil
import pytest

from gpudeck.agents.contract import ops
from gpudeck.remote.client import FleetClient, NodeDown
from gpudeck.remote.fleet import load_fleet
from gpudeck.remote.ssh import AgentStartFailed, SshError, SshTransport
from support.ssh import Events, Sshd, agents_of, keygen, lock_holder, node_python, run
from support.wait import wait_for_async
from support.ssh_cases import KEEPALIVE_S, alive, cli, hello_from, transport, write_fleet


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    d = tmp_path_factory.mktemp("loopback")
    d.chmod(0o700)
    key = keygen(d / "client_ed25519")
    (d / "authorized_keys").write_text((d / "client_ed25519.pub").read_text())
    server = Sshd(d / "server", d / "authorized_keys")
    server.client_key = key  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.stop()


def loopback_node(sshd: Sshd, tmp_path: Path, name: str = "lb", **extra: str) -> str:
    home = tmp_path / f"{name}-home"
    python = node_python(tmp_path / f"{name}-python")
    fields = {"name": name, "host": "127.0.0.1", "port": sshd.port, "user": getpass.getuser(),
              "identity": str(sshd.client_key), "known_hosts": str(sshd.known_hosts),
              "python": str(python), "home": str(home), "interval": 0.5, "nvml": False, **extra}
    return "\n[[nodes]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())


# ---------------------------------------------------------------- loopback sshd


async def test_ssh_config_is_honoured(sshd, tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
Host gdtest-alias
    HostName 127.0.0.1
    Port {sshd.port}
    User root
    IdentityFile {sshd.client_key}
    UserKnownHostsFile {sshd.known_hosts}
""")
    text = f"""
[[nodes]]
name = "aliased"
host = "gdtest-alias"
python = "{node_python(tmp_path / 'python')}"
home = "{tmp_path / 'home'}"
nvml = false
"""
    fleet = load_fleet(write_fleet(tmp_path, text))
    client = FleetClient(fleet, {"ssh": SshTransport(config=[str(cfg)], keepalive_s=KEEPALIVE_S)})
    try:
        (status,) = await client.status(timeout=30)
    finally:
        await client.close()
    assert status.error is None and status.snapshot.node == "aliased"


async def test_hashed_known_hosts_line_is_matched(sshd, tmp_path):
    known = tmp_path / "known_hosts_hashed"
    known.write_text(sshd.known_hosts.read_text())
    run("ssh-keygen", "-H", "-f", str(known))
    assert known.read_text().startswith("|1|")
    fleet = load_fleet(write_fleet(tmp_path, loopback_node(sshd, tmp_path, known_hosts=str(known))))
    assert (await hello_from(fleet, "lb")).node == "lb"


async def test_two_consoles_share_one_agent_and_there_is_never_two(sshd, tmp_path):
    fleet = load_fleet(write_fleet(tmp_path, loopback_node(sshd, tmp_path)))
    node = fleet.node("lb")
    home = Path(node.home)
    first, second = FleetClient(fleet, {"ssh": transport()}), FleetClient(fleet, {"ssh": transport()})
    try:
        a = await first.connect(node)
        b = await second.connect(node)
        assert b.hello.pid == a.hello.pid == lock_holder(home)  # the second console relays to it
        assert len(agents_of(home)) == 2  # the agent and the relay
        assert (await b.next_snapshot(b.configured_seq, 10)).node == "lb"
        assert (await a.next_snapshot(b.configured_seq, 10)).node == "lb"  # the first is not disturbed
        assert not a.closed
        await first.close()
        seq = (await b.next_snapshot(b.configured_seq, 10)).seq
        assert (await b.next_snapshot(seq, 10)).node == "lb"  # the agent stays for the second
    finally:
        await first.close()
        await second.close()
    await wait_for_async(lambda: not agents_of(home), 15, "no agent once the last console closed")


async def test_missing_python_says_exit_127_and_what_to_do(sshd, tmp_path):
    fleet = load_fleet(write_fleet(tmp_path, loopback_node(sshd, tmp_path, python="/nonexistent/python3")))
    with pytest.raises(AgentStartFailed) as err:
        await hello_from(fleet, "lb")
    msg = str(err.value)
    assert msg.startswith("node lb: the agent exited before saying hello")
    assert "exit 127" in msg and "gpudeck deploy lb" in msg and "/nonexistent/python3" in msg


async def test_closing_the_console_stops_the_agent_and_jobs_keep_running(sshd, tmp_path):
    jobs = """
[[jobs]]
name = "keeps"
node = "lb"
command = ["sleep", "600"]
"""
    fleet = load_fleet(write_fleet(tmp_path, loopback_node(sshd, tmp_path) + jobs))
    client = FleetClient(fleet, {"ssh": transport()})
    try:
        pid = (await client.request(ops.Launch(job="keeps"))).pid
        agent = client.links["lb"].hello.pid
    finally:
        await client.close()
    try:
        await wait_for_async(lambda: not alive(agent), 15, "the agent to exit when its stdin closed")
        assert alive(pid)
    finally:
        psutil.Process(pid).kill()


async def test_an_error_of_one_node_is_typed_for_the_watch_loop(sshd, tmp_path):
    """A refused node shows as NodeDown with its reason; the loop keeps trying."""
    fleet = load_fleet(write_fleet(tmp_path, loopback_node(sshd, tmp_path, user="gdnouser")))
    client = FleetClient(fleet, {"ssh": transport()})
    events = Events()
    watch = asyncio.create_task(client.watch(events, backoff_s=0.1, backoff_max_s=0.2))
    try:
        downs = await events.wait(lambda: len(events.of("lb", NodeDown)) >= 2 and events.of("lb", NodeDown),
                                  30, "two NodeDown for lb")
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await client.close()
    assert all(str(d.error).startswith("node lb: authentication failed for user gdnouser") for d in downs)
    assert downs[0].since == downs[-1].since  # down since the first failure


async def test_an_encrypted_key_is_refused_without_asking_or_showing_it(sshd, tmp_path):
    key = tmp_path / "locked_ed25519"
    run("ssh-keygen", "-q", "-t", "ed25519", "-N", "s3cret-pass", "-f", str(key))
    fleet = load_fleet(write_fleet(tmp_path, loopback_node(sshd, tmp_path, identity=str(key))))
    with pytest.raises(SshError) as err:
        await hello_from(fleet, "lb")
    msg = str(err.value)
    assert msg.startswith("node lb: cannot use its SSH settings:") and "ssh-agent" in msg, msg
    assert "s3cret" not in msg and key.read_text().splitlines()[1] not in msg


async def test_a_home_shared_with_another_host_is_refused_with_a_reason(sshd, tmp_path):
    import fcntl
    import os

    fleet = load_fleet(write_fleet(tmp_path, loopback_node(sshd, tmp_path)))
    home = Path(fleet.node("lb").home)
    home.mkdir(parents=True)
    fd = os.open(home / "agent.lock", os.O_RDWR | os.O_CREAT)
    try:  # what an agent on another machine holds when ~/.gpudeck is on a shared file system
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"4242 some-other-host\n")
        with pytest.raises(AgentStartFailed) as err:
            await hello_from(fleet, "lb")
    finally:
        os.close(fd)
    assert "held by an agent on host some-other-host" in str(err.value)
    assert "give each node its own `home`" in str(err.value)


def test_a_watcher_started_over_ssh_outlives_the_session_and_a_kill9_is_replaced(sshd, tmp_path):
    """`gpudeck watch start` over SSH: the agent hands the node to a detached watcher that
    outlives the SSH session; a console's command relays to it; the watcher killed with
    kill -9 is replaced by the next `watch start`, which adopts the job, never relaunches it."""
    from support.wait import wait_for
    from support.watch import job_state, stop_watch, watcher_pid

    jobs = '\n[[jobs]]\nname = "w"\nnode = "lb"\ncommand = ["sleep", "600"]\n'
    fleet = str(write_fleet(tmp_path, loopback_node(sshd, tmp_path) + jobs))
    home = tmp_path / "lb-home"
    try:
        r = cli("watch", "start", "-f", fleet)
        assert r.returncode == 0, r.stdout + r.stderr
        watcher = wait_for(lambda: watcher_pid(home), 30, what="the detached watcher on the node")
        r = cli("launch", "w", "-f", fleet)  # a console's agent over SSH relays to the watcher
        assert r.returncode == 0, r.stdout + r.stderr
        st = wait_for(lambda: (s := job_state(home, "w")).get("state") == "running" and s, 30, what="w running")
        # every SSH session is gone: the watcher alone holds the node, the job runs
        wait_for(lambda: agents_of(home) == [watcher], 30, what="the watcher alone once the CLI left")
        assert alive(st["pid"]) and lock_holder(home) == watcher
        psutil.Process(watcher).kill()
        wait_for(lambda: not alive(watcher), 15, what="the watcher gone")
        r = cli("watch", "start", "-f", fleet)
        assert r.returncode == 0, r.stdout + r.stderr
        again = wait_for(lambda: (p := watcher_pid(home)) and p != watcher and p, 30, what="a new watcher")
        assert alive(again) and alive(st["pid"])
        after = job_state(home, "w")
        assert (after["pid"], after["attempt"]) == (st["pid"], st["attempt"])  # adopted, not relaunched
    finally:
        stop_watch(home)


async def test_a_node_whose_agent_will_not_start_reads_agent_failed_with_its_reason_never_unreachable(sshd, tmp_path):
    """Two nodes that answer over SSH and whose agent will not serve: a home writable by its group
    (the agent refuses it) and another gpudeck version. `status`, its JSON, `watch start`, `doctor`
    and the console say `agent_failed` with the agent's own reason, never "unreachable"."""
    import re

    from gpudeck.console.app import make_app
    from support.ssh import old_version_python
    from support.tui import screen_text, wait_until

    team_home = tmp_path / "team-home"
    team_home.mkdir()
    team_home.chmod(0o770)
    old = old_version_python(tmp_path, "0.0.1")
    text = (loopback_node(sshd, tmp_path, name="team", home=str(team_home))
            + loopback_node(sshd, tmp_path, name="old", python=str(old)))
    path = write_fleet(tmp_path, text)
    why_team = f"the state directory {team_home} is writable by its group (mode 0770)"
    why_old = "agent version 0.0.1 (protocol 1) does not match the console's"

    r = cli("status", "-f", str(path))
    assert r.returncode == 3, r.stdout + r.stderr  # a partial look, as for a node that did not answer
    assert "UNREACHABLE" not in r.stdout and "unreachable" not in r.stdout, r.stdout
    assert re.search(rf"^team: AGENT_FAILED since [\d:]+ \(node team: {re.escape(why_team)}", r.stdout, re.M), r.stdout
    assert re.search(rf"^old: AGENT_FAILED since [\d:]+ \(node old: {re.escape(why_old)}", r.stdout, re.M), r.stdout
    assert "ALERT team: node team: its agent failed: " + why_team in r.stdout, r.stdout

    r = cli("status", "-f", str(path), "--json")
    doc = json.loads(r.stdout)
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert {n: (v["state"], v["reachable"]) for n, v in nodes.items()} == {
        "team": ("agent_failed", False), "old": ("agent_failed", False)}, nodes
    assert why_team in nodes["team"]["error"] and why_old in nodes["old"]["error"]
    assert {a["kind"] for a in doc["alerts"]} == {"agent_failed"}, doc["alerts"]

    r = cli("watch", "start", "-f", str(path), "--timeout", "20")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"team: AGENT_FAILED ({why_team}" in r.stdout and f"old: AGENT_FAILED ({why_old}" in r.stdout, r.stdout
    assert "UNREACHABLE" not in r.stdout, r.stdout

    r = cli("doctor", "-f", str(path))
    assert f"team: AGENT_FAILED (node team: {why_team}" in r.stdout and "UNREACHABLE" not in r.stdout, r.stdout

    app = make_app(load_fleet(path), initial_view="fleet")
    app.animation_level = "none"
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        screen = await wait_until(pilot, lambda: (t := screen_text(app)) and "✗ team  agent failed since" in t
                                  and "✗ old  agent failed since" in t and t, what="both nodes' agent failed")
        line = next(ln for ln in screen.splitlines() if "✗ team" in ln)
        assert "· the state directory" in line, line  # the agent's own reason (cut at the screen's edge)
        assert "unreachable" not in screen, screen
        await pilot.press("4")  # the alerts: the node's own words, not "unreachable"
        screen = await wait_until(pilot, lambda: (t := screen_text(app)) and "node team: its agent failed: the" in t
                                  and "node old: its agent failed: agent version 0.0.1" in t and t,
                                  what="the agent_failed alerts")
        assert "unreachable" not in screen, screen
