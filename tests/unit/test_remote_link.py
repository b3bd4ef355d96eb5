"""remote/: the typed node errors, the transport factory, and where each name is importable."""

from __future__ import annotations

import asyncio

import pytest

from gpudeck.agents.contract import ops
from gpudeck.remote import client, link, local, ssh, ssh_errors, transports
from gpudeck.remote.fleet import Node, parse_fleet
from gpudeck.remote.link import AgentError, NodeError, RequestFailed, VersionMismatch


def test_a_node_error_reads_node_colon_reason():
    err = AgentError("gpu-a", "link lost: reset by peer")
    assert isinstance(err, NodeError)
    assert (err.node, err.reason, str(err)) == ("gpu-a", "link lost: reset by peer",
                                                "node gpu-a: link lost: reset by peer")


def test_subclasses_keep_the_form():
    err = VersionMismatch("old", "0.0.1", 1)
    assert str(err) == f"node old: {err.reason}" and err.reason.startswith("agent version 0.0.1 (protocol 1)")
    changed = ssh_errors.HostKeyChanged("n", "HOST KEY CHANGED for n", "/k", 3)
    assert (str(changed), changed.path, changed.line) == ("node n: HOST KEY CHANGED for n", "/k", 3)
    for cls in (ssh_errors.SshError, ssh_errors.ConnectFailed, ssh_errors.AuthFailed, ssh_errors.HostKeyError,
                ssh_errors.HostKeyUnknown, ssh_errors.AgentStartFailed):
        assert issubclass(cls, AgentError)


def test_a_refused_request_is_the_agents_reason_alone():
    err = RequestFailed("gpu-a", "kill", "no job 'x'")
    assert (str(err), err.reason, err.node, err.op) == ("no job 'x'", "no job 'x'", "gpu-a", "kill")
    assert not isinstance(err, NodeError)


def test_the_old_names_stay_importable():
    for name in ("AgentError", "VersionMismatch", "RequestFailed", "LINE_LIMIT", "AgentLink", "Transport",
                 "NodeError"):
        assert getattr(client, name) is getattr(link, name)
    for name in ("SshError", "ConnectFailed", "AuthFailed", "HostKeyError", "HostKeyUnknown", "HostKeyChanged",
                 "AgentStartFailed"):
        assert getattr(ssh, name) is getattr(ssh_errors, name)
    assert local.agent_argv is link.agent_argv


def test_the_factory_picks_the_transport_by_host():
    held: dict = {}
    assert isinstance(transports.transport_for(Node("local"), held), local.LocalTransport)
    remote = transports.transport_for(Node("gpu-a", host="gpu-a"), held)
    assert isinstance(remote, ssh.SshTransport)
    assert transports.transport_for(Node("gpu-b", host="10.0.0.2"), held) is remote  # one per kind
    assert set(held) == {"local", "ssh"}
    given = object()
    assert transports.transport_for(Node("gpu-c", host="h"), {"ssh": given}) is given
    with pytest.raises(ValueError):
        transports.new_transport("carrier-pigeon")


def test_a_job_on_a_down_node_says_why_once():
    fleet = parse_fleet('[[nodes]]\nname = "gpu-a"\n[[jobs]]\nname = "j"\nnode = "gpu-a"\ncommand = "true"\n')
    fc = client.FleetClient(fleet)
    with pytest.raises(AgentError) as err:
        asyncio.run(fc.request(ops.Launch(job="j"), connect=False))
    assert (str(err.value), err.value.reason) == ("node gpu-a: not connected", "not connected")

    class Down:
        async def open(self, node):
            raise ssh_errors.AuthFailed(node.name, "authentication failed for user u")

    fc = client.FleetClient(fleet, {"ssh": Down()})
    asyncio.run(fc.connect_all())
    assert str(fc.errors["gpu-a"][0]) == "node gpu-a: authentication failed for user u"
    with pytest.raises(AgentError) as err:
        asyncio.run(fc.request(ops.Launch(job="j"), connect=False))
    assert str(err.value) == "node gpu-a: authentication failed for user u"


def test_the_hello_waits_the_nodes_hello_timeout_s_or_a_larger_command_timeout():
    slow = Node("nfs", hello_timeout_s=40.0)
    assert client.hello_timeout(slow) == 40.0
    assert client.hello_timeout(slow, 15.0) == 40.0  # `status --timeout 15` never shortens it
    assert client.hello_timeout(Node("fast", hello_timeout_s=1.0), 10.0) == 10.0  # nor does the key shorten a command's


def test_a_hello_that_does_not_come_names_the_key_to_raise():
    async def run() -> str:
        reader = asyncio.StreamReader()  # an agent that never speaks

        async def close() -> None:
            pass

        lnk = link.AgentLink(Node("nfs", hello_timeout_s=0.1), reader, writer=None, close=close)
        with pytest.raises(AgentError) as err:
            await lnk.start()
        return str(err.value)

    assert asyncio.run(run()) == ("node nfs: the agent sent no hello within 0.1 s; raise `hello_timeout_s` for node "
                                  "nfs in the fleet file")
