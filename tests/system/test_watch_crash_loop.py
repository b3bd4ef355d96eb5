"""The crash-loop counting is what the README says: a restart whose attempt reported progress
that did not move counts twice; one of a job that reports nothing counts once; the restart
that would pass max_restarts is not made."""

from __future__ import annotations

import pytest

from support import command_job

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("reap_jobs")]

STUCK = "echo '{\"done\": 1, \"total\": 100}' > $GPUDECK_PROGRESS_FILE; sleep 0.3; exit 1"


@pytest.mark.parametrize("script, restarts, counted", [(STUCK, 2, 4), ("sleep 0.3; exit 1", 5, 5)])
def test_a_crash_loop_gives_up_as_the_readme_says(script, restarts, counted, start_agent):
    a = start_agent()
    a.ok("configure", jobs=[command_job("loop", script, restart="on-failure", max_restarts=5,
                                        restart_backoff_s=0)])
    a.ok("launch", job="loop")
    snap = a.wait_snapshot(lambda s: (a.job(s, "loop")["restart_note"] or "").startswith("gave up"), 120,
                           what="the restarts given up")
    job = a.job(snap, "loop")
    assert job["attempt"] == restarts + 1 and job["restarts"] == counted, job
    assert job["restart_note"].startswith(f"gave up after {restarts} restart(s)"), job["restart_note"]
