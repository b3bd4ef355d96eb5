"""The SSH fleet with real OpenSSH: a loopback sshd, and three nodes as network namespaces.

The netns tests skip only where network namespaces cannot be created (no root, no
iproute2, a sandbox that forbids them); the reason says which.


The e2e tier's tests of this file (end to end); the others are in tests/system/test_ssh.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time

import psutil
import pytest

from gpudeck.agents.contract import ops
from gpudeck.agents import __version__
from gpudeck.agents.contract.wire import Snapshot
from gpudeck.remote.client import FleetClient, NodeDown, NodeUp, VersionMismatch
from gpudeck.remote.fleet import load_fleet
from gpudeck.remote.ssh import AuthFailed, HostKeyChanged, HostKeyUnknown
from support.ssh import Events, NetnsFleet, agents_of, host_key_line, keygen, lock_holder, netns_unavailable, old_version_python, run
from support.wait import wait_for_async
from support.ssh_cases import KEEPALIVE_S, alive, cli, hello_from, job_in, transport, write_fleet


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def netns(tmp_path_factory):
    why = netns_unavailable()
    if why:
        pytest.skip(why)
    fleet = NetnsFleet(tmp_path_factory.mktemp("netns"))
    try:
        yield fleet
    finally:
        fleet.close()


def test_status_across_three_nodes(netns, tmp_path):
    path = write_fleet(tmp_path, netns.fleet_toml())
    r = cli("status", "-f", str(path))
    assert r.returncode == 0, r.stderr
    for node in netns.nodes:  # each answered from its own namespace: its own hostname
        assert f"{node.name} ({node.hostname}):" in r.stdout, r.stdout
    r = cli("status", "-f", str(path), "--json")
    nodes = {n["name"]: n for n in json.loads(r.stdout)["nodes"]}
    assert {n: (v["reachable"], v["host"]["hostname"]) for n, v in nodes.items()} == {
        "node1": (True, "gdn1"), "node2": (True, "gdn2"), "node3": (True, "gdn3")}


def test_unreachable_node_is_marked_and_does_not_fail_status(netns, tmp_path):
    ghost = f"""
[[nodes]]
name = "ghost"
host = "{netns.subnet}.99"
python = "{netns.nodes[0].python}"
home = "{tmp_path / 'ghost'}"
connect_timeout = 2
"""
    path = write_fleet(tmp_path, netns.fleet_toml(extra_nodes=ghost))
    r = cli("status", "-f", str(path), "--json")
    assert r.returncode == 3, r.stderr  # the report is whole; 3 says a node did not answer
    nodes = {n["name"]: n for n in json.loads(r.stdout)["nodes"]}
    assert [n for n, v in nodes.items() if v["reachable"]] == ["node1", "node2", "node3"]
    assert nodes["ghost"]["error"].startswith(f"node ghost: cannot connect to root@{netns.subnet}.99:22")
    assert nodes["ghost"]["unreachable_since"] is not None
    r = cli("status", "-f", str(path))
    assert r.returncode == 3
    assert re.search(r"ghost: UNREACHABLE since \d\d:\d\d:\d\d \(node ghost: cannot connect", r.stdout), r.stdout


def test_job_on_node2_launched_and_killed_from_the_console(netns, tmp_path):
    jobs = """
[[jobs]]
name = "spin"
node = "node2"
command = ["sh", "-c", "echo spinning on $(hostname); exec sleep 600"]
"""
    path = write_fleet(tmp_path, netns.fleet_toml(jobs=jobs))
    node2 = netns.node("node2")
    r = cli("launch", "-f", str(path), "spin")
    assert r.returncode == 0, r.stderr
    pid = int(r.stdout.split("pid ")[1].split(",")[0])
    try:
        assert pid in netns.pids_in(node2)  # it runs on node 2, in its namespace
        assert pid not in netns.pids_in(netns.node("node1"))
        r = cli("status", "-f", str(path), "--json")
        (job,) = [j for j in json.loads(r.stdout)["jobs"] if j["name"] == "spin"]
        assert (job["node"], job["state"], job["attempt"]) == ("node2", "running", 1)
        r = cli("logs", "-f", str(path), "spin")
        assert "spinning on gdn2" in r.stdout
        r = cli("kill", "-f", str(path), "spin", "--grace", "5")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("killed spin:"), r.stdout
        assert not alive(pid)
        r = cli("status", "-f", str(path), "--json")
        (job,) = [j for j in json.loads(r.stdout)["jobs"] if j["name"] == "spin"]
        assert job["state"] == "killed"
        r = cli("relaunch", "-f", str(path), "spin")
        assert r.returncode == 0, r.stderr
        assert "attempt 2" in r.stdout, r.stdout
        pid = int(r.stdout.split("pid ")[1].split(",")[0])
        assert pid in netns.pids_in(node2)
        r = cli("kill", "-f", str(path), "spin", "--grace", "5")
        assert r.returncode == 0 and not alive(pid), r.stdout + r.stderr
    finally:
        if alive(pid):
            psutil.Process(pid).kill()


async def test_link_down_others_keep_reporting_then_reconnect_readopts(netns, tmp_path):
    jobs = """
