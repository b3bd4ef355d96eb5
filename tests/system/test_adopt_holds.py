"""Adopt and kill by pid never take the node down (agents/jobs/holds.py): `gpudeck adopt` and
`gpudeck kill --pid` against real agents refuse, with exit 8 and the reason, pid 1, the node's
agent and watcher and their ancestors, and a process whose tree or group holds an agent, an
sshd session or another job's process; an adopted job whose tree came to hold one is not
killed either. A process that holds no GPU is still adopted.

Nothing here signals a process the test did not start: every refusal is asserted before
anything could be signalled, and the cleanup kills the test's own processes by their Popen."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from support.core import pid_alive
from support.wait import wait_for
from support.watch import gpudeck_watch, stop_watch, watcher_pid

pytestmark = pytest.mark.system  # agents, the CLI, and the processes they are asked about

# a stranger's process tree: this process, in a session of its own, and the child named on its
# command line (argv[1:]); on SIGUSR1 it starts the child of argv[2:] beside it
TREE = textwrap.dedent('''
    import signal, subprocess, sys, time
    kids = [subprocess.Popen(sys.argv[1:2] + ["600"])]
    signal.signal(signal.SIGUSR1, lambda *a: kids.append(subprocess.Popen(sys.argv[2:3] + ["600"])))
    while True:
        time.sleep(1)
''')


@pytest.fixture
def fleet(tmp_path, home) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(f'[defaults]\nhome = "{home}"\nnvml = false\ninterval = 0.2\n'
                    f'[[nodes]]\nname = "local"\nsimulate_gpus = "1xTest GPU:16"\n')
    return path


@pytest.fixture
def trees(tmp_path):
    """Start a stranger's tree (TREE) of ``first`` (and on SIGUSR1 ``then``); kill its group after."""
    started: list[subprocess.Popen] = []
    script = tmp_path / "tree.py"
    script.write_text(TREE)

    def start(first: str, then: str = "sleep") -> tuple[subprocess.Popen, int]:
        p = subprocess.Popen([sys.executable, str(script), first, then], start_new_session=True)
        started.append(p)
        kid = wait_for(lambda: next((c.pid for c in psutil.Process(p.pid).children()), None), 15,
                       what="the tree's first child")
        return p, kid

    yield start
    for p in started:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def sshd_named(tmp_path: Path) -> str:
    """A `sleep` whose process is named sshd, as an sshd session's is (comm: the name exec'd)."""
    link = tmp_path / "sshd"
    link.symlink_to(subprocess.run(["sh", "-c", "command -v sleep"], capture_output=True, text=True,
                                   check=True).stdout.strip())
    return str(link)


def cli(fleet: Path, *args: str) -> subprocess.CompletedProcess:
    return gpudeck_watch(*args[:1], "-f", str(fleet), "--node", "local", *args[1:])


def test_pid_1_is_refused_by_adopt_and_kill_before_anything_is_read_or_signalled(fleet, home):
    r = cli(fleet, "adopt", "--pid", "1", "--as", "init")
    assert r.returncode == 8, r.stdout + r.stderr
    assert "local: pid 1 on node local is init: its process tree is every process on the node" in r.stderr
    assert "refused, nothing adopted" in r.stderr and not (home / "jobs" / "init").exists()
    r = cli(fleet, "kill", "--pid", "1", "--grace", "0")
    assert r.returncode == 8 and "pid 1 on node local is init" in r.stderr and "nothing signalled" in r.stderr, \
        r.stdout + r.stderr
    assert '"action": "kill-pid-refused"' in (home / "audit.log").read_text()


