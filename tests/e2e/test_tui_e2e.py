"""End to end: `gpudeck demo` in a real terminal (tmux), driven by keys, read back with
`tmux capture-pane`. The demo runs its two agents (nodes b200 and pro6000, simulated GPUs),
simulated SGLang servers and generation job on this machine, in a directory of the test's own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from support.tmux import Tmux, select
from support.tui import ROOT, reap
from support.wait import wait_for

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

DONE = re.compile(r"([\d,.]+k?)/100\.0k")
GPU_ROW = re.compile(r"^  GPU\d+ .*[━╸].* [\d.]+/[\d.]+G", re.M)


def parse_count(text: str) -> int:
    return int(float(text[:-1]) * 1000) if text.endswith("k") else int(text.replace(",", ""))


def gen_line(screen: str) -> str:
    return next((ln for ln in screen.splitlines() if ln.startswith("generate ")), "")


def gen_done(screen: str) -> int:
    m = DONE.search(gen_line(screen))
    return parse_count(m.group(1)) if m else -1


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(f"gpudeck-test-{os.getpid()}")
    yield t
    subprocess.run(["tmux", "-L", t.socket, "kill-server"], capture_output=True)
    for node in ("b200", "pro6000"):
        reap(tmp_path / "demo" / f"home-{node}")


def test_demo_in_tmux_kill_then_relaunch_resumes(tmp_path, tmux):
    demo = tmp_path / "demo"
    env = f"PYTHONPATH={ROOT} TERM=xterm-256color"
    cmd = (f"cd {ROOT} && env -u COLUMNS -u LINES {env} {sys.executable} -m gpudeck.console demo --dir {demo}; "
           f"echo DEMO-EXITED $?; sleep 600")
    tmux("new-session", "-d", "-s", "demo", "-x", "120", "-y", "40", cmd)

    # tokens/s, an ETA and done counts climbing
    tmux.wait(lambda s: re.search(r"[\d,.]+ tok/s\W{1,3}ETA \d", s.splitlines()[0] if s else ""),
              "tokens/s and an ETA in the header", timeout=90)
    first = tmux.wait(lambda s: gen_done(s) > 0 and gen_done(s), "the generation job's done count")
    tmux.wait(lambda s: gen_done(s) > first, "done climbing")
    assert "running" in gen_line(tmux.screen())

    # the fleet view: both nodes, a row per GPU with its memory bar, and the two alerts' causes
    tmux.keys("1")
    fleet = tmux.wait(lambda s: len(GPU_ROW.findall(s)) == 11 and s, "11 GPU rows with memory bars")
    assert "160.4/183.0G" in fleet and "sglang-0" in fleet and "(no job)" in fleet and "eval-b, train-a" in fleet
    tmux.keys("2")

    # ctrl-k (k9s's kill) on a server: its 160 GiB of (simulated) B200 memory come back
    tmux.wait(lambda s: "sglang-0 " in s and " NODE " in s and " KIND " in s, "the jobs table")
    select(tmux, "sglang-0")
    tmux.keys("C-k")
    tmux.wait(lambda s: "Kill job sglang-0 on b200?" in s, "the server's kill dialog")
    tmux.keys("y")
    tmux.wait(lambda s: re.search(r"freed 160\.0 GiB in \d+\.\d s", s), "the kill verdict with the GiB freed")

    # ctrl-k on the generation job asks, then kills
    select(tmux, "generate")
    tmux.keys("C-k")
    tmux.wait(lambda s: "Kill job generate on b200?" in s, "the kill dialog")
    tmux.keys("y")
    tmux.wait(lambda s: " killed " in gen_line(s), "generate killed")
    screen = tmux.screen()
    stopped = gen_done(screen)
    assert "stopped in" in screen or "freed" in screen  # the agent's verdict

    # r relaunches; the job resumes from its done-set
    tmux.keys("r")
    tmux.wait(lambda s: " running " in gen_line(s) and re.search(r" 2 +", gen_line(s)), "gen running as attempt 2")
    tmux.wait(lambda s: gen_done(s) > stopped, "progress after the relaunch")
    tmux.keys("3")
    tmux.wait(lambda s: re.search(r"resum(e|ing):", s), "the log saying it resumed")

    # q quits; the demo stops its jobs
    tmux.keys("q")
    tmux.wait(lambda s: "DEMO-EXITED 0" in s, "the demo exiting")
    assert "jobs stopped" in tmux.screen()
    assert (demo / "out" / "done.txt").exists()
    done_lines = (demo / "out" / "done.txt").read_text().split()
    assert len(done_lines) == len(set(done_lines))  # resumed, not redone


def demo_processes(demo, pids: tuple = ()) -> list:
    """Every process of the demo under ``demo``: its console, its agents and the process of no
    job (their command lines name the directory), its jobs (their process groups) and ``pids``
    (the process of no job, once ``sleep``); not the test's terminal (tmux) nor the shell in it."""
    import json

    import psutil

    groups = set()
    for state in demo.glob("home-*/jobs/*/state.json"):
        try:
            groups.add(json.loads(state.read_text()).get("pgid"))
        except (OSError, ValueError):
            pass
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmdline = p.info["cmdline"] or []
        if cmdline and (os.path.basename(cmdline[0]) == "tmux" or "DEMO-EXITED" in " ".join(cmdline)):
            continue
        try:
            if any(str(demo) in arg for arg in cmdline) or os.getpgid(p.pid) in groups or p.pid in pids:
                found.append(p)
        except (psutil.Error, OSError):
            pass
    return found