[[jobs]]
name = "survivor"
node = "node2"
command = ["sleep", "600"]
"""
    fleet = load_fleet(write_fleet(tmp_path, netns.fleet_toml(jobs=jobs)))
    node2 = netns.node("node2")
    client = FleetClient(fleet, {"ssh": transport()})
    events = Events()
    watch = asyncio.create_task(client.watch(events, backoff_s=0.2, backoff_max_s=1.0))
    try:
        await events.wait(lambda: all(events.of(n, NodeUp) for n in ("node1", "node2", "node3")), 90,
                          "the three nodes up")
        pid = (await client.request(ops.Launch(job="survivor"))).pid
        await events.wait(lambda: any((j := job_in(s, "survivor")) and j.state == "running"
                                      for s in events.of("node2", Snapshot)), 30, "survivor running")
        old_agent = events.of("node2", NodeUp)[-1].hello.pid

        node2.link(False)
        t_down = time.monotonic()
        down = await events.wait(lambda: events.of("node2", NodeDown, after=t_down), 60, "node2 down")
        detected_after = next(t for t, n, e in events.items if e is down[0]) - t_down
        print(f"node2 marked down {detected_after:.1f} s after its link went down "
              f"(keepalive {KEEPALIVE_S:g} s): {down[0].error}")
        assert str(down[0].error).startswith("node node2: link lost")
        # the other two keep reporting while node2 is cut off
        t = time.monotonic()
        await events.wait(lambda: all(len(events.of(n, Snapshot, after=t)) >= 3 for n in ("node1", "node3")),
                          30, "node1 and node3 snapshots while node2 is down")
        assert not events.of("node2", NodeUp, after=t_down)
        assert alive(pid)  # the job does not depend on the link

        node2.link(True)
        t_up = time.monotonic()
        up = await events.wait(lambda: events.of("node2", NodeUp, after=t_up), 90, "node2 back up")
        new_agent = up[0].hello.pid
        snap = await events.wait(
            lambda: [s for s in events.of("node2", Snapshot, after=t_up)
                     if (j := job_in(s, "survivor")) and j.state == "running"], 30, "survivor re-adopted")
        job = job_in(snap[-1], "survivor")
        assert (job.pid, job.attempt) == (pid, 1)  # the same process, adopted, not relaunched
        # never two agents. The old agent exits once its dead link closes (when the link comes
        # back, the console's reset reaches sshd) and a new one takes the node; had the console
        # reconnected first, the old one would serve it through a relay.
        assert lock_holder(node2.home) == new_agent
        await wait_for_async(lambda: new_agent == old_agent or not alive(old_agent), 20, "the old agent gone")
        verdict = await client.request(ops.Kill(job="survivor", grace_s=5.0))
        assert verdict.ok, verdict
        assert not alive(pid)
    finally:
        node2.link(True)
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await client.close()


async def test_changed_host_key_is_refused_with_file_and_line(netns, tmp_path):
    node1 = netns.node("node1")
    impostor = keygen(tmp_path / "other_host_key")
    known = tmp_path / "known_hosts"
    known.write_text("# recorded long ago\n" + host_key_line(node1.ip, impostor.with_suffix(".pub")))
    before = known.read_text()
    text = netns.fleet_toml().replace(f'known_hosts = "{netns.known_hosts}"', f'known_hosts = "{known}"')
    fleet = load_fleet(write_fleet(tmp_path, text))
    for host_keys in ("strict", "accept-new"):  # a changed key is refused even with accept-new
        node = dataclasses.replace(fleet.node("node1"), host_keys=host_keys)
        client = FleetClient(fleet, {"ssh": transport()})
        try:
            with pytest.raises(HostKeyChanged) as err:
                await client.connect(node)
        finally:
            await client.close()
        msg = str(err.value)
        assert msg.startswith("node node1: HOST KEY CHANGED"), msg
        assert f"{known} line 2" in msg and (err.value.path, err.value.line) == (str(known), 2)
    assert known.read_text() == before  # nothing recorded


async def test_unknown_host_refused_unless_accept_new_which_records_it(netns, tmp_path):
    node1 = netns.node("node1")
    known = tmp_path / "known_hosts"
    known.write_text("")
    text = netns.fleet_toml().replace(f'known_hosts = "{netns.known_hosts}"', f'known_hosts = "{known}"')
    fleet = load_fleet(write_fleet(tmp_path, text))
    client = FleetClient(fleet, {"ssh": transport()})
    try:
        with pytest.raises(HostKeyUnknown) as err:
            await client.connect(fleet.node("node1"))
        assert str(err.value).startswith(f"node node1: host key of {node1.ip} is not known")
        assert 'host_keys = "accept-new"' in str(err.value)
        assert known.read_text() == ""
    finally:
        await client.close()
    fleet = load_fleet(write_fleet(tmp_path, text.replace("[defaults]\n", '[defaults]\nhost_keys = "accept-new"\n')))
    await hello_from(fleet, "node1")
    assert known.read_text() == host_key_line(node1.ip, node1.dir / "host_ed25519.pub")  # as OpenSSH writes it
    fleet = load_fleet(write_fleet(tmp_path, text))  # and now strict accepts it
    assert (await hello_from(fleet, "node1")).node == "node1"


async def test_version_mismatch_refused_and_says_deploy(netns, tmp_path):
    old = old_version_python(tmp_path, "0.0.1")
    node3 = netns.node("node3")
    extra = f"""
