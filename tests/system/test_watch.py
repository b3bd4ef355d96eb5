"""The watcher end to end, as an operator uses it: `gpudeck watch start`, then nobody looks.

Real processes throughout: the CLI, the agent it hands over to (detached, in its own
session), `gpudeck generate` against a sim engine, jobs killed with kill -9, and a webhook
receiver on loopback. No console is connected while the jobs are killed."""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest

from support.generate import assert_exactly_once, read_shards, write_prompts
from support.watch import (TOKEN, agent_pid, events, tick_times, gpudeck_watch, job_state, stop_watch, wait_state,
                           watcher_pid, write_fleet)
from support.wait import wait_for

pytestmark = pytest.mark.system  # watchers, agents, sim-engines and a webhook receiver

HOOK_ENV = "GPUDECK_TEST_HOOK"


@pytest.fixture
def watched(home):
    """Whatever the test did: no watcher, agent or job of ``home`` is left."""
    yield home
    stop_watch(home)


class Outputs:
    """Every output of the test run, to look for the webhook token in."""

    def __init__(self, env: dict) -> None:
        self.env = {**env, "GPUDECK_AGENT_STDERR": "1"}  # the console's own agents' stderr too
        self.texts: list[tuple[str, str]] = []

    def run(self, *args: str, ok: bool = True):
        r = gpudeck_watch(*args, env=self.env)
        self.texts.append((f"gpudeck {' '.join(args)}", r.stdout + r.stderr))
        assert not ok or r.returncode == 0, f"gpudeck {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def assert_no_secret(self, home) -> None:
        files = ["watch.log", "watch.log.1", "audit.log", "events.jsonl", "events.jsonl.1", "history.db",
                 "watch-state.json"]
        texts = self.texts + [(f, (home / f).read_text(errors="replace")) for f in files if (home / f).exists()]
        texts += [(str(p), p.read_text(errors="replace")) for p in home.glob("jobs/*/*") if p.is_file()]
        texts += [(str(p), p.read_text(errors="replace")) for p in home.glob("outbox/*")]
        assert any(name == "watch.log" for name, _ in texts), "no agent log to check"
        for name, text in texts:
            assert TOKEN not in text, f"the webhook token is in {name}"


def _worker(home, job: str, attempt: int):
    """The generate process of the job's attempt (the wrapper's child), once it runs."""
    st = job_state(home, job)
    if st.get("attempt") != attempt or st.get("state") != "running":
        return None
    try:
        kids = psutil.Process(st["pid"]).children()
    except psutil.Error:
        return None
    def runs_generate(argv: list[str]) -> bool:  # python -m gpudeck.agents.workers.generate ...: not a
        return argv[1:3] == ["-m", "gpudeck.agents.workers.generate"]  # subshell of the wrapper that names it

    try:  # beside the log's keeper (agents/logcap.py, in a subshell of the wrapper), the wrapper's other child
        return next((k for k in kids if runs_generate(k.cmdline())), None)
    except psutil.Error:
        return None


