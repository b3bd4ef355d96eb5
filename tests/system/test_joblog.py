"""A job's log: the tail in linear time, a follower that keeps up with a chatty job, and the
size cap that keeps a job from filling the node's disk.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_joblog.py."""

from __future__ import annotations

import pytest

from gpudeck.agents.jobs import joblog
from support import command_job
from support.wait import wait_for


@pytest.mark.system
def test_the_tail_of_a_million_lines(tmp_path, start_agent, home):
    log = home / "jobs" / "j" / "job.log"
    log.parent.mkdir(parents=True)
    with open(log, "wb") as f:
        f.write(b"".join(b"line %d\n" % i for i in range(1_000_000)))
    a = start_agent()
    a.ok("configure", jobs=[command_job("j", "true")])
    # through the agent, within its request timeout (the old tail took minutes: quadratic)
    chunk = a.ok("logs", job="j", lines=3)
    assert chunk["text"] == "line 999997\nline 999998\nline 999999\n" and chunk["offset"] == log.stat().st_size
    assert joblog.tail("j", log, 0).text == ""
    assert joblog.tail("j", tmp_path / "none.log", 5).text == ""
    whole = joblog.tail("j", log, 2_000_000).text
    assert whole.count("\n") == 1_000_000 and whole.startswith("line 0\n")


@pytest.mark.system
def test_a_chatty_job_is_held_to_its_log_cap(start_agent, home, reap_jobs, tmp_path):
    """A job writes 3 MiB bursts into a 1 MiB cap; after each burst job.log is back under the
    cap and job.log.1 holds at most the newest half of it. The job waits between bursts for the
    test's go-ahead, so what is on disk at each check does not depend on the machine's speed."""
    a = start_agent()
    script = CHATTY.format(d=tmp_path)
    a.ok("configure", jobs=[command_job("chatty", script, log_max_mb=1)])
    a.ok("launch", job="chatty")
    for log, old in bursts_cut(home, tmp_path):
        assert old.stat().st_size <= 2**19  # the newest half of the cap, no more
    assert a.ok("kill", job="chatty", grace_s=1)["ok"]


CHATTY = "i=0; while true; do i=$((i+1)); yes x | head -c 3145728; touch {d}/done$i; " \
         "while [ ! -e {d}/go$i ]; do sleep 0.05; done; done"


def bursts_cut(home, tmp_path, bursts: int = 3):
    """After each 3 MiB burst of the chatty job into its 1 MiB cap: wait until job.log was cut
    since the last burst and is under its cap, yield (job.log, job.log.1), then let the job go
    on. The job waits for the go-ahead, so nothing here depends on the machine's speed."""
    log = home / "jobs" / "chatty" / "job.log"
    old = log.with_name("job.log.1")
    last_cut = 0  # job.log.1 is written anew at each cut: its mtime moves on

    def settled_after(burst: int) -> bool:
        try:
            return ((tmp_path / f"done{burst}").exists() and old.stat().st_mtime_ns > last_cut
                    and log.stat().st_size <= 2**20)
        except FileNotFoundError:
            return False

    for burst in range(1, bursts + 1):
        wait_for(lambda: settled_after(burst), timeout=60, what=f"job.log cut under its cap after burst {burst}")
        yield log, old
        last_cut = old.stat().st_mtime_ns
        (tmp_path / f"go{burst}").touch()


@pytest.mark.system
def test_the_log_cap_holds_with_no_agent_alive(start_agent, home, reap_jobs, tmp_path):
    """Launched, then left with no agent (no console, no watcher): the job writes 3 MiB bursts
    into a 1 MiB cap, and the cap's keeper that lives with the job cuts job.log after each one;
    on disk the logs stay within 1.5 times the cap."""
    a = start_agent()
    script = CHATTY.format(d=tmp_path)
    a.ok("configure", jobs=[command_job("chatty", script, log_max_mb=1)])
    a.ok("launch", job="chatty")
    a.close()  # no agent from here on
    assert not agents_alive(home)
    for log, old in bursts_cut(home, tmp_path):
        assert log.stat().st_size + old.stat().st_size <= 1.5 * 2**20


def agents_alive(home) -> bool:
    import psutil

    return any("gpudeck.agents" in " ".join(p.info["cmdline"] or []) and str(home) in " ".join(p.info["cmdline"] or [])
               and "logcap" not in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))


CAP = 2 << 20  # a small cap, so a job writing as fast as it can passes it hundreds of times a second


def _cut_files(home, job: str):
    d = home / "jobs" / job
    return d / "job.log", d / "job.log.1", d / "job.log.1.tmp"


