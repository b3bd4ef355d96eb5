"""The keys k9s, htop and vim hands press, typed in a real terminal (tmux) into `gpudeck up` on
a fleet of this machine's command jobs: `:` then text triggers no key, `:q` and F10 quit, `k`
moves and ctrl-k asks to kill, shift and a column's letter sorts by it, enter or `d` on an
alert shows its whole reason and when it began, and an edit of the fleet file adds a node's rows
to the open console. The screen is read back with capture-pane."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess

import pytest

from support.cli import gpudeck, gpudeck_cmd
from support.core import env_with_repo, reap
from support.tmux import Tmux

pytestmark = [pytest.mark.system, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


@pytest.fixture
def tmux(home):
    t = Tmux(f"gpudeck-keys-{os.getpid()}")
    yield t
    subprocess.run(["tmux", "-L", t.socket, "kill-server"], capture_output=True)
    reap(home)


def fleet_of(tmp_path, home, jobs: dict[str, str]) -> str:
    """A fleet file of this machine (no NVML) with shell jobs: name -> script."""
    lines = [f'[defaults]\nhome = {json.dumps(str(home))}\nnvml = false\ninterval = 0.2\n']
    for name, script in jobs.items():
        lines.append(f'[[jobs]]\nname = "{name}"\nkind = "command"\ncommand = ["sh", "-c", {json.dumps(script)}]\n')
    path = tmp_path / "fleet.toml"
    path.write_text("\n".join(lines))
    return str(path)


def start(tmux: Tmux, tmp_path, fleet: str, view: str = "jobs", size: tuple[int, int] = (120, 40)) -> None:
    """`gpudeck up` in its own terminal; its exit code stays on the pane after it leaves. Its own
    config and state directories: a user's [keys] never moves a key under the test."""
    env = {k: v for k, v in env_with_repo().items() if k in ("PYTHONPATH", "PATH")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_STATE_HOME=str(tmp_path / "state"),
               TERM="xterm-256color")
    cmd = " ".join(shlex.quote(c) for c in gpudeck_cmd())
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    tmux("new-session", "-d", "-s", "demo", "-x", str(size[0]), "-y", str(size[1]),
         f"env -u COLUMNS -u LINES {assigns} {cmd} up -f {shlex.quote(fleet)} --view {view}; echo EXIT=$?; sleep 600")


def coloured(tmux: Tmux) -> str:
    """The screen with its colours (escape sequences), as capture-pane -e gives it."""
    return tmux("capture-pane", "-p", "-e", "-t", tmux.session)


def rows(screen: str, names: tuple[str, ...]) -> list[str]:
    """The names of the job rows on screen, top to bottom."""
    return [ln.split()[0] for ln in screen.splitlines() if ln.split() and ln.split()[0] in names]


def running(tmp_path, home, fleet: str, job: str) -> None:
    gpudeck("launch", job, "-f", fleet, env={"XDG_STATE_HOME": str(tmp_path / "state")})


@pytest.fixture
def two_jobs(tmp_path, home):
    """alpha, never launched (not started), and zeta, running: by name alpha is first, by state zeta."""
    fleet = fleet_of(tmp_path, home, {"alpha": "sleep 600", "zeta": "sleep 600"})
    running(tmp_path, home, fleet, "zeta")
    return fleet


def drawn(tmux: Tmux) -> str:
    # alpha, never launched, reads "not started" whole (it read "pending")
    return tmux.wait(lambda s: "JOB▲" in s and len(rows(s, ("alpha", "zeta"))) == 2 and " running " in s
                     and any(ln.startswith("alpha ") and " not started " in ln for ln in s.splitlines()) and s,
                     "the jobs table with alpha (not started) and zeta", timeout=60)


