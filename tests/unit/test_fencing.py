"""The fencing rule (agents/contract/fencing.py, agents/workers/common/fence.py), the console's
placements of moved jobs and the automatic move's choice of a spare: no processes."""

from __future__ import annotations

import pytest

from gpudeck.agents.contract.fencing import (AttemptIdError, attempt_from_env, is_held, is_newer, keep_hold, new_attempt_id,
                                             parse_attempt_id, refusal)
from gpudeck.agents.workers.common.fence import Fence, Fenced, FileStore
from gpudeck.agents.workers.common.s3sync.uploader import ShardUploader
from gpudeck.agents.workers.common.s3sync.remote import S3Location
from gpudeck.console.moving import MoveRefused, check_move, lost_node_moves
from gpudeck.console.placements import Placement, PlacementStore, apply
from gpudeck.remote.fleet import parse_fleet


class MemStore:
    where = "mem://_attempt"

    def __init__(self, value=None, fail=False):
        self.value, self.fail, self.reads = value, fail, 0

    def read(self):
        self.reads += 1
        if self.fail:
            raise OSError("network is unreachable")
        return self.value

    def write(self, value):
        self.value = value


def test_ids_order_by_time_and_a_newer_one_fences_an_older_one():
    old, new = new_attempt_id("gpu1", now=1000.0), new_attempt_id("gpu2", now=1000.5)
    assert parse_attempt_id(old)[:2] == (1000000, "gpu1")
    assert is_newer(new, old) and not is_newer(old, new)
    assert not is_newer(old, old) and not is_newer(None, old) and not is_newer("", old)
    assert not is_newer("garbage", old)  # fences nobody: the next start writes over it
    # far apart in time, the text order is still the time order (zero-padded milliseconds)
    assert is_newer(new_attempt_id("a", now=10_000_000_000.0), new_attempt_id("z", now=9.0))
    with pytest.raises(AttemptIdError, match="not an attempt id"):
        parse_attempt_id("123-gpu1")


def test_claim_writes_the_id_and_a_stale_attempt_stops_before_writing():
    store = MemStore()
    new = Fence(store, new_attempt_id("gpu2", now=2000.0))
    new.claim()
    assert store.value == new.attempt_id
    stale = Fence(store, new_attempt_id("gpu1", now=1000.0))  # restarted on the node it was moved off
    with pytest.raises(Fenced, match="newer than this one"):
        stale.claim()
    assert store.value == new.attempt_id  # not overwritten


def test_an_id_made_here_never_takes_back_a_job_another_node_holds_since_a_move(tmp_path, monkeypatch):
    """Only a move fences another node: a worker that made its own id (a restart on the node the
    job left) is refused by any move's id of another node, however old; one of its own node's goes on.
    The refusal says where the job went and when; the claim then removes no marker of theirs."""
    moved = new_attempt_id("gpu2", now=1000.0, moved=True)  # the move's id, older than any clock reading now
    store = MemStore(moved)
    restart = Fence(store, new_attempt_id("gpu1"), given=False)
    with pytest.raises(Fenced, match="the job moved to node gpu2 at 1970-01-01 00:16:40 UTC"):
        restart.claim()
    assert store.value == moved  # not overwritten
    assert refusal(moved, new_attempt_id("gpu1"), given=False) is not None
    assert refusal(new_attempt_id("gpu1", now=1000.0), new_attempt_id("gpu1"), given=False) is None  # its own node
    assert refusal(None, new_attempt_id("gpu1"), given=False) is None and refusal("garbage", moved, False) is None
    # an id handed over by a move is refused only by a newer one
    assert refusal(new_attempt_id("gpu1", now=500.0), moved, given=True) is None
    assert "gpu3" in refusal(new_attempt_id("gpu3", now=2000.0), moved, given=True)
    assert "a newer attempt on node gpu3 took the output over" in refusal(new_attempt_id("gpu3", now=2000.0), moved,
                                                                          given=True)  # gpu3's own launch: no move
    # the worker's own id is named for $GPUDECK_NODE (the fleet file's name, which a move uses too)
    monkeypatch.delenv("GPUDECK_ATTEMPT_ID", raising=False)
    monkeypatch.setenv("GPUDECK_NODE", "gpu1")
    made, given = attempt_from_env()
    assert parse_attempt_id(made)[1] == "gpu1" and not given
    monkeypatch.setenv("GPUDECK_ATTEMPT_ID", moved)
    assert attempt_from_env() == (moved, True)
    # the claim that goes through removes the last run's marker, after its id is written
    order = []
    mem = MemStore(new_attempt_id("gpu1", now=1000.0))
    mem.write = lambda v: order.append(("id", v))
    Fence(mem, made, given=False, on_claim=lambda: order.append(("markers", None))).claim()
    assert [k for k, _ in order] == ["id", "markers"]