@pytest.mark.parametrize("how", ["terminal closed", "SIGTERM"])
def test_the_demos_processes_end_with_its_console(tmp_path, tmux, how):
    """Closing the demo's terminal (SIGHUP) or a SIGTERM to its console stops what it started,
    as `q` does: a laptop is left with nothing of the demo running."""
    import contextlib
    import json
    import signal

    import psutil

    from gpudeck.console.demo import demo_jobs, has_router

    demo = tmp_path / "demo"
    env = f"PYTHONPATH={ROOT} TERM=xterm-256color"
    tmux("new-session", "-d", "-s", "demo", "-x", "120", "-y", "40",
         f"cd {ROOT} && env -u COLUMNS -u LINES {env} {sys.executable} -m gpudeck.console demo --dir {demo}; "
         f"echo DEMO-EXITED $?; sleep 600")

    def running(job: str) -> bool:
        try:
            rec = json.loads(next(demo.glob(f"home-*/jobs/{job}/state.json")).read_text())
        except (StopIteration, OSError, ValueError):
            return False
        return rec.get("state") == "running" and rec.get("pgid") is not None

    def stranger_pid() -> int:
        try:
            return int((demo / "stranger.pid").read_text())
        except (OSError, ValueError):
            return 0

    jobs = demo_jobs(has_router())
    tmux.wait(lambda s: all(running(j) for j in jobs) and stranger_pid(), "every demo job running", timeout=120)
    stranger = stranger_pid()
    started = demo_processes(demo, (stranger,))
    assert len(started) > len(jobs) and stranger in {p.pid for p in started}, [p.info["cmdline"] for p in started]
    if how == "SIGTERM":
        (console,) = [p for p in started if "gpudeck.console" in p.info["cmdline"] and "demo" in p.info["cmdline"]]
        console.send_signal(signal.SIGTERM)
        tmux.wait(lambda s: "DEMO-EXITED 143" in s, "the demo exiting with 143", timeout=120)
    else:
        tmux("kill-server")  # the terminal goes away: its processes get SIGHUP
    try:
        wait_for(lambda: not demo_processes(demo, (stranger,)), timeout=120, interval=0.5,
                 what="the demo's processes to end")
    except AssertionError:
        left = demo_processes(demo, (stranger,))
        for p in left:  # the test's own leftovers: gone either way
            with contextlib.suppress(psutil.Error):
                p.kill()
        raise AssertionError(f"{len(left)} processes of the demo left after its console ended ({how}):\n"
                             + "\n".join(" ".join(p.info["cmdline"] or ())[:120] for p in left)) from None
