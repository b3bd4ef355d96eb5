"""An engine loading, seen as the operator sees it: the simulated engine prints SGLang's own
loading lines (tqdm's, after carriage returns) while it starts; the agent reads them from the
job's log, and the job's row in the console and `gpudeck status --json` show how far it is as
a percentage, then its time to ready. A llama-server job, which prints no percentage, shows
``loading`` and for how long while its /health answers 503.

The rules behind it (the stall rules, idle GPUs) are in tests/unit/test_engine_loading.py."""

from __future__ import annotations

import json
import re
import sys

import pytest

from gpudeck.console.actions import JobOp
from gpudeck.console.app import make_app
from support import free_port
from support.cli import gpudeck
from support.tui import job_row, screen_text, wait_until, write_fleet
from support.wait import wait_for

pytestmark = pytest.mark.system  # a real agent, a real simulated engine, the console


def sim_engine_job(name: str, port: int, startup_s: float, shards: int, kind: str = "sglang-server") -> dict:
    return {"name": name, "kind": kind, "port": port, "model": "/models/sim",
            "command": [sys.executable, "-m", "gpudeck.agents.workers.sim_engine", "--port", str(port),
                        "--startup-s", str(startup_s), "--shards", str(shards)]}


def _status(fleet) -> dict:
    return json.loads(gpudeck("status", "--json", "-f", fleet.path).stdout)


def _job(doc: dict, name: str) -> dict:
    return next(j for j in doc["jobs"] if j["name"] == name)


@pytest.fixture
def watched(tmp_path, home, reap_jobs):
    """A fleet file whose node keeps its agent (the watcher) between the commands: it reads the
    engine's log as it grows, and sees it turn ready."""
    made = []

    def make(job: dict):
        fleet = write_fleet(tmp_path, home, [job], interval=0.3)
        gpudeck("watch", "start", "-f", fleet.path)
        made.append(fleet)
        return fleet
    yield make
    for fleet in made:
        gpudeck("watch", "stop", "-f", fleet.path, check=False)


def test_status_shows_the_sim_engines_loading_percentage_then_its_time_to_ready(watched):
    fleet = watched(sim_engine_job("sg", free_port(), startup_s=16, shards=8))
    gpudeck("launch", "-f", fleet.path, "sg")

    def loading():
        j = _job(_status(fleet), "sg")
        return j["phase"] == "loading" and j["phase_pct"] is not None and 0 < j["phase_pct"] < 100 and j
    j = wait_for(loading, timeout=60, what="the engine's loading percentage, between 0 and 100")
    assert j["state"] == "starting" and j["engine"]["phase_step"].endswith("/8")
    assert j["phase_pct"] == round(100 * int(j["engine"]["phase_step"].split("/")[0]) / 8)
    text = gpudeck("status", "-f", fleet.path).stdout
    assert "start-up: loading " in text and "%" in text.split("start-up: loading ", 1)[1].split("\n")[0], text

    ready = wait_for(lambda: (j := _job(_status(fleet), "sg"))["engine"] and j["engine"]["state"] == "ready" and j,
                     timeout=60, what="the engine ready")
    assert ready["phase"] is None and ready["startup_s"] is not None and ready["startup_s"] > 0
    assert "ready in " in gpudeck("status", "-f", fleet.path).stdout


def test_a_llama_server_without_a_percentage_shows_loading_and_for_how_long(watched):
    fleet = watched(sim_engine_job("llama", free_port(), startup_s=120, shards=0, kind="llama-server"))
    gpudeck("launch", "-f", fleet.path, "llama")
    j = wait_for(lambda: (j := _job(_status(fleet), "llama"))["phase"] == "loading" and j, timeout=60,
                 what="the llama-server job loading (its /health 503)")
    assert j["phase_pct"] is None and j["engine"]["state"] == "starting" and j["phase_s"] is not None


async def test_the_console_row_shows_the_loading_percentage(tmp_path, fleet_home):
    port = free_port()
    fleet = write_fleet(tmp_path, fleet_home, [sim_engine_job("sg", port, startup_s=30, shards=10)])
    app = make_app(fleet, grace_s=2.0, log_poll_s=0.2)
    app.animation_level = "none"
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        await wait_until(pilot, lambda: (r := job_row(app, "sg")) and r.state != "unknown", what="the first snapshot")
        app.run_job_action(JobOp.LAUNCH, "sg", quiet=True)

        def percent_flag():
            r = job_row(app, "sg")
            flag = next((f for f in r.flags if f.startswith("loading ") and "%" in f), None) if r else None
            return flag and 0 < int(flag.split()[1].rstrip("%,")) < 100 and flag
        flag = await wait_until(pilot, percent_flag, timeout=60, what="a loading percentage on the job's row")
        pct = flag.split()[1].rstrip(",")
        line = await wait_until(pilot, lambda: next((ln for ln in screen_text(app).splitlines()
                                                     if ln.startswith("sg ") and "loading " in ln), None),
                                what="the row drawn with its loading figure")
        assert "starting" in line and re.search(r"loading \d+%", line), (pct, line)  # its DONE cell
