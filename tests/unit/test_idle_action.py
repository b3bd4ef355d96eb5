"""A node's idle_action (agents/watch/idle.py): it runs once when every GPU of the node has
been idle for idle_paid_s and no job is alive, and not with one of two GPUs idle or with a job
loading; the fleet file's key reaches the watcher. The command is a fake here (no process:
tests/system/test_idle_action.py runs a real one)."""

from __future__ import annotations

import threading

import pytest

from gpudeck.agents.contract.jobs import JobKind
from gpudeck.agents.contract.vocab import EventKind, JobState
from gpudeck.agents.contract.wire import Gpu, JobStatus
from gpudeck.agents.watch.idle import IdleAction, node_idle
from gpudeck.remote.fleet import parse_fleet
from gpudeck.remote.fleet_check import FleetError


def _gpus(*utils):
    return [Gpu(i, f"u{i}", "H200", mem_used_mib=0.0, mem_total_mib=1.0, util_pct=u) for i, u in enumerate(utils)]


def _job(state: JobState) -> JobStatus:
    return JobStatus(name="sglang", kind=JobKind.SGLANG_SERVER, state=state, gpus=[0, 1])


class Ran:
    def __init__(self) -> None:
        self.commands: list[str] = []
        self.done = threading.Semaphore(0)

    def __call__(self, command, cwd):
        self.commands.append(command)
        self.done.release()
        return 0, "instance stopping\n", 0.4


def _idle(tmp_path):
    said: list = []
    ran = Ran()
    idle = IdleAction(tmp_path, "b200", lambda kind, message, **kw: said.append((kind, message, kw)), run=ran)
    return idle, ran, said


def test_it_runs_once_when_every_gpu_is_idle_and_no_job_is_alive_for_idle_paid_s(tmp_path):
    idle, ran, said = _idle(tmp_path)
    gpus = _gpus(0.0, 0.0)
    for t in (0.0, 1000.0, 1799.0):
        idle.tick(t, gpus, [_job(JobState.EXITED)], "aws ec2 stop-instances", 1800.0)
    assert not ran.commands
    idle.tick(1800.0, gpus, [_job(JobState.EXITED)], "aws ec2 stop-instances", 1800.0)
    assert ran.done.acquire(timeout=10)
    idle.thread.join(10)
    for t in (1801.0, 5000.0):  # the same idle episode: once
        idle.tick(t, gpus, [], "aws ec2 stop-instances", 1800.0)
    assert ran.commands == ["aws ec2 stop-instances"]
    (start, end) = said
    assert start[0] is EventKind.ACTION and start[2]["notify"] is False
    assert end[0] is EventKind.IDLE_ACTION and end[2]["exit_code"] == 0 and end[2]["output"] == "instance stopping"
    assert end[1] == ("idle_action on b200 (every GPU (2) idle for 1800 s and no job alive): exit code 0 in 0.4 s; "
                      "it said: instance stopping")
    # a GPU used: the episode ends; the next one acts again, after idle_paid_s of its own
    idle.tick(6000.0, _gpus(0.0, 40.0), [], "aws ec2 stop-instances", 1800.0)
    idle.tick(6001.0, gpus, [], "aws ec2 stop-instances", 1800.0)
    idle.tick(7800.0, gpus, [], "aws ec2 stop-instances", 1800.0)
    assert len(ran.commands) == 1 and not idle.acted  # 1,799 s of the new episode: not yet
    idle.tick(7801.0, gpus, [], "aws ec2 stop-instances", 1800.0)
    assert ran.done.acquire(timeout=10) and len(ran.commands) == 2


@pytest.mark.parametrize("gpus, jobs", [
    (_gpus(0.0, 35.0), []),  # one of two GPUs idle: the idle_paid alert's case, not the node's
    (_gpus(0.0, 0.0), [_job(JobState.STARTING)]),  # a job loading its model: its GPUs at 0%, the job alive
    (_gpus(0.0, 0.0), [_job(JobState.RUNNING)]),
    ([], []),  # no GPU read: nothing is known to be idle
])
def test_it_does_not_run(tmp_path, gpus, jobs):
    idle, ran, _ = _idle(tmp_path)
    for t in (0.0, 1800.0, 100_000.0):
        idle.tick(t, gpus, jobs, "stop", 1800.0)
    assert ran.commands == [] and not node_idle(gpus, jobs)


def test_without_idle_action_the_alert_stays_alone(tmp_path):
    idle, ran, said = _idle(tmp_path)
    for t in (0.0, 1800.0, 100_000.0):
        idle.tick(t, _gpus(0.0), [], None, 1800.0)
    assert ran.commands == [] and said == []


def test_the_fleet_key_is_a_node_s_or_the_defaults_and_reaches_the_watch_settings():
    f = parse_fleet('[defaults]\nidle_action = "sudo shutdown -h now"\n[[nodes]]\nname = "a"\n'
                    '[[nodes]]\nname = "b"\nidle_action = "aws ec2 stop-instances --instance-ids i-0b2"\n', "f.toml")
    assert f.node("a").idle_action == "sudo shutdown -h now"
    assert f.node("local").idle_action is None  # the console's own machine: never by [defaults]
    assert f.watch_settings("b").idle_action == "aws ec2 stop-instances --instance-ids i-0b2"
    with pytest.raises(FleetError, match=r"f.toml:3: \[\[nodes\]\] #1 'idle_action': expected a string"):
        parse_fleet('[[nodes]]\nname = "a"\nidle_action = ["stop"]\n', "f.toml")
