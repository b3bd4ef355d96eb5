"""The kill's grace period on a clock moved by hand (agents/jobs/killing.py): SIGTERM, the grace,
then SIGKILL; "gone" only once no process is seen for QUIET_S. The members are pids above the
kernel's largest (2**22), so no signal can reach a real process; whether each is alive is
the test's to say.

The wiring (a real job whose child ignores SIGTERM) stays proven by
tests/test_supervisor.py::test_kill_of_a_job_whose_child_ignores_sigterm, and the grace taken over
from a dead agent by tests/test_supervisor.py::test_a_kill_interrupted_by_the_agent_dying_is_finished_by_the_next_agent
(and, for a restart's kill, by
tests/test_watch_restart_interrupted.py::test_a_watcher_killed_in_its_restarts_kill_is_followed_by_one_that_finishes_the_restart)."""

from __future__ import annotations

from gpudeck.agents.jobs.killing import QUIET_S, Target, grace_left, kill_and_verify

from support.clock import FakeClock

NOBODY = 2**22 + 7  # above any pid_max: no process ever has it


class NoGpu:
    uuids: list[str] = []

    def processes(self, index: int) -> list:
        return []


def _target(clock: FakeClock, dies_at: float | None, killed: list[float]) -> Target:
    """One member that ends at ``dies_at`` on the clock (None: never of itself), and at once on
    the kill_all that comes with SIGKILL."""

    def alive(pid: int) -> bool:
        return not killed and (dies_at is None or clock.monotonic() < dies_at)

    return Target(job="gen", pgid=None, started_at=None, gpus=[], members=lambda: {NOBODY},
                  kill_all=lambda: killed.append(clock.monotonic()), alive=alive)


def test_a_process_that_ignores_sigterm_gets_sigkill_once_the_grace_is_over():
    clock, killed = FakeClock(), []
    verdict = kill_and_verify(_target(clock, None, killed), NoGpu(), lambda p: None, grace_s=30.0,
                              verify_timeout_s=15.0, on_stopping=lambda m: None, clock=clock)
    assert len(killed) == 1 and 30.0 <= killed[0] < 30.1  # not before the grace, and at once after it
    assert verdict.ok and verdict.signal == "SIGKILL" and verdict.survivors == []
    assert verdict.seconds is not None and 30.0 + QUIET_S <= verdict.seconds < 30.4
    assert verdict.at == clock.time() and verdict.pids == [NOBODY]


def test_a_process_that_ends_within_the_grace_gets_no_sigkill():
    clock, killed = FakeClock(), []
    verdict = kill_and_verify(_target(clock, 3.0, killed), NoGpu(), lambda p: None, grace_s=30.0,
                              verify_timeout_s=15.0, on_stopping=lambda m: None, clock=clock)
    assert killed == [] and verdict.ok and verdict.signal == "SIGTERM"
    assert verdict.seconds is not None and 3.0 + QUIET_S <= verdict.seconds < 3.4
    assert verdict.message == f"stopped in {verdict.seconds:.1f} s (SIGTERM); it held no GPU memory"


def test_a_process_that_outlives_sigkill_is_named_after_its_5_s():
    clock, killed = FakeClock(), []
    target = _target(clock, None, killed)
    target.alive = lambda pid: True  # in uninterruptible sleep: even SIGKILL takes its time
    verdict = kill_and_verify(target, NoGpu(), lambda p: None, grace_s=10.0, verify_timeout_s=15.0,
                              on_stopping=lambda m: None, clock=clock)
    assert not verdict.ok and verdict.survivors == [NOBODY] and verdict.message == f"pid {NOBODY} still alive"
    assert verdict.seconds is not None and 15.0 <= verdict.seconds < 15.2  # the grace, then SIGKILL's 5 s
    assert round(clock.slept, 3) == verdict.seconds  # all of it was the clock's sleep: no real wait


def test_a_kill_taken_over_from_a_dead_agent_gets_what_is_left_of_its_grace():
    t = FakeClock().time()
    assert grace_left(t, 30.0, t + 12.5) == 17.5
    assert grace_left(t, 30.0, t + 45.0) == 0.0  # over already: SIGKILL at once
    assert grace_left(t, None, t + 4.0) == 6.0  # a record from before grace_s was kept: 10 s