def test_an_id_no_move_made_is_no_move_and_a_restart_where_the_job_was_moved_keeps_the_hold():
    """`plan generate` run by hand on the node (its id named for the host) or a launch on another
    node leave an unmarked id: a job of the fleet that starts after it takes the output over, and
    nothing says the job "moved". A worker on the node a move placed the job on, making its own
    id (a launch without the move's id), keeps the hold: its id is marked too, so the node the
    job left still cannot take it back."""
    pilot = new_attempt_id("vm", now=1000.0)  # plan generate, GPUDECK_NODE unset: the host's name
    assert not is_held(pilot) and refusal(pilot, new_attempt_id("gpu"), given=False) is None
    store = MemStore(pilot)
    launch = Fence(store, new_attempt_id("gpu"), given=False)
    launch.claim()
    assert store.value == launch.attempt_id and not is_held(launch.attempt_id)
    # a move to gpu2, then gpu2's own restart without the move's id: held, and gpu1 is refused
    moved = new_attempt_id("gpu2", now=2000.0, moved=True)
    assert is_held(moved) and parse_attempt_id(moved)[1] == "gpu2"
    store = MemStore(moved)
    restart = Fence(store, new_attempt_id("gpu2"), given=False)
    restart.claim()
    assert is_held(store.value) and store.value == restart.attempt_id and is_newer(store.value, moved)
    with pytest.raises(Fenced, match="the job moved to node gpu2"):
        Fence(store, new_attempt_id("gpu1"), given=False).claim()
    assert keep_hold(pilot, new_attempt_id("gpu")).endswith("-m") is False


def test_check_raises_once_a_newer_attempt_claimed_and_stays_fenced():
    store = MemStore()
    old = Fence(store, new_attempt_id("gpu1", now=1000.0), interval_s=3600)
    old.claim()
    old.check()  # its own id: goes on
    Fence(store, new_attempt_id("gpu2", now=2000.0)).claim()
    old.check_due()  # not due yet: no read
    with pytest.raises(Fenced) as caught:
        old.check()
    assert "gpu2" in str(caught.value) and old.fenced is caught.value
    store.value = old.attempt_id  # even if the id were put back, the attempt stays stopped
    with pytest.raises(Fenced):
        old.check_due()


def test_a_read_that_fails_fences_nobody():
    store = MemStore()
    f = Fence(store, new_attempt_id("gpu1", now=1000.0))
    f.claim()
    store.fail = True
    f.check()  # cut off: goes on (it cannot send anything either)
    assert f.fenced is None


def test_file_store_round_trip(tmp_path):
    store = FileStore(str(tmp_path))
    assert store.read() is None
    Fence(store, new_attempt_id("n", now=5.0)).claim()
    assert (tmp_path / "_attempt").read_text().strip() == store.read()


class FakeClient:
    def __init__(self):
        self.uploads, self.puts = [], []

    def upload_file(self, path, bucket, key):
        self.uploads.append(key)

    def put_object(self, Bucket, Key, Body):
        self.puts.append(Key)


def test_a_fenced_uploader_sends_no_shard_and_no_done_set(tmp_path):
    (tmp_path / "shard-000000.jsonl").write_text('{"id": "a"}\n')
    store = MemStore()
    fence = Fence(store, new_attempt_id("gpu1", now=1000.0))
    fence.claim()
    Fence(store, new_attempt_id("gpu2", now=2000.0)).claim()  # the move happened meanwhile
    client = FakeClient()
    up = ShardUploader(str(tmp_path), S3Location("b", "p"), ids_of=lambda n: ["a"], client_factory=lambda: client,
                       fence=fence)
    up.submit("shard-000000.jsonl", ["a"])
    up._run()  # the thread's body, here: it returns once fenced
    assert client.uploads == [] and client.puts == []
    assert up.fenced is not None and up.drain(timeout=0) is False
    assert "fenced" in (up.status().last_error or "")


