"""Notifications from the agent: a receiver that hangs, then refuses, then takes them. Every
message arrives, in order, none twice, and the agent's tick never waits for the receiver."""

from __future__ import annotations

import time

import pytest

from support import command_job
from support.watch import TOKEN, Receiver, events, tick_times
from support.wait import wait_for

pytestmark = pytest.mark.system  # a real agent and a webhook receiver


def test_a_receiver_down_for_a_while_gets_every_message_in_order_and_the_tick_never_slows(home, start_agent,
                                                                                        reap_jobs):
    rx = Receiver()
    rx.mode = "hang"  # takes the request and never answers: each attempt waits out the client's timeout
    try:
        # a 5 s notify deadline rather than 15 s: the hang is waited out once, not for 15 s
        a = start_agent(interval=0.2, env={"GPUDECK_NOTIFY_DEADLINE_S": "5"})
        jobs = [command_job(f"j{i}", f"sleep {0.3 * i}; exit {i + 1}") for i in range(6)]
        a.ok("configure", jobs=jobs, watch={"notify": [{"url": rx.url, "events": ["died"]}]})
        for j in jobs:
            a.ok("launch", job=j["name"])
        died = lambda: [e for e in events(home) if e["kind"] == "died"]  # noqa: E731
        wait_for(lambda: len(died()) == 6, 60, what="six jobs to die")
        wait_for(lambda: rx.raw, 60, what="a first attempt on the hanging receiver")
        hang_from = time.time()  # the sender is stuck on that attempt until its deadline
        wait_for(lambda: len(rx.raw) >= 2, 60, what="two attempts on the hanging receiver")  # >= one deadline
        hang_to = time.time()
        rx.mode = "down"
        rx._release.set()
        n = len(rx.raw)
        wait_for(lambda: len(rx.raw) > n, 60, what="an attempt refused with 503")
        assert not rx.messages
        pending = list((home / "outbox").glob("*.json"))
        assert len(pending) == 6 and all(TOKEN not in p.read_text() for p in pending)
        # the sender notes the 503 once it has read it, a moment after the receiver counted the request
        status = wait_for(lambda: (s := a.ok("watch"))["outbox"]["targets"] and
                          "503" in (s["outbox"]["targets"][0]["failing"] or "") and s, 30, what="the 503 noted")
        assert status["outbox"]["pending"] == 6
        rx.mode = "up"
        rx.wait(lambda ms: len(ms) == 6, 120, what="every message")
        seqs = [m["seq"] for m in rx.messages]
        assert seqs == sorted(seqs) == [e["seq"] for e in died()], "out of order"
        assert len({m["id"] for m in rx.messages}) == 6 and sorted(m["job"] for m in rx.messages) == \
            [f"j{i}" for i in range(6)]
        wait_for(lambda: not list((home / "outbox").glob("*.json")), 10, what="an empty outbox")
        # the tick never waits for a sender: while the sender sat on the hanging receiver (a
        # deadline of 5 s, then a 1 s backoff), the agent went on ticking (at 0.2 s: ~30 ticks; a
        # tick that waited on the sender would make none). Counted, not timed: a busy machine slows both alike.
        ticks = tick_times(home)
        during = [t for t in ticks if hang_from <= t <= hang_to]
        assert len(during) >= 10, f"{len(during)} ticks in the {hang_to - hang_from:.1f} s the sender was stuck"
        failed = [e for e in events(home) if e["kind"] == "notify_failed"]
        assert failed and all(TOKEN not in e["message"] for e in failed)
        assert TOKEN not in "".join(a.stderr)
    finally:
        rx.stop()


def test_a_console_that_keeps_running_sends_node_unreachable_and_resolved(tmp_path):
    """`gpudeck watch status --follow`: a node that does not answer (nothing listens on its SSH
    port) is notified once after --unreachable-after; the URL comes from the console's env."""
    import subprocess
    import sys

    from support import ROOT, env_with_repo
    from support.watch import free_port

    rx = Receiver()
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[[nodes]]\nname = "ghost"\nhost = "127.0.0.1"\nport = {free_port()}\nconnect_timeout = 1\n'
                     f'[[notify]]\nurl_env = "HOOK"\nformat = "ntfy"\nevents = ["node_unreachable"]\n')
    proc = subprocess.Popen([sys.executable, "-m", "gpudeck.console", "watch", "status", "-f", str(fleet), "--follow",
                             "--unreachable-after", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT, env=env_with_repo({"HOOK": rx.url}))
    try:
        rx.wait(lambda ms: len(ms) == 1, 60, what="node_unreachable")
        (msg,) = rx.messages
        assert msg["headers"]["Title"] == "gpudeck ghost: node_unreachable" and "unreachable for" in msg["text"]
    finally:
        proc.terminate()
        out = proc.communicate(timeout=20)[0]
        rx.stop()
    assert "ghost: unreachable" in out and "node_unreachable" in out and TOKEN not in out


def _event(kind: str, job: str, seq: int) -> dict:
    return {"kind": kind, "node": "n1", "job": job, "message": f"{job} {kind}", "t": time.time(), "seq": seq}


def test_an_agent_that_goes_lets_its_message_under_way_be_taken_so_the_next_does_not_send_it_again(tmp_path):
    """Each time the last console leaves, the detached watcher takes the node over from the
    console's agent (a SIGTERM: Agent.on_takeover). A message that agent had under way is
    answered and removed before it exits, so the watcher, reading the same outbox, does not
    send it again; one cut off by the bound stays, and goes again with its id."""
    from gpudeck.agents.contract.watching import NotifyTarget
    from gpudeck.agents.watch.outbox import Outbox

    rx = Receiver()
    rx.delay_s = 1.0  # the receiver has the message a second before it answers
    target = NotifyTarget(url=rx.url)
    going = Outbox(tmp_path / "a")
    going.serve([target])
    going.put([target], _event("died", "boom", 1))
    wait_for(lambda: len(rx.raw) == 1, 30, what="the message under way")
    assert going.quiesce(timeout_s=30.0), "the sender was still running"
    assert going.pending() == []
    rx.delay_s = 0.0
    taking_over = Outbox(tmp_path / "a")
    taking_over.serve([target])
    taking_over.put([target], _event("restarted", "steady", 2))  # sent after anything older still pending
    rx.wait(lambda ms: len(ms) >= 2, 30, what="the taking-over agent's own message")
    assert rx.kinds() == ["died", "restarted"]
    taking_over.quiesce()

    rx.delay_s = 3.0  # answered later than the bound: cut off, kept, sent again with the same id
    cut = Outbox(tmp_path / "b")
    cut.serve([target])
    cut.put([target], _event("died", "late", 3))
    wait_for(lambda: len(rx.raw) == 3, 30, what="the second message under way")
    assert not cut.quiesce(timeout_s=0.2)
    assert len(cut.pending()) == 1
    rx.delay_s = 0.0
    again = Outbox(tmp_path / "b")
    again.serve([target])
    rx.wait(lambda ms: len(ms) >= 4, 30, what="the cut-off message, again")
    late = [m for m in rx.messages if m.get("job") == "late"]
    assert len(late) == 2 and late[0]["id"] == late[1]["id"]
    again.quiesce()
    rx.stop()
