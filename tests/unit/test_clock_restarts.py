"""The restart rules on a clock moved by hand (agents/watch/restarts.py): the backoff that
doubles up to its cap, a restart without progress that counts twice and the budget that
gives up, the stall restart, and the acknowledgement's time. No process, no real wait: the
relaunch is a fake backend's (tests/support/jobs.py), which only records it.

The wiring (the real watcher's tick, a real job, a real relaunch) stays proven by
tests/test_watch.py::test_a_job_that_fails_at_once_gives_up_after_max_restarts and
tests/test_watch_alerts.py::test_a_stalled_job_is_killed_and_restarted."""

from __future__ import annotations

import threading
from typing import Any, Optional

from gpudeck.agents.contract.jobs import JobKind, JobSpec
from gpudeck.agents.contract.vocab import EventKind, JobState
from gpudeck.agents.contract.wire import JobStatus, Progress
from gpudeck.agents.watch.restarts import BACKOFF_CAP_S, RestartEngine

from support.clock import FakeClock
from support.jobs import FakeJobs


def _job(state: JobState, attempt: int, done: Optional[int] = None, **kw: Any) -> JobStatus:
    progress = Progress(done=done, total=100) if done is not None else None
    return JobStatus(name="gen", kind=JobKind.COMMAND, state=state, attempt=attempt, progress=progress, **kw)


def _engine(tmp_path, clock: FakeClock, **spec: Any) -> tuple[RestartEngine, FakeJobs, list]:
    jobs = FakeJobs([JobSpec(name="gen", command=["x"], **spec)])
    events: list = []
    engine = RestartEngine(jobs, lambda kind, message, **kw: events.append((kind, message)), clock=clock)
    return engine, jobs, events


def _relaunched(jobs: FakeJobs) -> None:
    assert jobs.relaunched.acquire(timeout=10), "the relaunch thread never ran"


def _settled(engine: RestartEngine) -> None:
    """The relaunch thread has written its count (it clears _busy last, under the lock)."""
    for _ in range(1000):
        with engine._lock:
            if not engine._busy:
                return
        threading.Event().wait(0.001)
    raise AssertionError("the relaunch thread did not finish")


def test_a_failed_job_waits_its_backoff_which_doubles_up_to_the_cap(tmp_path):
    clock = FakeClock()
    engine, jobs, _ = _engine(tmp_path, clock, restart="on-failure", max_restarts=10, restart_backoff_s=400)
    t0 = clock.time()
    failed = _job(JobState.FAILED, 1, exit_code=1)  # no progress file: nothing says it made none
    engine.tick(t0, [failed], {})
    assert engine.state("gen").next_at == t0 + 400 and jobs.relaunches == []
    engine.tick(t0 + 399.9, [failed], {})
    assert jobs.relaunches == []  # not a moment early
    engine.tick(t0 + 400, [failed], {})
    _relaunched(jobs)
    _settled(engine)
    # the next attempt made progress and failed: the second backoff, 800 s, is capped at 10 min
    t1 = t0 + 1000
    engine.tick(t1, [_job(JobState.RUNNING, 2, done=5)], {})
    engine.tick(t1, [_job(JobState.FAILED, 2, done=9, exit_code=1)], {})
    st = engine.state("gen")
    assert (st.count, st.restarts, st.next_at) == (1, 1, t1 + BACKOFF_CAP_S)
    assert st.note == f"restart in {BACKOFF_CAP_S:.0f} s: failed (exit code 1)"


def test_a_restart_without_progress_counts_twice_and_the_budget_gives_up(tmp_path):
    clock = FakeClock()
    engine, jobs, events = _engine(tmp_path, clock, restart="on-failure", max_restarts=3, restart_backoff_s=10)
    t = clock.time()
    engine.tick(t, [_job(JobState.RUNNING, 1, done=0)], {})
    engine.tick(t + 1, [_job(JobState.FAILED, 1, done=0, exit_code=1)], {})
    st = engine.state("gen")
    assert (st.weight, st.next_at) == (2, t + 1 + 10)  # no progress since the attempt began: it counts 2
    engine.tick(t + 11, [_job(JobState.FAILED, 1, done=0, exit_code=1)], {})
    _relaunched(jobs)
    _settled(engine)
    assert engine.state("gen").restarts == 2
    engine.tick(t + 12, [_job(JobState.RUNNING, 2, done=0)], {})
    engine.tick(t + 13, [_job(JobState.FAILED, 2, done=0, exit_code=1)], {})  # 2 + 2 > 3
    st = engine.state("gen")
    assert st.gave_up and st.gave_up_at == t + 13 and st.next_at is None
    assert st.note == "gave up after 1 restart(s): failed (exit code 1)"
    assert ("restart-gave-up", "gen") in jobs.audits and jobs.relaunches == ["gen"]
    assert [k for k, _ in events].count(EventKind.GAVE_UP) == 1
    assert engine.gave_up() == ["gen"]


def test_a_stalled_job_is_restarted_once_its_quiet_outlasts_restart_on_stall(tmp_path):
    clock = FakeClock()
    engine, jobs, events = _engine(tmp_path, clock, restart="never", max_restarts=2, restart_on_stall="60s")
    t = clock.time()
    running = _job(JobState.RUNNING, 1, done=7, started_at=t - 600)
    engine.tick(t, [running], {"gen": t - 60})  # quiet for exactly 60 s: not yet
    assert jobs.relaunches == [] and EventKind.STALLED not in [k for k, _ in events]
    engine.tick(t + 1, [running], {"gen": t - 60})
    _relaunched(jobs)
    assert jobs.graces == [10.0]  # the default: SIGTERM, SIGKILL after 10 s
    stalled = [m for k, m in events if k is EventKind.STALLED]
    assert stalled == ["job gen: no progress for 61 s (restart_on_stall 60s): killing and restarting"]


def test_an_acknowledgement_is_stamped_with_the_engines_clock(tmp_path):
    clock = FakeClock()
    engine, _, _ = _engine(tmp_path, clock, restart="on-failure", max_restarts=0)
    engine.tick(clock.time(), [_job(JobState.FAILED, 1, exit_code=1)], {})
    clock.advance(3600)
    assert engine.ack("gen")[0]
    assert engine.state("gen").acked == clock.time()
    assert engine.started_at == clock.time() - 3600


def test_a_restarts_kill_takes_the_jobs_own_grace(tmp_path):
    clock = FakeClock()
    engine, jobs, _ = _engine(tmp_path, clock, restart="on-failure", max_restarts=2, restart_backoff_s=0,
                             kill_grace_s=45)
    failed = _job(JobState.FAILED, 1, exit_code=1)
    engine.tick(clock.time(), [failed], {})  # scheduled: no backoff
    engine.tick(clock.time(), [failed], {})
    _relaunched(jobs)
    assert jobs.graces == [45]