@pytest.mark.timeout(400)
def test_a_generate_job_comes_back_after_each_kill9_with_no_console(tmp_path, home, watched, receiver, sim_engines):
    sim = sim_engines("--latency-ms", "15", "--out-tokens", "4-24")  # under max_tokens: useful records (exit 0)
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out"
    ids = write_prompts(prompts, 3000)
    env = {HOOK_ENV: receiver.url.replace("/hooks/", "/slack/")}
    fleet = write_fleet(tmp_path / "fleet.toml", home, notify=f'''
        [[notify]]
        url = "{receiver.url}"

        [[notify]]
        url_env = "{HOOK_ENV}"
        format = "slack"
        events = ["died", "restarted"]
    ''', jobs=f'''
        [[jobs]]
        name = "gen"
        kind = "generate"
        servers = ["{sim.url}"]
        prompts = "{prompts}"
        out = "{out}"
        concurrency = 4
        max_tokens = 32
        restart = "on-failure"
        restart_backoff_s = 0.2
    ''', interval=0.5)
    run = Outputs(env)
    started = run.run("watch", "start", "-f", str(fleet))
    assert "watching since" in started.stdout and "detached watcher pid" in started.stdout
    assert "restart on-failure" in started.stdout and "https://" not in started.stdout
    run.run("launch", "-f", str(fleet), "gen")  # and with that the last console is gone
    watcher = wait_for(lambda: watcher_pid(home), 30, what="the detached watcher")
    assert os.getsid(watcher) == watcher, "the watcher is not in a session of its own"

    def reported() -> int:  # what the job reports (progress.json): what the watcher counts progress by
        try:
            return json.loads((home / "jobs" / "gen" / "progress.json").read_text())["done"]
        except (OSError, ValueError, KeyError):
            return 0

    for attempt in (1, 2, 3):
        worker = wait_for(lambda: _worker(home, "gen", attempt), 90, what=f"attempt {attempt} to run")
        before = reported()
        wait_for(lambda: reported() >= before + 150, 120, what=f"attempt {attempt} to report progress")
        assert watcher_pid(home) == watcher and agent_pid(home) == watcher
        worker.send_signal(signal.SIGKILL)
        wait_for(lambda: job_state(home, "gen").get("attempt") == attempt + 1, 60, what=f"restart {attempt}")
    final = wait_state(home, "gen", lambda s: s["state"] == "exited", 240, what="the job to finish")
    assert final["attempt"] == 4 and final["exit_code"] == 0
    assert_exactly_once(read_shards(out), ids)

    receiver.wait(lambda ms: [m.get("kind") for m in ms if m["path"].startswith("/hooks/")].count("finished") == 1,
                  60, what="finished")
    hooks = [m for m in receiver.messages if m["path"].startswith("/hooks/")]
    kinds = [m["kind"] for m in hooks if m.get("job") == "gen"]
    assert kinds.count("died") == 3 and kinds.count("restarted") == 3, kinds
    assert kinds.index("died") < kinds.index("restarted")
    assert len({m["id"] for m in hooks}) == len(hooks), "a message arrived twice"
    slack = [m for m in receiver.messages if m["path"].startswith("/slack/")]
    assert len(slack) == 6 and all("gen" in m["text"] for m in slack), slack

    audit = [json.loads(line) for line in (home / "audit.log").read_text().splitlines()]
    restarts = [a for a in audit if a["action"] == "restart"]
    assert len(restarts) == 3 and all("exit code 137" in a["reason"] for a in restarts)
    timeline = events(home)
    assert sum(e["kind"] == "restarted" for e in timeline) == 3
    assert any(e["kind"] == "notified" for e in timeline)
    status = run.run("watch", "status", "-f", str(fleet), "--json")
    (node,) = json.loads(status.stdout).values()
    (job,) = [j for j in node["jobs"] if j["name"] == "gen"]
    assert node["detached"] and node["pid"] == watcher and job["restarts"] == 3 and job["restart"] == "on-failure"
    run.run("status", "-f", str(fleet), "--json")
    run.run("events", "-f", str(fleet), "--since", "1h")
    run.run("events", "-f", str(fleet), "--json")
    run.assert_no_secret(home)


def test_a_job_that_fails_at_once_gives_up_after_max_restarts(tmp_path, home, watched, receiver):
    fleet = write_fleet(tmp_path / "fleet.toml", home, notify=f'''
        [[notify]]
        url = "{receiver.url}"
        events = ["gave_up", "restarted"]
    ''', jobs='''
        [[jobs]]
        name = "boom"
        command = ["sh", "-c", "echo no; exit 2"]
        restart = "always"
        max_restarts = 3
        restart_backoff_s = 0.1
    ''')
    run = Outputs({})
    run.run("watch", "start", "-f", str(fleet))
    run.run("launch", "-f", str(fleet), "boom")
    receiver.wait(lambda ms: "gave_up" in [m.get("kind") for m in ms], 60, what="gave_up")
    st = job_state(home, "boom")
    assert st["attempt"] == 4 and st["state"] == "failed"  # the first run and three restarts
    # let the watcher tick on a while: it says it once, and starts nothing more
    seq = max(e["seq"] for e in events(home))
    history = len(tick_times(home))
    wait_for(lambda: len(tick_times(home)) >= history + 10, 30, what="ten more ticks")
    assert receiver.kinds().count("gave_up") == 1 and receiver.kinds().count("restarted") == 3
    assert job_state(home, "boom")["attempt"] == 4
    assert not [e for e in events(home) if e["seq"] > seq and e["kind"] in ("gave_up", "restarted")]
    status = run.run("watch", "status", "-f", str(fleet)).stdout
    assert "gave up after 3 restart(s)" in status and "3/3 restarts" in status