def _size(path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


@pytest.mark.system
def test_a_job_writing_as_fast_as_it_can_never_takes_its_log_past_the_cap(start_agent, home, reap_jobs):
    """`yes` into a 2 MiB cap: sampled until 30 cuts were seen, job.log never holds more than
    the cap and job.log.1 never more than half of it (the old keeper, which looked every half
    second beside the job, let job.log grow by all the job wrote meanwhile: hundreds of MB)."""
    a = start_agent()
    a.ok("configure", jobs=[command_job("fast", "exec yes 'as fast as it can'", log_max_mb=CAP / 2**20)])
    a.ok("launch", job="fast")
    log, old, _ = _cut_files(home, "fast")
    seen = {"cuts": 0, "last": 0, "max": 0}

    def sampled_cuts() -> bool:
        size, old_size = _size(log), _size(old)
        assert size <= CAP and old_size <= CAP // 2, (size, old_size)
        seen["cuts"] += size < seen["last"]  # job.log went down: it was cut since the last sample
        seen["last"], seen["max"] = size, max(seen["max"], size)
        return seen["cuts"] >= 30

    wait_for(sampled_cuts, timeout=15, interval=0.002, what="30 cuts", detail=lambda: str(seen))
    assert a.ok("kill", job="fast", grace_s=1)["ok"]
    assert _size(log) <= CAP and _size(old) <= CAP // 2


def _keepers(home, job: str) -> list:
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if len(cmd) > 3 and cmd[1:3] == ["-m", "gpudeck.agents.logcap"] and cmd[3] == str(home / "jobs" / job / "job.log"):
            found.append(p)
    return found


@pytest.mark.system
def test_a_keeper_killed_mid_cut_leaves_no_tmp_and_loses_no_log(start_agent, home, reap_jobs):
    """The keeper is SIGKILLed 20 times while a fast job runs: 12 times in the middle of a cut
    (its job.log.1.tmp half written), 8 times just as it started. After each kill a new keeper
    takes over (the wrapper starts it again) and job.log and job.log.1 are there; once the
    job pauses and the last keeper started, no job.log.1.tmp is left. The old keeper was not
    started again, and its half-written copy stayed until some later cut."""
    import random
    import signal

    import psutil

    a = start_agent()
    a.ok("configure", jobs=[command_job("fast", "exec yes 'as fast as it can'", log_max_mb=CAP / 2**20)])
    pid = a.ok("launch", job="fast")["pid"]
    log, old, tmp = _cut_files(home, "fast")
    killed: set[int] = set()
    for i in random.sample(range(20), 20):
        keeper = wait_for(lambda: next((k for k in _keepers(home, "fast") if k.pid not in killed), None), timeout=15,
                          interval=0.01, what="a new keeper")
        if i < 12:  # mid-cut: its copy is on disk, half written
            wait_for(lambda: tmp.exists(), timeout=10, interval=0.001, what="a cut under way")
        keeper.send_signal(signal.SIGKILL)
        killed.add(keeper.pid)
        wait_for(lambda: log.exists() and old.exists(), timeout=5, what="job.log and job.log.1 after a kill")
    writer = wait_for(lambda: [k for k in psutil.Process(pid).children() if "logcap" not in " ".join(k.cmdline())],
                      what="the job's command")[0]
    writer.suspend()  # no more cuts: a .tmp there now could only be a killed keeper's
    try:
        wait_for(lambda: [k for k in _keepers(home, "fast") if k.pid not in killed], timeout=15, what="the last keeper")
        wait_for(lambda: not tmp.exists(), timeout=10, what="no job.log.1.tmp left")
        assert log.exists() and old.exists() and _size(log) <= CAP and _size(old) <= CAP // 2
    finally:
        writer.resume()
    assert a.ok("kill", job="fast", grace_s=1)["ok"]


@pytest.mark.system
def test_with_no_keeper_left_the_agent_writes_the_log_under_its_cap(start_agent, home, reap_jobs):
    """The wrapper's restarting of the keeper is killed, then the keeper: the agent's own
    check finds the log's lock free and writes the job's pipe into job.log itself, still cut
    before the cap (the job goes on: it is not stuck on a pipe nobody reads)."""
    import signal

    import psutil

    a = start_agent()
    a.ok("configure", jobs=[command_job("fast", "exec yes 'as fast as it can'", log_max_mb=CAP / 2**20)])
    pid = a.ok("launch", job="fast")["pid"]
    log, old, _ = _cut_files(home, "fast")
    keeper = wait_for(lambda: next(iter(_keepers(home, "fast")), None), what="the keeper")
    restarter = keeper.parent()
    assert restarter.ppid() == pid  # the wrapper's subshell that starts the keeper again
    restarter.send_signal(signal.SIGKILL)
    keeper.send_signal(signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(keeper.pid) or keeper.status() == psutil.STATUS_ZOMBIE, what="no keeper")
    assert not _keepers(home, "fast")
    cut_at = wait_for(lambda: old.exists() and old.stat().st_mtime_ns, what="job.log.1")
    seen = {"cuts": 0}

    def cut_again() -> bool:
        assert _size(log) <= CAP and _size(old) <= CAP // 2
        seen["cuts"] += old.stat().st_mtime_ns != cut_at
        return seen["cuts"] >= 1 and not _keepers(home, "fast")

    wait_for(cut_again, timeout=20, interval=0.01, what="a cut by the agent")
    assert a.ok("kill", job="fast", grace_s=1)["ok"]