def test_colon_then_text_triggers_no_key(tmp_path, tmux, two_jobs):
    start(tmux, tmp_path, two_jobs)
    before = drawn(tmux)
    tmux.keys(":")
    tmux.wait(lambda s: "tab completes" in s, "the command line")
    # on the views each of these letters is a key: q quits, E sorts, d describes, j k move, G the last row
    tmux.keys("-l", "qEdjkG")
    screen = tmux.wait(lambda s: ":qEdjkG" in s and s, "the letters typed as text")
    assert rows(screen, ("alpha", "zeta")) == rows(before, ("alpha", "zeta")) and "JOB▲" in screen
    assert "STATE▲" not in screen and "job alpha on local" not in screen and "EXIT=" not in screen
    tmux.keys("Enter")  # no such command: said, and the views are as they were
    tmux.wait(lambda s: ":qEdjkG is no command" in s, "the unknown command said")
    tmux.keys(":")
    tmux.wait(lambda s: "tab completes" in s, "the command line again")
    tmux.keys("-l", "fle")
    # the line shows the suggestion greyed ("fle" then "et" in another colour) until tab takes it:
    # read with its colours, "fleet" is one run of text only once completed
    tmux.wait(lambda s: re.search(r":(?:\x1b\[[\d;]*m)+fle(?:\x1b\[[\d;]*m)+et", coloured(tmux)), "fle typed")
    tmux.keys("Tab")
    tmux.wait(lambda s: re.search(r":(?:\x1b\[[\d;]*m)+fleet\b", coloured(tmux)), "fle completed to fleet")
    tmux.keys("Enter")
    tmux.wait(lambda s: "NODE / GPU" in s and "● local" in s, "the fleet view")
    assert "EXIT=" not in tmux.screen()


@pytest.mark.parametrize("how", [":q", "F10"])
def test_colon_q_and_f10_quit(tmp_path, home, tmux, how):
    start(tmux, tmp_path, fleet_of(tmp_path, home, {"alpha": "sleep 600"}))
    tmux.wait(lambda s: "JOB▲" in s and "alpha" in s, "the console drawn", timeout=60)
    if how == ":q":
        tmux.keys(":")
        tmux.wait(lambda s: "tab completes" in s, "the command line")
        tmux.keys("-l", "q")
        tmux.keys("Enter")
    else:
        tmux.keys("F10")
    screen = tmux.wait(lambda s: "EXIT=" in s and s, f"{how} quitting", timeout=60)
    assert "EXIT=0" in screen and "Traceback" not in screen, screen


def test_k_moves_up_and_ctrl_k_asks_to_kill(tmp_path, tmux, two_jobs):
    start(tmux, tmp_path, two_jobs)
    drawn(tmux)
    tmux.keys("j", "d")  # down to zeta, and describe it: the cursor's row named
    tmux.wait(lambda s: "job zeta on local" in s, "j: the cursor on zeta")
    tmux.keys("Escape")
    tmux.wait(lambda s: "JOB▲" in s, "back to the jobs")
    tmux.keys("k")
    tmux.keys("d")
    screen = tmux.wait(lambda s: "job alpha on local" in s and s, "k: the cursor back on alpha")
    assert "Kill job" not in screen  # k moved; it asked nothing
    tmux.keys("Escape")
    tmux.wait(lambda s: "JOB▲" in s, "back to the jobs")
    tmux.keys("j", "C-k")
    tmux.wait(lambda s: "Kill job zeta on local?" in s, "ctrl-k: the kill question")
    tmux.keys("n")
    tmux.wait(lambda s: "kill of zeta cancelled" in s, "no: nothing killed")
    assert " running " in tmux.screen()


def test_shift_and_a_columns_letter_sorts_by_it(tmp_path, tmux, two_jobs):
    start(tmux, tmp_path, two_jobs)
    before = drawn(tmux)
    assert rows(before, ("alpha", "zeta")) == ["alpha", "zeta"]  # by name
    tmux.keys("E")  # STATE: the running job before the one never launched
    screen = tmux.wait(lambda s: "STATE▲" in s and s, "sorted by state")
    assert rows(screen, ("alpha", "zeta")) == ["zeta", "alpha"], screen
    tmux.keys("E")  # the same letter: the other way round
    screen = tmux.wait(lambda s: "STATE▼" in s and s, "sorted by state, reversed")
    assert rows(screen, ("alpha", "zeta")) == ["alpha", "zeta"], screen
    tmux.keys("J")  # JOB: by name again
    tmux.wait(lambda s: "JOB▲" in s and rows(s, ("alpha", "zeta")) == ["alpha", "zeta"], "sorted by name")


