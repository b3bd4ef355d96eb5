"""Bastions and host certificates, with real OpenSSH.

Nodes behind a bastion are network namespaces that only the bastion's namespace can reach
(see ``support.ssh.BastionFleet``); the certificates are signed by a throwaway CA with
``ssh-keygen -s`` and served by a loopback sshd (``HostCertificate``). The netns tests skip
only where network namespaces cannot be created; the reason says which.
"""

from __future__ import annotations

import asyncio
import dataclasses
import getpass
import json
from pathlib import Path

import pytest

from gpudeck.agents.contract import ops
from gpudeck.agents.contract.wire import Snapshot
from gpudeck.remote.client import FleetClient
from gpudeck.remote.fleet import load_fleet
from gpudeck.remote.ssh import ConnectFailed, HostCertificateRefused, HostKeyChanged, HostKeyUnknown, SshTransport
from support.ssh import (BastionFleet, Sshd, host_key_line, keygen, netns_unavailable, node_python, run,
                         ssh_connections_to)
from support.ssh_cases import KEEPALIVE_S, TAKEOVER, cli, hello_from, job_in, transport, write_fleet

pytestmark = pytest.mark.system  # sshd (a bastion and its nodes) and agents behind it


@pytest.fixture(scope="module")
def jump(tmp_path_factory):
    why = netns_unavailable()
    if why:
        pytest.skip(why)
    fleet = BastionFleet(tmp_path_factory.mktemp("jump"))
    try:
        yield fleet
    finally:
        fleet.close()


def spin(name: str) -> str:
    return f"""
[[jobs]]
name = "{name}"
node = "inner1"
command = ["sh", "-c", "echo spinning on $(hostname); exec sleep 600"]
"""


async def launch_and_see_it(client: FleetClient, job: str) -> None:
    """Launch ``job`` through the client; a status shows it running on inner1; kill it."""
    result = await client.request(ops.Launch(job=job))
    try:
        assert result.pid > 0

        async def running():
            (status,) = [s for s in await client.status(timeout=30) if s.node.name == "inner1"]
            assert status.error is None, status.error
            j = job_in(status.snapshot, job)
            return j is not None and j.state == "running"
        for _ in range(40):
            if await running():
                break
            await asyncio.sleep(0.25)
        else:
            raise AssertionError(f"job {job} never shown running on inner1")
    finally:
        await client.request(ops.Kill(job=job, grace_s=5))


async def test_the_inner_nodes_are_not_reachable_without_the_bastion(jump, tmp_path):
    fleet = load_fleet(write_fleet(tmp_path, jump.fleet_toml(connect_timeout=2.0)))
    direct = dataclasses.replace(fleet.node("inner1"), jump="none", via=None)
    t = transport()
    try:
        with pytest.raises(ConnectFailed) as err:
            await t.connection(direct)
    finally:
        await t.close()
    assert str(err.value).startswith(f"node inner1: cannot connect to root@{jump.inner[0].ip}:22"), err.value


