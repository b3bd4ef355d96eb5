"""The lost-node rule on a clock moved by hand: a node unreachable for ``[alerts] node_lost_s``
is lost, and only then does a job with ``on_node_lost = "move"`` move to a free spare
(console/moving.py lost_node_moves) or a job that stays say so (console/automove.py
LostNodeMover, the rule `gpudeck watch fleet` and the console run each second).

The wiring (real nodes in network namespaces, a real cut link, a real move) stays proven by
tests/test_move.py::test_watch_fleet_moves_a_lost_nodes_job_to_the_spare_after_node_lost_s."""

from __future__ import annotations

import asyncio

from gpudeck.console.automove import LostNodeMover
from gpudeck.console.moving import lost_node_moves
from gpudeck.console.placements import PlacementStore
from gpudeck.remote.client import AgentError, NodeDown, NodeUp
from gpudeck.remote.fleet import parse_fleet

from support.clock import FakeClock

FLEET = """
[alerts]
node_lost_s = 300

[[nodes]]
name = "node1"
host = "n1.example"

[[nodes]]
name = "node2"
host = "n2.example"
spare = true

[[jobs]]
name = "gen"
node = "node1"
command = ["x"]
on_node_lost = "move"

[[jobs]]
name = "keep"
node = "node1"
command = ["y"]
"""


def test_a_job_moves_to_the_spare_once_its_node_is_down_node_lost_s_and_not_before():
    fleet = parse_fleet(FLEET)
    down = {"node1": 1000.0}
    assert lost_node_moves(fleet, down, {"node2"}, 1299.9, fleet.alerts.node_lost_s) == []
    (move,) = lost_node_moves(fleet, down, {"node2"}, 1300.0, fleet.alerts.node_lost_s)
    assert (move.job, move.src, move.dest, move.lost_for_s) == ("gen", "node1", "node2", 300.0)
    assert lost_node_moves(fleet, down, set(), 5000.0, 300) == []  # no spare up: it waits
    assert lost_node_moves(fleet, down, {"node2"}, 5000.0, 300, running={"gen": "node2"}) == []  # moved already


class FakeClient:
    def __init__(self, fleet) -> None:
        self.fleet = fleet


def test_the_fleet_watch_says_a_staying_job_stays_once_the_clock_passes_node_lost_s(tmp_path):
    fleet = parse_fleet(FLEET.replace('on_node_lost = "move"', 'on_node_lost = "stay"'), str(tmp_path / "f.toml"))
    clock = FakeClock()
    mover = LostNodeMover(FakeClient(fleet), store=PlacementStore(tmp_path / "placements.json"), clock=clock.time,
                          tell_stays=True)
    mover.nodes("node2", NodeUp(node="node2", hello=None))
    mover.nodes("node1", NodeDown(node="node1", error=AgentError("node1", "connection refused"),
                                  since=clock.time(), retry_in_s=1.0))
    said: list[str] = []
    clock.advance(299.9)
    assert asyncio.run(mover.round(said.append)) == [] and said == []
    clock.advance(0.1)
    asyncio.run(mover.round(said.append))
    assert said == ['node node1 lost: gen stays (on_node_lost = "stay")',
                    'node node1 lost: keep stays (on_node_lost = "stay")']
    clock.advance(60)
    asyncio.run(mover.round(said.append))
    assert len(said) == 2  # once per outage


def test_a_node_whose_agent_fails_is_never_lost_its_outage_counts_from_when_it_stops_answering(tmp_path):
    """A node that answers over SSH and whose agent would not serve (another version after an
    upgrade of the console, a home it refuses) still runs its jobs: moving them would fence them
    for nothing. Its outage, should it stop answering, counts from then."""
    from gpudeck.remote.client import AgentFailed

    fleet = parse_fleet(FLEET, str(tmp_path / "f.toml"))
    clock = FakeClock()
    mover = LostNodeMover(FakeClient(fleet), store=PlacementStore(tmp_path / "placements.json"), clock=clock.time,
                          tell_stays=True)
    mover.nodes("node2", NodeUp(node="node2", hello=None))
    failed = AgentFailed("node1", "agent version 0.0.1 (protocol 1) does not match the console's")
    mover.nodes("node1", NodeDown(node="node1", error=failed, since=clock.time(), retry_in_s=1.0))
    said: list[str] = []
    clock.advance(3600)
    mover.nodes("node1", NodeDown(node="node1", error=failed, since=clock.time() - 3600, retry_in_s=1.0))
    assert asyncio.run(mover.round(said.append)) == [] and said == []
    assert "node1" not in mover.nodes.down_since
    # now it stops answering: lost node_lost_s later, not at once for the hour its agent failed
    mover.nodes("node1", NodeDown(node="node1", error=AgentError("node1", "connection refused"),
                                  since=clock.time() - 3600, retry_in_s=1.0))
    assert mover.nodes.down_since["node1"] == clock.time()


def test_an_agent_that_says_nothing_counts_as_down_for_node_lost_s(tmp_path):
    """No hello at all (a machine hung behind a working sshd, say): nothing says its jobs run,
    so the node is lost after node_lost_s as one that does not answer."""
    from gpudeck.remote.client import AgentFailed

    fleet = parse_fleet(FLEET, str(tmp_path / "f.toml"))
    clock = FakeClock()
    mover = LostNodeMover(FakeClient(fleet), store=PlacementStore(tmp_path / "placements.json"), clock=clock.time)
    silent = AgentFailed("node1", "the agent sent no hello within 10 s")
    silent.silent = True
    mover.nodes("node1", NodeDown(node="node1", error=silent, since=clock.time(), retry_in_s=1.0))
    assert mover.nodes.down_since["node1"] == clock.time()

