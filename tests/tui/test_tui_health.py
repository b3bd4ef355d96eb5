"""The jobs view's S3 WAIT, UPLOADED and SERVERS columns and the header's idle dollars, on
the screen of the app driven headless (snapshots fed as the transport would)."""

from __future__ import annotations

import time

import pytest

from gpudeck.agents.contract.vocab import AlertKind, JobState
from gpudeck.agents.contract.wire import Alert, Host, JobStatus, Progress, ServerHealth, Snapshot, Uploads
from gpudeck.console.app import make_app
from gpudeck.console.messages import SnapshotReceived
from gpudeck.remote.fleet import parse_fleet
from support.tui import screen_text, wait_until

NOW = 1_764_504_000.0  # 2025-11-30 12:00:00 UTC

FLEET = """
[[nodes]]
name = "b200"
host = "b200.example"
price_per_hour = 57.6

[[jobs]]
name = "gen"
node = "b200"
kind = "generate"
servers = ["http://a:1", "http://b:2"]
prompts = "/data/p.jsonl"
out = "/data/gen"
"""


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _snapshot(seq: int, resting: int, idle: bool) -> Snapshot:
    servers = [ServerHealth(f"http://s{i}:1", "resting" if i < resting else "ok", down_since=NOW - 600 if i < resting
                            else None) for i in range(8)]
    uploads = Uploads(pending=12, pending_bytes=1_200_000_000, oldest_pending_at=NOW - 1800,
                      last_upload_at=NOW - 250)
    job = JobStatus("gen", "generate", JobState.RUNNING, [], pid=10, started_at=NOW - 3600,
                    progress=Progress(done=5, total=100, uploads=uploads, servers=servers))
    alerts = [Alert(AlertKind.IDLE_PAID, "GPU 0-3 on b200: $28.80/h idle since 02:10 UTC", per_hour=28.8)] if idle \
        else []
    return Snapshot("b200", seq, NOW, Host("b200", 1.0, 8, 1, 2, 0.0, 0.0, 0.0), [], [job], alerts)


async def test_the_jobs_view_shows_the_backlog_the_last_upload_and_resting_servers_and_the_header_idle_dollars():
    app = make_app(parse_fleet(FLEET, "health.toml"), connect=False, clock=lambda: NOW, tick_s=0,
                   initial_view="jobs")
    app.animation_level = "none"
    async with app.run_test(size=(200, 30)) as pilot:
        app.post_message(SnapshotReceived(_snapshot(1, resting=2, idle=True)))
        await wait_until(pilot, lambda: "2/8 resting" in screen_text(app), what="the servers column")
        text = screen_text(app)
        header, _, _ = text.partition("\n")
        assert "$28.80/h idle" in header
        line = next(ln for ln in text.splitlines() if ln.startswith("gen "))
        assert "12 1.2 GB" in line and "4m 10s ago" in line and "2/8 resting" in line
        for column in ("S3 WAIT", "UPLOADED", "SERVERS"):
            assert column in text
        # the servers come back and the GPUs go to work: the figures follow, the idle dollars go
        app.post_message(SnapshotReceived(_snapshot(2, resting=0, idle=False)))
        await wait_until(pilot, lambda: "0/8 resting" in screen_text(app), what="the servers back")
        assert "/h idle" not in screen_text(app).partition("\n")[0]


async def test_the_idle_dollars_stay_in_the_header_at_80_columns():
    app = make_app(parse_fleet(FLEET, "health.toml"), connect=False, clock=lambda: NOW, tick_s=0,
                   initial_view="jobs")
    app.animation_level = "none"
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(SnapshotReceived(_snapshot(1, resting=2, idle=True)))
        await wait_until(pilot, lambda: "gen" in screen_text(app), what="the job")
        await wait_until(pilot, lambda: "$28.80/h idle" in screen_text(app).partition("\n")[0],
                         what="the idle dollars in the header")