[[nodes]]
name = "oldnode"
host = "{node3.ip}"
python = "{old}"
home = "{tmp_path / 'old-home'}"
"""
    path = write_fleet(tmp_path, netns.fleet_toml(extra_nodes=extra))
    fleet = load_fleet(path)
    with pytest.raises(VersionMismatch) as err:
        await hello_from(fleet, "oldnode")
    assert str(err.value) == (f"node oldnode: agent version 0.0.1 (protocol 1) does not match the console's "
                              f"{__version__} (protocol 1); run `gpudeck deploy oldnode`")
    r = cli("status", "-f", str(path))
    assert re.search(r"oldnode: AGENT_FAILED since [\d:]+ \(node oldnode: agent version 0\.0\.1", r.stdout), r.stdout
    assert "node3 (gdn3):" in r.stdout  # the other nodes are not held up by it
    # the refused agent was told to go (stdin closed): none is left behind
    await wait_for_async(lambda: not agents_of(tmp_path / "old-home"), 15, "the old agent gone")


@pytest.mark.parametrize("wrong", ["user", "key"])
async def test_wrong_user_or_key_is_an_auth_error_naming_the_node(netns, tmp_path, wrong):
    text = netns.fleet_toml()
    if wrong == "user":
        text = text.replace('user = "root"', 'user = "gdnouser"')
        expect = f"for user gdnouser with key {netns.client_key}"
    else:
        stranger = keygen(tmp_path / "stranger_ed25519")
        text = text.replace(f'identity = "{netns.client_key}"', f'identity = "{stranger}"')
        expect = f"for user root with key {stranger}"
    fleet = load_fleet(write_fleet(tmp_path, text))
    client = FleetClient(fleet, {"ssh": transport()})
    try:
        with pytest.raises(AuthFailed) as err:
            await client.connect(fleet.node("node2"))
        statuses = await client.status(timeout=20)
    finally:
        await client.close()
    node2 = netns.node("node2")
    assert str(err.value) == (f"node node2: authentication failed {expect} "
                              f"({'gdnouser' if wrong == 'user' else 'root'}@{node2.ip}:22)")
    assert all(s.snapshot is None and str(s.error).startswith(f"node {s.node.name}: authentication failed")
               for s in statuses)
    assert "PRIVATE KEY" not in str(err.value)


def test_deploy_wheel_over_sftp_then_the_agent_runs_from_the_venv(netns, tmp_path):
    node1 = netns.node("node1")
    home = tmp_path / "deployed-home"
    extra = f"""
[[nodes]]
name = "fresh"
host = "{node1.ip}"
python = "{node1.python}"
home = "{home}"
"""
    path = write_fleet(tmp_path, netns.fleet_toml(extra_nodes=extra))
    r = cli("deploy", "-f", str(path), "fresh", timeout=300)
    assert r.returncode == 0, r.stderr
    venv = home / "venv"
    assert (f"\nfresh: gpudeck {__version__} in {venv} (dependencies already there: pip --no-deps --no-index)"
            in r.stdout), r.stdout  # after the per-node progress lines, before the summary
    assert "deployed gpudeck to 1 of 1 node(s)" in r.stdout
    assert (home / "dist" / f"gpudeck-{__version__}-py3-none-any.whl").is_file()  # what SFTP carried
    where = run(str(venv / "bin" / "python"), "-c", "import gpudeck.agents as a; print(a.__file__)", cwd="/").stdout
    assert where.startswith(str(venv / "lib")), where  # installed in the venv, not this working tree

    async def agent_cmdline() -> list[str]:
        fleet = load_fleet(path)
        client = FleetClient(fleet, {"ssh": transport()})
        try:  # read while the link is open: closing it ends the agent
            link = await client.connect(fleet.node("fresh"))
            return psutil.Process(link.hello.pid).cmdline()
        finally:
            await client.close()

    cmd = asyncio.run(agent_cmdline())
    assert cmd[:3] == [str(venv / "bin" / "python"), "-m", "gpudeck.agents"]
    # deploying again updates in place; --wheel installs a given wheel instead of building one
    r = cli("deploy", "-f", str(path), "fresh", "--wheel", str(home / "dist" / f"gpudeck-{__version__}-py3-none-any.whl"),
            timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"\nfresh: gpudeck {__version__} in {venv}" in r.stdout, r.stdout


def test_deploy_reports_unknown_node(netns, tmp_path):
    path = write_fleet(tmp_path, netns.fleet_toml())
    r = cli("deploy", "-f", str(path), "nosuch")
    assert r.returncode == 2
    assert "no node named 'nosuch'" in r.stderr and "node1, node2, node3" in r.stderr
