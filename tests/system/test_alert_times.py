"""An alert says when it began on the node, the same in every console and in `status --json`,
and a disk filling up is the node's alert, not each console's guess from its own trend.

Real agents, real jobs, the console driven with Pilot and `gpudeck status --json` as a second
console beside it; the disk that fills is a small tmpfs a job writes to."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time

import psutil
import pytest

from gpudeck.console.actions import JobOp
from gpudeck.console.app import make_app
from gpudeck.console.widgets.cells import clock_time
from support.cli import gpudeck
from support.tui import job_row, shell_job, wait_for_text, wait_until, write_fleet
from support.wait import wait_for
from support.watch import events

pytestmark = pytest.mark.system  # the console and the CLI over real agents and their jobs

SIZE = (120, 40)


def console(tmp_path, home, jobs, extra: str = ""):
    app = make_app(write_fleet(tmp_path, home, jobs, extra), grace_s=2.0, log_poll_s=0.2)
    app.animation_level = "none"
    return app


async def launched(pilot, *names: str) -> None:
    """Launch jobs through the console itself (the `l` key's path) and wait until they run."""
    app = pilot.app
    await wait_until(pilot, lambda: all(job_row(app, n) and job_row(app, n).state != "unknown" for n in names),
                     what="the agent's first snapshot")
    for n in names:
        app.run_job_action(JobOp.LAUNCH, n, quiet=True)
    await wait_until(pilot, lambda: all(job_row(app, n).state == "running" for n in names), what=f"{names} running")


def alert_row(app, kind: str, about: str = ""):
    """The console's first alert row of ``kind`` whose message opens with ``about``."""
    return next((r for r in app.state.alert_rows() if r.kind == kind and r.message.startswith(about)), None)


async def status_json(tmp_path) -> dict:
    """`gpudeck status --json` (a console of its own), in a thread: the open console goes on."""
    r = await asyncio.to_thread(gpudeck, "status", "--json", "-f", str(tmp_path / "fleet.toml"))
    return json.loads(r.stdout)


def agents_of(home) -> list[int]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or []
        if "gpudeck.agents" in argv and str(home) in argv:
            out.append(p.pid)
    return out


async def test_every_console_shows_when_the_alert_began_on_the_node(tmp_path, fleet_home):
    # two jobs given GPU 0: a shared_gpu alert from the moment both run
    jobs = [shell_job(n, "sleep 600", gpus=[0]) for n in ("a", "b")]
    first = console(tmp_path, fleet_home, jobs)
    async with first.run_test(size=SIZE, notifications=True) as pilot:
        await launched(pilot, "a", "b")
        row = await wait_until(pilot, lambda: alert_row(first, "shared_gpu"), what="the shared_gpu alert")
        began = row.since
        assert began is not None and began <= time.time()
        # later, a second console (`status --json`) on the same agent: the same start
        await wait_until(pilot, lambda: time.time() > began + 1.5, what="a moment later")
        (alert,) = [a for a in (await status_json(tmp_path))["alerts"] if a["kind"] == "shared_gpu"]
        assert alert["since"] == began, alert
        await pilot.press("4")  # the alerts view: its SINCE column
        text = await wait_for_text(pilot, "shared gpu")
        line = next(ln for ln in text.splitlines() if "shared gpu" in ln)
        assert line.startswith(clock_time(began)), line
        assert agents_of(fleet_home)  # (the agent, as it is found below once gone)

    # the console gone, its agent went with it; a console opened later starts a new one, and
    # the alert still began when the node first raised it
    wait_for(lambda: not agents_of(fleet_home), 30, what="the first agent gone with its console")
    second = console(tmp_path, fleet_home, jobs)
    async with second.run_test(size=SIZE, notifications=True) as pilot:
        row = await wait_until(pilot, lambda: alert_row(second, "shared_gpu"), what="the alert in a new console")
        assert row.since == began
        (alert,) = [a for a in (await status_json(tmp_path))["alerts"] if a["kind"] == "shared_gpu"]
        assert alert["since"] == began, alert


def _no_tmpfs() -> str:
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs"
    if not shutil.which("mount"):
        return "needs mount(8)"
    return ""


@pytest.fixture
def small_disk(tmp_path):
    """A 512 MiB tmpfs the job writes to; unmounted after, whatever the test left on it."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m,mode=0700", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    for p in psutil.process_iter(["cwd"]):  # the job (its cwd is there)
        if str(mnt) in (p.info["cwd"] or ""):
            try:
                p.kill()
            except psutil.Error:
                pass
    wait_for(lambda: subprocess.run(["umount", str(mnt)], capture_output=True).returncode == 0, 30,
             what="the tmpfs unmounted")


@pytest.mark.skipif(bool(_no_tmpfs()), reason=_no_tmpfs() or "-")
async def test_a_disk_filling_up_is_the_nodes_alert_the_same_in_every_console(tmp_path, fleet_home, small_disk):
    # 256 KiB every 0.2 s: about 1.2 MiB/s, full in minutes; the trend measured over 5 s
    # (known from 1 s on) instead of ten minutes, so the test need not wait two
    fill = "while true; do head -c 262144 /dev/zero >> fill; sleep 0.2; done"
    jobs = [shell_job("filler", fill, cwd=str(small_disk))]
    app = console(tmp_path, fleet_home, jobs, extra="[alerts]\ndisk_trend_s = 5\n")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await launched(pilot, "filler")
        # (this machine's own disk may be filling too, under other tests: the tmpfs's alert)
        row = await wait_until(pilot, lambda: alert_row(app, "disk_filling", f"{small_disk}: "),
                               what="the disk_filling alert of the tmpfs")
        assert "full in" in row.message, row.message
        began = row.since
        assert began is not None
        # a console that has just connected has no trend of its own: it shows the node's alert
        # at once, from its first snapshot, with the node's start time
        (alert,) = [a for a in (await status_json(tmp_path))["alerts"]
                    if a["kind"] == "disk_filling" and a["message"].startswith(f"{small_disk}: ")]
        assert alert["since"] == began, alert
    # and the node's timeline has it coming up (written in the tick that raised it)
    (up,) = [e for e in events(fleet_home) if e.get("key") == f"disk_filling:{small_disk}"]
    assert up["kind"] == "disk" and up["t"] >= began