def test_the_agent_s_ancestors_and_trees_that_hold_sshd_or_another_job_are_refused(tmp_path, fleet, home, trees):
    # the agent's ancestor: this test (the CLI it starts starts the agent)
    r = cli(fleet, "adopt", "--pid", str(os.getpid()), "--as", "me")
    assert r.returncode == 8 and f"pid {os.getpid()} on node local is an ancestor of the node's agent (pid " \
        in r.stderr, r.stdout + r.stderr
    r = cli(fleet, "kill", "--pid", str(os.getpid()))
    assert r.returncode == 8 and "is an ancestor of the node's agent" in r.stderr, r.stdout + r.stderr

    # a tree with an sshd session in it (the leader's tree and its group)
    leader, sshd = trees(sshd_named(tmp_path))
    r = cli(fleet, "adopt", "--pid", str(leader.pid), "--as", "logins")
    assert r.returncode == 8, r.stdout + r.stderr
    assert (f"pid {leader.pid} on node local has in its process tree an sshd session (pid {sshd}: "
            in r.stderr and "its kill would end someone's login; refused, nothing adopted" in r.stderr), r.stderr
    r = cli(fleet, "kill", "--pid", str(leader.pid))
    assert r.returncode == 8 and "an sshd session" in r.stderr and "nothing signalled" in r.stderr, r.stderr

    # a tree that holds another job's process; its child, holding no GPU, is adopted as it was
    outer, inner = trees("sleep")
    r = cli(fleet, "adopt", "--pid", str(inner), "--as", "inner")
    assert r.returncode == 0 and f"adopted pid {inner} on local as job inner (no GPU" in r.stdout, r.stderr
    r = cli(fleet, "adopt", "--pid", str(outer.pid), "--as", "outer")
    assert r.returncode == 8, r.stdout + r.stderr
    assert f"has in its process tree pid {inner} of job 'inner': kill that job by its name" in r.stderr
    assert not (home / "jobs" / "outer").exists()
    r = cli(fleet, "kill", "--pid", str(outer.pid))
    assert r.returncode == 8 and f"pid {inner} of job 'inner'" in r.stderr, r.stderr
    assert pid_alive(leader.pid) and pid_alive(sshd) and pid_alive(outer.pid) and pid_alive(inner)

    r = cli(fleet, "kill", "inner", "--grace", "5")
    assert r.returncode == 0 and "killed inner: stopped in" in r.stdout and "it held no GPU memory" in r.stdout, \
        r.stdout + r.stderr
    wait_for(lambda: not pid_alive(inner), 10, what="the adopted process to end")
    assert pid_alive(outer.pid)  # its parent, in its process group, was not the job's


def test_an_adopted_job_whose_tree_came_to_hold_sshd_is_not_killed(tmp_path, fleet, home, trees):
    leader, first = trees("sleep", sshd_named(tmp_path))
    r = cli(fleet, "adopt", "--pid", str(leader.pid), "--as", "grows")
    assert r.returncode == 0, r.stdout + r.stderr
    os.kill(leader.pid, signal.SIGUSR1)  # its tree now holds an sshd session
    sshd = wait_for(lambda: next((c.pid for c in psutil.Process(leader.pid).children() if c.name() == "sshd"), None),
                    15, what="the sshd in the adopted tree")
    r = cli(fleet, "kill", "grows", "--grace", "0")
    assert r.returncode == 8, r.stdout + r.stderr
    assert f"pid {leader.pid} on node local has in its process tree an sshd session (pid {sshd}" in r.stderr
    assert pid_alive(leader.pid) and pid_alive(first) and pid_alive(sshd)


def test_the_watcher_is_neither_adopted_nor_killed(tmp_path, fleet, home):
    try:
        r = gpudeck_watch("watch", "start", "-f", str(fleet))
        assert r.returncode == 0, r.stdout + r.stderr
        watcher = wait_for(lambda: watcher_pid(home), 30, what="the detached watcher")
        r = cli(fleet, "adopt", "--pid", str(watcher), "--as", "watcher")
        assert r.returncode == 8, r.stdout + r.stderr
        assert f"pid {watcher} on node local is the node's watcher (pid {watcher})" in r.stderr
        r = cli(fleet, "kill", "--pid", str(watcher))
        assert r.returncode == 8 and "is the node's watcher" in r.stderr, r.stdout + r.stderr
        assert watcher_pid(home) == watcher and not (home / "jobs" / "watcher").exists()
    finally:
        stop_watch(home)


def test_logs_of_an_adopted_job_finds_its_node_and_an_unknown_name_shows_the_node_form(fleet, home, trees):
    _, kid = trees("sleep")
    r = cli(fleet, "adopt", "--pid", str(kid), "--as", "found")
    assert r.returncode == 0 and "gpudeck logs found" in r.stdout, r.stdout + r.stderr
    r = gpudeck_watch("logs", "-f", str(fleet), "found")  # no --node: the node that runs it is asked
    assert r.returncode == 0, r.stdout + r.stderr
    r = gpudeck_watch("logs", "-f", str(fleet), "nowhere")
    assert r.returncode == 2 and "unknown job 'nowhere'" in r.stderr, r.stdout + r.stderr
    assert "gpudeck logs nowhere --node NODE" in r.stderr, r.stderr
    r = cli(fleet, "kill", "found", "--grace", "5")
    assert r.returncode == 0, r.stdout + r.stderr