@pytest.mark.parametrize("key", ["Enter", "d"])
def test_enter_or_d_on_an_alert_shows_its_whole_reason_and_when_it_began(tmp_path, home, tmux, key):
    """At 80 columns the alerts table cuts a job's death; described, it is whole, with the day and
    the time it began (the time the SINCE column shows)."""
    fleet = fleet_of(tmp_path, home, {"crash-with-a-long-name": "exit 3"})
    running(tmp_path, home, fleet, "crash-with-a-long-name")
    reason = "job crash-with-a-long-name died (exit code 3) on attempt 1"
    start(tmux, tmp_path, fleet, view="alerts", size=(80, 24))
    table = tmux.wait(lambda s: re.search(r"^(\d\d:\d\d:\d\d) .*job died", s, re.M) and s, "the alert listed",
                      timeout=60)
    since = re.search(r"^(\d\d:\d\d:\d\d) .*job died", table, re.M).group(1)
    assert reason not in table  # cut at 80 columns
    tmux.keys(key)
    screen = tmux.wait(lambda s: "alert job_died on local" in s and s, "the alert described")
    assert reason in " ".join(screen.split()), screen
    assert re.search(rf"began +\d{{4}}-\d\d-\d\d {since} \(", screen), screen


def node(name: str, home) -> str:
    return f'[[nodes]]\nname = "{name}"\nlocal = true\nhome = {json.dumps(str(home))}\n'


def job(name: str, on: str) -> str:
    return f'[[jobs]]\nname = "{name}"\nkind = "command"\nnode = "{on}"\ncommand = ["sleep", "600"]\n'


@pytest.fixture
def homes(tmp_path):
    """Two nodes of this machine, each its own home (the second a node the file gains)."""
    a, b = tmp_path / "home-a", tmp_path / "home-b"
    yield a, b
    reap(a)
    reap(b)


def test_an_edit_of_the_fleet_file_adds_a_nodes_rows_to_an_open_console(tmp_path, homes, tmux):
    home_a, home_b = homes
    head = "[defaults]\nnvml = false\ninterval = 0.2\n\n"
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(head + node("node-a", home_a) + "\n" + job("alpha", "node-a"))
    start(tmux, tmp_path, str(fleet), view="jobs")
    tmux.wait(lambda s: "alpha" in s and "node-a" in s, "the jobs table with node-a's alpha")
    assert "beta" not in tmux.screen()

    # the operator adds a node and its job in another terminal; vim-style: a new file renamed over
    edited = tmp_path / "fleet.toml.new"
    edited.write_text(head + node("node-a", home_a) + "\n" + node("node-b", home_b) + "\n" + job("alpha", "node-a")
                      + "\n" + job("beta", "node-b"))
    edited.replace(fleet)
    said = tmux.wait(lambda s: "fleet file reloaded" in s and s, "the reload said", timeout=30)
    assert "node node-b added" in " ".join(said.split()), said
    # node-b's agent answered (both nodes up): its job's row reads what the node says, not "unknown"
    screen = tmux.wait(lambda s: "nodes 2/2" in s and any(ln.split()[:3] == ["beta", "node-b", "cmd"] and
                                                          "unknown" not in ln for ln in s.splitlines()) and s,
                       "node-b's job beta, as node-b's agent says")
    assert (home_b / "agent.sock").exists(), screen

    # an edit that does not parse: an error line with the file and the line; the last good version stays
    fleet.write_text(fleet.read_text() + '\n[[jobs]]\nname = "gamma"\nkind = "command"\ncomand = ["true"]\n')
    said = tmux.wait(lambda s: "fleet file not reloaded" in s and s, "the mistake said", timeout=30)
    assert re.search(r"fleet\.toml:\d+: \[\[jobs\]\] #3 \('gamma'\) has no key 'comand'", " ".join(said.split())), said
    assert "beta" in said and "gamma" not in [ln.split()[0] for ln in said.splitlines() if ln.split()]