def test_jump_in_the_fleet_file_launches_and_status_shows_the_job(jump, tmp_path):
    path = write_fleet(tmp_path, jump.fleet_toml(jobs=spin("spin")))
    r = cli("launch", "-f", str(path), "spin")
    assert r.returncode == 0, r.stderr
    pid = int(r.stdout.split("pid ")[1].split(",")[0])
    assert pid in [int(p) for p in run("ip", "netns", "pids", jump.inner[0].ns).stdout.split()]
    r = cli("status", "-f", str(path), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert nodes["inner1"]["reachable"] and nodes["inner1"]["host"]["hostname"] == "gdn22"
    assert nodes["inner2"]["reachable"] and nodes["inner2"]["host"]["hostname"] == "gdn23"
    (job,) = [j for j in doc["jobs"] if j["name"] == "spin"]
    assert (job["node"], job["state"]) == ("inner1", "running")
    r = cli("kill", "-f", str(path), "spin", "--grace", "5")
    assert r.returncode == 0, r.stderr


async def test_one_bastion_connection_is_shared_by_the_nodes_behind_it(jump, tmp_path):
    fleet = load_fleet(write_fleet(tmp_path, jump.fleet_toml(jobs=spin("shared"))))
    client = FleetClient(fleet, {"ssh": transport()})
    try:
        statuses = await client.status(timeout=60)
        assert {s.node.name: s.error for s in statuses if s.node.name != "local"} == {
            "bastion": None, "inner1": None, "inner2": None}
        assert {s.node.name: s.snapshot.host.hostname for s in statuses if s.node.name != "local"} == {
            "bastion": "gdn21", "inner1": "gdn22", "inner2": "gdn23"}
        # the bastion's own agent and both inner nodes: one TCP connection to the bastion
        assert ssh_connections_to(jump.bastion.ip) == 1
        await launch_and_see_it(client, "shared")
    finally:
        await client.close()
    await asyncio.sleep(0.2)
    assert ssh_connections_to(jump.bastion.ip) == 0


async def test_proxyjump_chain_in_the_ssh_config(jump, tmp_path):
    """``ProxyJump user@host:port,host``: inner1 through the bastion, then through inner2."""
    b, i1, i2 = jump.bastion, jump.inner[0], jump.inner[1]
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
Host gd-bastion
    HostName {b.ip}
Host gd-inner2
    HostName {i2.ip}
    User root
Host gd-inner1
    HostName {i1.ip}
    ProxyJump root@gd-bastion:22,gd-inner2
""")
    text = jump.fleet_toml(jump=None).replace(f'host = "{i1.ip}"', 'host = "gd-inner1"') + spin("chained")
    fleet = load_fleet(write_fleet(tmp_path, text))
    assert fleet.node("inner1").via is None  # nothing in the fleet file: the ssh config says it
    ssh = SshTransport(config=[str(cfg)], keepalive_s=KEEPALIVE_S, agent_args=TAKEOVER)
    client = FleetClient(fleet, {"ssh": ssh})
    try:
        await launch_and_see_it(client, "chained")
        (status,) = [s for s in await client.status(timeout=30) if s.node.name == "inner1"]
        assert status.snapshot.host.hostname == "gdn22"
        assert {n.name for n in ssh._tunnels} == {"root@gd-bastion:22", "gd-inner2"}
    finally:
        await client.close()


async def test_a_changed_or_unknown_bastion_key_is_refused_naming_the_bastion(jump, tmp_path):
    b, i1 = jump.bastion, jump.inner[0]
    impostor = keygen(tmp_path / "impostor")
    known = tmp_path / "known_hosts"
    known.write_text(host_key_line(b.ip, impostor.with_suffix(".pub")) +
                     host_key_line(i1.ip, i1.dir / "host_ed25519.pub"))
    text = jump.fleet_toml().replace(f'known_hosts = "{jump.known_hosts}"', f'known_hosts = "{known}"')
    fleet = load_fleet(write_fleet(tmp_path, text))
    client = FleetClient(fleet, {"ssh": transport()})
    try:
        with pytest.raises(HostKeyChanged) as err:
            await client.connect(fleet.node("inner1"))
    finally:
        await client.close()
    msg = str(err.value)
    assert msg.startswith(f"node inner1: bastion 'bastion': HOST KEY CHANGED for {b.ip}"), msg
    assert f"{known} line 1" in msg and (err.value.path, err.value.line) == (str(known), 1)

    known.write_text(host_key_line(i1.ip, i1.dir / "host_ed25519.pub"))  # the bastion: not known at all
    client = FleetClient(fleet, {"ssh": transport()})
    try:
        with pytest.raises(HostKeyUnknown) as err:
            await client.connect(fleet.node("inner1"))
    finally:
        await client.close()
    assert str(err.value).startswith(f"node inner1: bastion 'bastion': host key of {b.ip} is not known"), err.value

    # the bastion known, the inner node's key changed: the second hop is checked too
    known.write_text(host_key_line(b.ip, b.dir / "host_ed25519.pub") +
                     host_key_line(i1.ip, impostor.with_suffix(".pub")))
    client = FleetClient(fleet, {"ssh": transport()})
    try:
        with pytest.raises(HostKeyChanged) as err:
            await client.connect(fleet.node("inner1"))
    finally:
        await client.close()
    assert str(err.value).startswith(f"node inner1: HOST KEY CHANGED for {i1.ip}"), err.value
    assert err.value.line == 2


# ---------------------------------------------------------------- host certificates (loopback sshd)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA, and sshds whose host keys it signed: valid, expired, for another principal."""
    d = tmp_path_factory.mktemp("certs")
    d.chmod(0o700)
    ca, other_ca = keygen(d / "ca"), keygen(d / "other_ca")
    key = keygen(d / "client_ed25519")
    (d / "authorized_keys").write_text((d / "client_ed25519.pub").read_text())
    servers = {
        "valid": Sshd(d / "valid", d / "authorized_keys", ca=ca),
        "expired": Sshd(d / "expired", d / "authorized_keys", ca=ca, validity="20200101:20200201"),
        "elsewhere": Sshd(d / "elsewhere", d / "authorized_keys", ca=ca, principals="gpu7.example.com"),
    }
    try:
        yield d, ca, other_ca, key, servers
    finally:
        for s in servers.values():
            s.stop()


def cert_fleet(tmp_path: Path, server: Sshd, key: Path, known: Path) -> Path:
    return write_fleet(tmp_path, f"""
[[nodes]]
name = "signed"
host = "127.0.0.1"
port = {server.port}
user = "{getpass.getuser()}"
identity = "{key}"
known_hosts = "{known}"
python = "{node_python(tmp_path / 'python')}"
home = "{tmp_path / 'home'}"
interval = 0.5
nvml = false
""")


def ca_line(ca: Path, patterns: str = "[127.0.0.1]:*") -> str:
    keytype, blob = ca.with_suffix(".pub").read_text().split()[:2]
    return f"@cert-authority {patterns} {keytype} {blob}\n"


async def test_a_certificate_of_a_listed_ca_is_accepted(certs, tmp_path):
    d, ca, _, key, servers = certs
    known = tmp_path / "known_hosts"
    known.write_text("# only the CA: no line for the host itself\n" + ca_line(ca))
    fleet = load_fleet(cert_fleet(tmp_path, servers["valid"], key, known))
    assert (await hello_from(fleet, "signed")).node == "signed"
    assert known.read_text().count("\n") == 2  # nothing recorded


@pytest.mark.parametrize("case", ["unknown CA", "expired", "principal", "CA for other hosts"])
async def test_a_certificate_that_does_not_do_is_refused_saying_why(certs, tmp_path, case):
    d, ca, other_ca, key, servers = certs
    known = tmp_path / "known_hosts"
    server = {"expired": servers["expired"], "principal": servers["elsewhere"]}.get(case, servers["valid"])
    known.write_text({"unknown CA": ca_line(other_ca), "CA for other hosts": ca_line(ca, "*.example.com")}.get(
        case, ca_line(ca)))
    fleet = load_fleet(cert_fleet(tmp_path, server, key, known))
    expected = HostKeyUnknown if case == "CA for other hosts" else HostCertificateRefused
    with pytest.raises(expected) as err:
        await hello_from(fleet, "signed")
    msg, name = str(err.value), f"[127.0.0.1]:{server.port}"
    want = {
        "unknown CA": f"node signed: the host certificate of {name} is signed by an unknown CA (ssh-ed25519 SHA256:",
        "expired": f"node signed: the host certificate of {name} has expired (it is signed by the CA of {known} "
                   f"line 1",
        "principal": f"node signed: the host certificate of {name} does not name 127.0.0.1 among its principals",
        "CA for other hosts": f"node signed: host key of {name} is not known",
    }[case]
    assert msg.startswith(want), msg
    if case == "unknown CA":
        assert f"{known} line 1 lists SHA256:" in msg


# ---------------------------------------------------------------- another key type only


async def test_a_host_known_only_by_another_key_type_is_refused_with_the_host_key_message(certs, tmp_path):
    d, _, _, key, servers = certs
    server = servers["valid"]
    run("ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(tmp_path / "old_ecdsa"))
    known = tmp_path / "known_hosts"
    known.write_text("# the node's old key\n" + host_key_line(f"[127.0.0.1]:{server.port}",
                                                              tmp_path / "old_ecdsa.pub"))
    fleet = load_fleet(cert_fleet(tmp_path, server, key, known))
    with pytest.raises(HostKeyChanged) as err:
        await hello_from(fleet, "signed")
    msg = str(err.value)
    assert msg.startswith(f"node signed: HOST KEY TYPE CHANGED for [127.0.0.1]:{server.port}: it offers only "
                          f"ssh-ed25519"), msg
    assert f"{known} line 2 records ecdsa-sha2-nistp256 SHA256:" in msg, msg
    assert (err.value.path, err.value.line) == (str(known), 2)
    assert "reset" not in msg.lower()