def test_an_unfenced_uploader_sends_the_shard_then_the_done_set(tmp_path):
    (tmp_path / "shard-000000.jsonl").write_text('{"id": "a"}\n')
    fence = Fence(MemStore(), new_attempt_id("gpu1", now=1000.0))
    fence.claim()
    client = FakeClient()
    up = ShardUploader(str(tmp_path), S3Location("b", "p"), ids_of=lambda n: ["a"], client_factory=lambda: client,
                       fence=fence)
    up.start()
    up.submit("shard-000000.jsonl", ["a"])
    assert up.drain(timeout=30)
    up.stop()
    assert client.uploads == ["p/shard-000000.jsonl"] and client.puts[:1] == ["p/done.txt"]


FLEET = """
[alerts]
node_lost_s = 60
[[nodes]]
name = "gpu1"
[[nodes]]
name = "gpu2"
[[nodes]]
name = "spare1"
spare = true
[[nodes]]
name = "spare2"
spare = true
[[jobs]]
name = "gen"
node = "gpu1"
command = "sleep 1"
on_node_lost = "move"
[[jobs]]
name = "gen2"
node = "gpu2"
command = "sleep 1"
on_node_lost = "move"
[[jobs]]
name = "server"
node = "gpu1"
command = "sleep 1"
"""


def test_placements_apply_while_the_fleet_file_names_the_old_node(tmp_path):
    fleet = parse_fleet(FLEET, str(tmp_path / "fleet.toml"))
    store = PlacementStore(tmp_path / "placements.json")
    place = Placement(node="spare1", fleet_node="gpu1", moved_from="gpu1", attempt_id=new_attempt_id("spare1"), at=1.0)
    store.record(fleet.path, "gen", place)
    moved = apply(fleet, store.of(fleet.path))
    gen = moved.job("gen")
    assert gen.node == "spare1" and gen.env["GPUDECK_ATTEMPT_ID"] == place.attempt_id
    assert moved.job("server").node == "gpu1"
    # the operator edits the file to say gpu2: the file wins
    edited = parse_fleet(FLEET.replace('name = "gen"\nnode = "gpu1"', 'name = "gen"\nnode = "gpu2"'), fleet.path)
    assert apply(edited, store.of(fleet.path)).job("gen").node == "gpu2"


def test_a_broken_placements_file_is_ignored_with_a_warning(tmp_path):
    path = tmp_path / "placements.json"
    path.write_text("{not json")
    store = PlacementStore(path)
    assert store.of("/x/fleet.toml") == {} and "cannot be read" in store.warning


def test_move_is_checked_before_anything_is_sent(tmp_path):
    fleet = parse_fleet(FLEET, str(tmp_path / "fleet.toml"))
    with pytest.raises(MoveRefused, match="already on node 'gpu1'"):
        check_move(fleet, "gen", "gpu1")
    with pytest.raises(Exception, match="unknown node 'nope'"):
        check_move(fleet, "gen", "nope")
    assert check_move(fleet, "gen", "spare1").name == "gen"


def test_lost_node_jobs_move_to_free_spares_after_node_lost_s(tmp_path):
    fleet = parse_fleet(FLEET, str(tmp_path / "fleet.toml"))
    up = {"spare1", "spare2", "gpu2"}
    # lost 30 s: not yet
    assert lost_node_moves(fleet, {"gpu1": 970.0}, up, 1000.0, 60.0) == []
    moves = lost_node_moves(fleet, {"gpu1": 900.0, "gpu2": 900.0}, up, 1000.0, 60.0)
    # "server" stays (no on_node_lost = "move"); each job gets its own spare
    assert [(m.job, m.src, m.dest) for m in moves] == [("gen", "gpu1", "spare1"), ("gen2", "gpu2", "spare2")]
    # a spare that is down, or already holds a job, is not a place to go
    moved = apply(fleet, {"gen": Placement("spare1", "gpu1", "gpu1", new_attempt_id("spare1"), 1.0)})
    assert [(m.job, m.dest) for m in lost_node_moves(moved, {"gpu2": 900.0}, {"spare1"}, 1000.0, 60.0)] == []
    assert [(m.job, m.dest) for m in lost_node_moves(moved, {"gpu2": 900.0}, up, 1000.0, 60.0)] == [("gen2", "spare2")]