def test_a_watcher_killed_with_pending_messages_sends_them_when_it_is_back(tmp_path, home, watched, receiver):
    receiver.mode = "down"  # answers 503: every message stays in the outbox
    fleet = write_fleet(tmp_path / "fleet.toml", home, notify=f'''
        [[notify]]
        url = "{receiver.url}"
    ''', jobs='''
        [[jobs]]
        name = "steady"
        command = ["sh", "-c", "while true; do sleep 0.2; done"]
        restart = "on-failure"

        [[jobs]]
        name = "boom"
        command = ["sh", "-c", "exit 5"]
    ''')
    run = Outputs({})
    run.run("watch", "start", "-f", str(fleet))
    run.run("launch", "-f", str(fleet), "steady")
    run.run("launch", "-f", str(fleet), "boom")
    watcher = wait_for(lambda: watcher_pid(home), 30, what="the detached watcher")
    wait_for(lambda: any("died" in p.read_text() for p in (home / "outbox").glob("*.json")), 30,
             what="the died message in the outbox")
    wait_for(lambda: len(receiver.raw) >= 1, 30, what="a first (refused) delivery")
    steady = job_state(home, "steady")
    os.kill(watcher, signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(watcher) or psutil.Process(watcher).status() == psutil.STATUS_ZOMBIE,
             10, what="the watcher to die")
    receiver.mode = "up"
    again = run.run("watch", "start", "-f", str(fleet))  # a console brings it back: a new watcher
    new = wait_for(lambda: watcher_pid(home), 30, what="a new detached watcher")
    assert new != watcher and f"detached watcher pid {new}" in again.stdout
    receiver.wait(lambda ms: [m.get("kind") for m in ms].count("died") == 1, 60, what="the pending died message")
    now = job_state(home, "steady")
    assert (now["pid"], now["attempt"], now["state"]) == (steady["pid"], steady["attempt"], "running"), \
        "the job was relaunched instead of adopted"
    assert not list((home / "outbox").glob("*.json"))
    assert receiver.kinds().count("died") == 1
    assert any(e["kind"] == "action" and e.get("details", {}).get("action") == "adopt" for e in events(home)) or \
        "adopt" in (home / "audit.log").read_text()
    # one watcher per node: starting it again finds it
    again = run.run("watch", "start", "-f", str(fleet))
    assert watcher_pid(home) == new and f"detached watcher pid {new}" in again.stdout
    detached = [p for p in psutil.process_iter(["cmdline"])
                if "--detached" in (p.info["cmdline"] or []) and str(home) in (p.info["cmdline"] or [])]
    assert [p.pid for p in detached] == [new]
    run.assert_no_secret(home)


def test_watch_stop_lets_the_agent_go(tmp_path, home, watched):
    fleet = write_fleet(tmp_path / "fleet.toml", home, jobs='''
        [[jobs]]
        name = "a"
        command = ["sh", "-c", "sleep 30"]
    ''')
    run = Outputs({})
    run.run("watch", "start", "-f", str(fleet))
    watcher = wait_for(lambda: watcher_pid(home), 30, what="the detached watcher")
    stopped = run.run("watch", "stop", "-f", str(fleet))
    assert "not watching" in stopped.stdout
    wait_for(lambda: not psutil.pid_exists(watcher), 30, what="the watcher to exit after its last console")
    status = run.run("watch", "status", "-f", str(fleet))
    assert "not watching" in status.stdout
    assert json.loads((home / "watch.json").read_text())["watching"] is False


def test_events_follow_prints_what_happens_next(tmp_path, home, watched):
    import subprocess
    import sys

    from support import ROOT, env_with_repo

    fleet = write_fleet(tmp_path / "fleet.toml", home, jobs='''
        [[jobs]]
        name = "short"
        command = ["sh", "-c", "exit 4"]
    ''')
    run = Outputs({})
    run.run("watch", "start", "-f", str(fleet))
    follow = subprocess.Popen([sys.executable, "-m", "gpudeck.console", "events", "-f", str(fleet), "--follow",
                               "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env=env_with_repo())
    import queue
    import threading

    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in follow.stdout], daemon=True).start()
    try:
        first = json.loads(lines.get(timeout=60))  # the past 8 h first: the watch started
        assert first["kind"] == "watch" and first["node"] == "local"
        run.run("launch", "-f", str(fleet), "short")
        seen = []
        while not any(e["kind"] == "died" for e in seen):
            seen.append(json.loads(lines.get(timeout=60)))
        assert [e["seq"] for e in seen] == sorted(e["seq"] for e in seen)
        assert any(e["kind"] == "action" and e["job"] == "short" for e in seen)
    finally:
        follow.terminate()
        follow.wait(20)
