"""The notify and heartbeat time rules on a clock moved by hand: the total deadline of one
request (agents/contract/http.py, 15 s for a notification, 10 s for a ping), the sender's
retry backoff (agents/watch/outbox.py), the heartbeat's /fail and how long a ping has been in
flight (agents/watch/heartbeat.py). httpx's MockTransport answers without a socket.

The wiring stays proven by system tests on a real watcher and real receivers:
tests/test_watch_hostile_receiver.py::test_a_hostile_receiver_neither_fills_the_watchers_memory_nor_holds_its_target
(the deadline cuts a dripping receiver and the next attempt follows),
tests/test_watch_notify.py::test_a_receiver_down_for_a_while_gets_every_message_in_order_and_the_tick_never_slows
(the backoff), tests/test_watch_heartbeat.py::test_pings_at_the_interval_fail_after_a_crash_loop_and_stop_with_the_watcher
(the pings and /fail)."""

from __future__ import annotations

import httpx
import pytest

from gpudeck.agents.contract.http import ANSWER_BYTES, request
from gpudeck.agents.contract.notify import DEADLINE_S
from gpudeck.agents.contract.watching import HeartbeatConfig
from gpudeck.agents.watch.heartbeat import Heartbeat
from gpudeck.agents.watch.outbox import BACKOFF_MAX_S, next_backoff

from support.clock import FakeClock

URL = "http://receiver.invalid/hooks/S3CRET"


class Drip(httpx.SyncByteStream):
    """An answer's body that costs ``every`` seconds of the clock per chunk; past ``cut_at``
    seconds the connection is gone (what the deadline's timer does to a real one)."""

    def __init__(self, clock: FakeClock, every: float, cut_at: float | None = None) -> None:
        self.clock, self.every, self.cut_at = clock, every, cut_at
        self.chunks = 0

    def __iter__(self):
        while True:
            self.clock.advance(self.every)
            if self.cut_at is not None and self.clock.monotonic() >= self.cut_at:
                raise httpx.ReadError("the connection was closed")
            self.chunks += 1
            yield b"x"


def _answer(clock: FakeClock, stream: httpx.SyncByteStream):
    transport = httpx.MockTransport(lambda req: httpx.Response(200, stream=stream))
    return request("POST", URL, DEADLINE_S, content=b"{}", clock=clock, transport=transport)


def test_a_receiver_cut_off_at_the_deadline_is_no_answer_and_names_the_deadline():
    clock = FakeClock()
    answer = _answer(clock, Drip(clock, every=2.0, cut_at=DEADLINE_S))
    assert answer.status is None and answer.error == f"no whole answer within {DEADLINE_S:g} s"
    assert answer.seconds == 16.0 and URL not in str(answer)


def test_a_connection_lost_before_the_deadline_is_said_as_such():
    clock = FakeClock()
    answer = _answer(clock, Drip(clock, every=2.0, cut_at=4.0))
    assert answer.status is None and answer.error == "ReadError"


def test_a_timeout_is_the_deadline_whatever_the_clock_says():
    def handler(req):
        raise httpx.ReadTimeout("read timed out", request=req)

    answer = request("POST", URL, DEADLINE_S, clock=FakeClock(), transport=httpx.MockTransport(handler))
    assert answer.error == f"no whole answer within {DEADLINE_S:g} s"


def test_a_body_that_drips_past_the_deadline_stops_being_read_and_its_status_stands():
    clock = FakeClock()
    drip = Drip(clock, every=2.0)
    answer = _answer(clock, drip)
    assert answer.status == 200 and drip.chunks == 8  # 8 chunks: 16 s > 15 s, then it stopped reading
    assert drip.chunks < ANSWER_BYTES


def test_a_failing_target_is_retried_after_1_s_doubling_to_5_min():
    waits, backoff = [], 0.0
    for _ in range(12):
        backoff = next_backoff(backoff)
        waits.append(backoff)
    assert waits == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300] and BACKOFF_MAX_S == 300
    assert next_backoff(0.0) == 1  # after a success, the first retry waits 1 s again


def test_a_heartbeat_pings_fail_while_failing_and_says_how_long_a_ping_is_in_flight():
    clock = FakeClock()
    sent: list[tuple[str, str, str]] = []
    seen: list[float | None] = []

    def send(method: str, url: str, body: str) -> str:
        clock.advance(4.0)  # a slow monitor
        seen.append(beat.status().in_flight_s)
        sent.append((method, url, body))
        return "HTTP 200"

    beat = Heartbeat("gpu1", clock=clock, send=send)
    cfg = HeartbeatConfig(url="https://hc.example/ping/{node}", every=60, method="POST")
    beat.config = cfg
    beat.ping(cfg)
    beat.set_failing("gave_up: job gen: restarts given up")
    clock.advance(60)
    beat.ping(cfg)
    beat.set_failing(None)
    beat.ping(cfg)
    assert [u for _, u, _ in sent] == ["https://hc.example/ping/gpu1", "https://hc.example/ping/gpu1/fail",
                                        "https://hc.example/ping/gpu1"]
    assert sent[1][2] == "gave_up: job gen: restarts given up" and sent[2][2] == "ok"
    assert seen == [4.0, 4.0, 4.0]
    assert beat.last is not None and beat.last.at == clock.time() and not beat.last.fail
    assert beat.status().in_flight_s is None


def test_a_heartbeat_whose_url_env_is_unset_says_so_and_sends_nothing(monkeypatch):
    monkeypatch.delenv("HC_URL", raising=False)
    clock = FakeClock()
    beat = Heartbeat("gpu1", clock=clock, send=lambda *a: pytest.fail("sent without a URL"))
    beat.ping(HeartbeatConfig(url_env="HC_URL"))
    assert beat.last is not None and beat.last.at == clock.time()
    assert beat.last.answer == "$HC_URL is not set on this node"


def test_the_notify_deadline_from_the_environment_is_checked_and_names_its_variable():
    from gpudeck.agents.contract.notify import _deadline_s

    assert _deadline_s("3") == 3.0 and _deadline_s("15") == 15.0
    for bad in ("0", "-1", "601", "soon", "nan"):
        with pytest.raises(ValueError, match=r"\$GPUDECK_NOTIFY_DEADLINE_S: expected seconds from 0.5 to 600"):
            _deadline_s(bad)