def test_on_node_lost_must_be_stay_or_move(tmp_path):
    with pytest.raises(Exception, match="'on_node_lost' must be one of stay, move"):
        parse_fleet(FLEET.replace('on_node_lost = "move"\n[[jobs]]\nname = "gen2"', 'on_node_lost = "go"\n[[jobs]]\n'
                                  'name = "gen2"'), "f.toml")


def test_an_id_not_written_at_start_is_written_before_the_first_upload(tmp_path):
    (tmp_path / "shard-000000.jsonl").write_text('{"id": "a"}\n')
    store = MemStore(fail=True)  # S3 down at the start: the worker starts all the same
    fence = Fence(store, new_attempt_id("gpu1", now=1000.0), interval_s=0)
    with pytest.raises(OSError):
        fence.claim()
    store.fail = False
    client = FakeClient()
    up = ShardUploader(str(tmp_path), S3Location("b", "p"), ids_of=lambda n: ["a"], client_factory=lambda: client,
                       fence=fence)
    up.start()
    up.submit("shard-000000.jsonl", ["a"])
    assert up.drain(timeout=30)
    up.stop()
    assert store.value == fence.attempt_id and client.uploads == ["p/shard-000000.jsonl"]


def test_the_move_key_asks_first_and_is_refused_without_a_free_spare(tmp_path):
    from gpudeck.console.actions import Confirm, JobOp, Refuse, plan_job_action
    from gpudeck.console.moving import spare_for

    fleet = parse_fleet(FLEET, str(tmp_path / "fleet.toml"))
    assert JobOp.MOVE.key == "m" and spare_for(fleet, "gen") == "spare1"
    plan = plan_job_action(JobOp.MOVE, "gen", None, read_only=False, grace_s=10, dest=spare_for(fleet, "gen"))
    assert isinstance(plan, Confirm) and "spare node [b]spare1[/b]" in plan.question
    full = apply(fleet, {"gen": Placement("spare1", "gpu1", "gpu1", new_attempt_id("spare1"), 1.0),
                         "gen2": Placement("spare2", "gpu2", "gpu2", new_attempt_id("spare2"), 1.0)})
    plan = plan_job_action(JobOp.MOVE, "server", None, read_only=False, grace_s=10, dest=spare_for(full, "server"))
    assert isinstance(plan, Refuse) and "gpudeck move server --to NODE" in plan.message
    assert isinstance(plan_job_action(JobOp.MOVE, "gen", None, read_only=True, grace_s=10, dest="spare1"), Refuse)


# ---------------------------------------------------------------- two watchers, one job


def test_a_job_alive_on_another_node_is_not_moved_again_and_that_spare_is_not_free(tmp_path):
    fleet = parse_fleet(FLEET, str(tmp_path / "fleet.toml"))
    up = {"spare1", "spare2", "gpu2"}
    # another watcher (say, a console on another laptop) moved gen to spare1: the nodes say so
    moves = lost_node_moves(fleet, {"gpu1": 900.0, "gpu2": 900.0}, up, 1000.0, 60.0, running={"gen": "spare1"})
    assert [(m.job, m.dest) for m in moves] == [("gen2", "spare2")]
    # alive on its own node (a snapshot from before the outage): moved as before
    moves = lost_node_moves(fleet, {"gpu1": 900.0}, up, 1000.0, 60.0, running={"gen": "gpu1"})
    assert [(m.job, m.dest) for m in moves] == [("gen", "spare1")]


def test_a_placement_recorded_meanwhile_refuses_the_second_record(tmp_path):
    from gpudeck.console.placements import PlacementConflict, conflicting

    path = str(tmp_path / "fleet.toml")
    store = PlacementStore(tmp_path / "placements.json")
    first = Placement("spare1", "gpu1", "gpu1", new_attempt_id("spare1", now=1000.0), 1000.0)
    store.claim(path, "gen", first, "gpu1", None)  # nothing placed yet: taken
    # a second gpudeck that read the fleet before that record (gen on gpu1, no placement) loses
    second = Placement("spare2", "gpu1", "gpu1", new_attempt_id("spare2", now=1001.0), 1001.0)
    with pytest.raises(PlacementConflict, match="was moved to spare1 at .* by another gpudeck of this machine"):
        store.claim(path, "gen", second, "gpu1", None)
    assert store.of(path)["gen"] == first
    # one that read the first placement may move the job on (spare1 lost in its turn)
    third = Placement("spare2", "gpu1", "spare1", new_attempt_id("spare2", now=1002.0), 1002.0)
    store.claim(path, "gen", third, "spare1", first.attempt_id)
    assert store.of(path)["gen"] == third
    # a placement that no longer holds (the fleet file now names another node) is no conflict
    assert not conflicting(third, "gpu2", None)
    assert conflicting(third, "spare1", first.attempt_id) and not conflicting(None, "gpu1", None)


def test_the_mover_takes_moves_another_gpudeck_recorded_and_says_the_new_ones(tmp_path):
    from types import SimpleNamespace

    from gpudeck.console.automove import LostNodeMover

    fleet = parse_fleet(FLEET, str(tmp_path / "fleet.toml"))
    store = PlacementStore(tmp_path / "placements.json")
    store.record(fleet.path, "gen2", Placement("spare2", "gpu2", "gpu2", new_attempt_id("spare2", now=10.0), 10.0))
    client = SimpleNamespace(fleet=fleet)  # catch_up reads and replaces the fleet as it runs, nothing else
    mover = LostNodeMover(client, store=store, clock=lambda: 1000.0)
    assert mover.catch_up() == []  # an old move: taken silently
    assert client.fleet.job("gen2").node == "spare2"
    place = Placement("spare1", "gpu1", "gpu1", new_attempt_id("spare1", now=1001.0), 1001.0)
    store.record(fleet.path, "gen", place)
    assert mover.catch_up() == [f"gen was moved to spare1 by another gpudeck of this machine (attempt id "
                                f"{place.attempt_id})"]
    assert client.fleet.job("gen").node == "spare1" and client.fleet.job("gen").env["GPUDECK_ATTEMPT_ID"] == \
        place.attempt_id
    assert mover.catch_up() == []
    # gpu1 lost long ago: gen runs on spare1 now, so nothing is left to move
    mover.nodes.up, mover.nodes.down_since = {"spare1", "spare2", "gpu2"}, {"gpu1": 1.0}
    assert lost_node_moves(client.fleet, mover.nodes.down_since, mover.nodes.up, 1000.0, 60.0, mover.running()) == []


def test_a_read_only_or_unconnected_console_moves_nothing(tmp_path):
    from gpudeck.console.app import make_app

    fleet = parse_fleet(FLEET, str(tmp_path / "fleet.toml"))
    assert make_app(fleet).mover is not None  # the console moves lost nodes' jobs, as watch fleet does
    assert make_app(fleet, read_only=True).mover is None
    assert make_app(fleet, auto_move=False).mover is None  # gpudeck up --no-auto-move
    assert make_app(fleet, connect=False).mover is None


async def test_a_lost_nodes_staying_job_is_told_once_and_only_where_some_job_moves(tmp_path):
    from types import SimpleNamespace

    from gpudeck.console.automove import LostNodeMover

    def lost_gpu1(text: str) -> tuple[LostNodeMover, list[str]]:
        fleet = parse_fleet(text, str(tmp_path / "fleet.toml"))
        mover = LostNodeMover(SimpleNamespace(fleet=fleet), store=PlacementStore(tmp_path / "p.json"),
                              clock=lambda: 1000.0)
        # gpu1 lost long ago; no spare up: nothing can move, so the round sends nothing anywhere
        mover.nodes.up, mover.nodes.down_since = {"gpu2"}, {"gpu1": 1.0}
        return mover, []

    mover, said = lost_gpu1(FLEET)
    for _ in range(2):
        assert await mover.round(said.append) == []
    assert said == ['node gpu1 lost: server stays (on_node_lost = "stay")']
    # a fleet that never asked for moves: the console says nothing of them (watch fleet does)
    mover, said = lost_gpu1(FLEET.replace('on_node_lost = "move"', 'on_node_lost = "stay"'))
    assert await mover.round(said.append) == [] and said == []
    mover.tell_stays = True
    await mover.round(said.append)
    assert sorted(said) == [f'node gpu1 lost: {j} stays (on_node_lost = "stay")' for j in ("gen", "server")]
