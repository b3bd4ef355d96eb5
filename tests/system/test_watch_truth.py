"""What the watcher's commands say is what the node said ("Nothing on screen lies"): `watch
start` with a console open, settings that changed under a running watcher, the watcher's own
death and return, a `gave_up` acknowledged. Real agents, real CLI, real processes."""

from __future__ import annotations

import json

import pytest

from support.watch import agent_pid, gpudeck_watch, stop_watch, write_fleet

pytestmark = pytest.mark.system  # real agents, the CLI, detached watchers


@pytest.fixture
def watched(home):
    yield home
    stop_watch(home)


def test_watch_start_with_a_console_open_answers_at_once_and_says_who_takes_over(tmp_path, home, watched,
                                                                                  start_agent):
    fleet = write_fleet(tmp_path / "fleet.toml", home, jobs='''
        [[jobs]]
        name = "a"
        command = ["sh", "-c", "sleep 30"]
    ''')
    console = start_agent(extra_args=("--node", "local"))  # a console connected, as `gpudeck up` is
    r = gpudeck_watch("watch", "start", "-f", str(fleet))
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert "UNREACHABLE" not in r.stdout
    assert "takes over when the last console closes" in r.stdout, r.stdout
    assert f"agent pid {console.proc.pid}" in r.stdout
    # it is set up, wholly: the flag is on and the console's agent still serves the node
    assert json.loads((home / "watch.json").read_text())["watching"] is True
    assert agent_pid(home) == console.proc.pid
    doc = json.loads(gpudeck_watch("watch", "status", "-f", str(fleet), "--json").stdout)
    assert doc["local"]["watching"] is True and doc["local"]["detached"] is False


def test_a_node_that_answers_and_refuses_is_never_called_unreachable(tmp_path, home, watched):
    """systemd without a user manager (as in a container): the node answered, and refused."""
    import shutil
    import subprocess

    if shutil.which("systemctl") and subprocess.run(["systemctl", "--user", "show-environment"],
                                                    capture_output=True, timeout=10).returncode == 0:
        pytest.skip("systemctl --user works on this machine: nothing to refuse")
    fleet = write_fleet(tmp_path / "fleet.toml", home, jobs="")
    r = gpudeck_watch("watch", "start", "-f", str(fleet), "--supervise", "systemd")
    assert r.returncode == 1, f"{r.stdout}\n{r.stderr}"
    assert "UNREACHABLE" not in r.stdout and "local: REFUSED (" in r.stdout, r.stdout
    assert "systemctl --user does not work here" in r.stdout
    assert not json.loads((home / "watch.json").read_text()).get("watching") if (home / "watch.json").exists() else 1
    doc = json.loads(gpudeck_watch("watch", "start", "-f", str(fleet), "--supervise", "systemd", "--json").stdout)
    assert doc["local"]["state"] == "refused"


def test_a_detached_watcher_that_never_answers_leaves_no_watch_half_set_up(tmp_path, home, watched):
    """`watch start --supervise cron` where the detached watcher never comes up (here it stops
    at once, as one whose python cannot import would). Within --timeout, `watch start` says so
    (exit 1, ERROR, never UNREACHABLE) and has undone all it did: the watching flag is off, the
    crontab lines it wrote are gone, and no agent is left for the home.

    The user's crontab is this machine's, shared with everything else: `crontab` here is a
    stand-in on PATH that keeps it in the test's directory, and a process named cron stands
    for the daemon the agent checks runs. The watcher's failure is a sitecustomize on the
    agent's PYTHONPATH that stops any `--detached` agent before it starts."""
    import os
    import shutil
    import subprocess

    import psutil

    from support import ROOT
    from support.wait import wait_for

    bin_dir, site = tmp_path / "bin", tmp_path / "site"
    bin_dir.mkdir()
    site.mkdir()
    table, calls = tmp_path / "crontab.txt", tmp_path / "crontab.calls"
    (bin_dir / "crontab").write_text(f"""#!/bin/sh
echo "$*" >> {calls}
case "$1" in
  -l) [ -f {table} ] && exec cat {table}; echo "no crontab for $(id -un)" >&2; exit 1 ;;
  -) cat > {table}.tmp && mv {table}.tmp {table} ;;
  *) echo "crontab stand-in: $*" >&2; exit 2 ;;
esac
""")
    (bin_dir / "crontab").chmod(0o755)
    (site / "sitecustomize.py").write_text(
        "import os, sys\n"
        "if '--detached' in sys.argv:\n"
        "    sys.stderr.write('agent ERROR the watcher cannot start (the test stops it)\\n')\n"
        "    os._exit(3)\n")
    daemon = None
    if not any(p.info["name"] in ("cron", "crond") for p in psutil.process_iter(["name"])):
        shutil.copy(shutil.which("sleep"), bin_dir / "cron")
        daemon = subprocess.Popen([str(bin_dir / "cron"), "600"])
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": f"{ROOT}{os.pathsep}{site}"}
    fleet = write_fleet(tmp_path / "fleet.toml", home, jobs="")
    try:
        r = gpudeck_watch("watch", "start", "-f", str(fleet), "--supervise", "cron", "--timeout", "3", env=env)
        assert r.returncode == 1, f"{r.stdout}\n{r.stderr}"
        assert "UNREACHABLE" not in r.stdout, r.stdout
        assert "local: ERROR (the detached watcher did not take over within 3 s" in r.stdout, r.stdout
        assert "watching is off again" in r.stdout and str(home / "watch.log") in r.stdout, r.stdout
        assert "the watcher cannot start" in (home / "watch.log").read_text()
        # it was set up (the crontab written with the home's lines) and wholly undone
        assert calls.read_text().splitlines().count("-") == 2, calls.read_text()
        assert "gpudeck-watch" not in table.read_text(), table.read_text()
        doc = json.loads((home / "watch.json").read_text())
        assert doc["watching"] is False and not doc.get("supervisor"), doc
        wait_for(lambda: not psutil.pid_exists(agent_pid(home) or 0), 30, what="no agent left for the home")
    finally:
        if daemon is not None:
            daemon.kill()
            daemon.wait()


def _pings(receiver, after: float, fail: bool = False) -> list[float]:
    return [t for t, path in list(receiver.gets) if t > after and path.startswith("/ping/") and
            path.endswith("/fail") == fail]


def test_ack_clears_a_gave_up_and_the_heartbeat_pings_plain_again(tmp_path, home, watched, receiver):
    import time

    from support.watch import events, job_state
    from support.wait import wait_for

    fleet = write_fleet(tmp_path / "fleet.toml", home, '''
        [[jobs]]
        name = "crash"
        command = "exit 1"
        restart = "on-failure"
        max_restarts = 1
        restart_backoff_s = 0
    ''', notify=f'''
        [heartbeat]
        url = "http://127.0.0.1:{receiver.port}/ping/{{node}}"
        every = 1
    ''')
    f = ["-f", str(fleet)]
    assert gpudeck_watch("watch", "start", *f).returncode == 0
    assert gpudeck_watch("launch", "crash", *f).returncode == 0
    wait_for(lambda: _pings(receiver, 0, fail=True), 90, what="a /fail ping")
    attempt = job_state(home, "crash")["attempt"]
    assert "failing: gave_up" in gpudeck_watch("watch", "status", *f).stdout

    r = gpudeck_watch("ack", "crash", *f)
    acked_at = time.time()
    assert r.returncode == 0 and "crash: gave_up acknowledged" in r.stdout, f"{r.stdout}\n{r.stderr}"
    wait_for(lambda: _pings(receiver, acked_at), 30, what="a plain ping after the ack")
    status = gpudeck_watch("watch", "status", *f).stdout
    assert "failing:" not in status and "acknowledged" in status, status
    assert [e for e in events(home) if e["kind"] == "acknowledged" and e["job"] == "crash"]
    assert job_state(home, "crash")["attempt"] == attempt  # nothing was started
    again = gpudeck_watch("ack", "crash", *f)
    assert again.returncode == 0 and "acknowledged already" in again.stdout
    # a job that has not given up has nothing to acknowledge: refused, and said why
    write_fleet(tmp_path / "fleet.toml", home, '''
        [[jobs]]
        name = "crash"
        command = "exit 1"

        [[jobs]]
        name = "fine"
        command = "sleep 30"
    ''')
    no = gpudeck_watch("ack", "fine", *f)
    assert no.returncode == 1 and "has not given up restarting" in no.stdout + no.stderr


def test_a_watcher_killed_and_brought_back_by_cron_is_in_the_timeline_and_notified(tmp_path, home, watched,
                                                                                   receiver):
    """kill -9 the detached watcher, then run the command of gpudeck's crontab line, as cron
    does each minute (this machine's crontab is left alone): the watcher that comes back
    writes when the last one was down, who restarted it and the jobs it adopted."""
    import os
    import re
    import signal
    import subprocess
    import time

    import psutil

    from gpudeck.agents.watch.supervise import cron_lines
    from support import env_with_repo
    from support.watch import events, watcher_pid
    from support.wait import wait_for

    fleet = write_fleet(tmp_path / "fleet.toml", home, notify=f'''
        [[notify]]
        url = "{receiver.url}"
        events = ["watcher_restarted"]
    ''', jobs='''
        [[jobs]]
        name = "a"
        command = ["sh", "-c", "while true; do sleep 0.2; done"]

        [[jobs]]
        name = "b"
        command = ["sh", "-c", "while true; do sleep 0.2; done"]
    ''')
    f = ["-f", str(fleet)]
    assert gpudeck_watch("watch", "start", *f).returncode == 0
    for job in ("a", "b"):
        assert gpudeck_watch("launch", job, *f).returncode == 0
    watcher = wait_for(lambda: watcher_pid(home), 30, what="the detached watcher")
    wait_for(lambda: (home / "watcher-life.json").exists(), 30, what="the watcher's note")
    wait_for(lambda: json.loads((home / "watcher-life.json").read_text())["pid"] == watcher, 30,
             what="the detached watcher's own note")
    os.kill(watcher, signal.SIGKILL)
    killed_at = time.time()
    wait_for(lambda: not psutil.pid_exists(watcher) or psutil.Process(watcher).status() == psutil.STATUS_ZOMBIE,
             10, what="the watcher to die")
    assert not [e for e in events(home) if e["kind"] == "watcher_restarted"]

    line = cron_lines(home, ["--node", "local", "--interval", "0.2", "--no-nvml"])[1]
    command = line.split(" ", 5)[5].rsplit(" # gpudeck-watch", 1)[0]  # "* * * * * CMD # tag": what cron runs
    subprocess.run(["sh", "-c", command], check=True, timeout=60, env=env_with_repo())
    back = wait_for(lambda: watcher_pid(home), 30, what="the watcher back")
    assert back != watcher
    sent = receiver.wait(lambda ms: [m for m in ms if m.get("kind") == "watcher_restarted"], 60,
                         what="watcher_restarted")[0]
    m = re.fullmatch(r"watcher down from (\d\d:\d\d:\d\d) to (\d\d:\d\d:\d\d) \((\d+)s\), restarted by cron, "
                     r"2 jobs adopted", sent["message"])
    assert m, sent["message"]
    (ev,) = [e for e in events(home) if e["kind"] == "watcher_restarted"]
    d = ev["details"]
    assert d["down_from"] <= killed_at <= d["down_to"] and d["dead_pid"] == watcher
    assert d["restarted_by"] == "cron" and d["adopted"] == ["a", "b"]
    # a watcher that hands over or stops cleanly is no death: stop, and start again by hand
    assert gpudeck_watch("watch", "stop", *f).returncode == 0
    wait_for(lambda: not psutil.pid_exists(back), 30, what="the watcher to exit after watch stop")
    assert gpudeck_watch("watch", "start", *f).returncode == 0
    wait_for(lambda: watcher_pid(home), 30, what="a new watcher")
    assert len([e for e in events(home) if e["kind"] == "watcher_restarted"]) == 1


@pytest.mark.parametrize("text, line, key", [
    ('[heartbeat]\nurl = "https://hc-ping.com/abc"\nevery = "https://hc-ping.com/S3CRET-uuid"\n', 3, "'every'"),
    ('[heartbeat]\nurl = "https://hc-ping.com/abc"\nevery = "hc-ping.com/S3CRET-uuid"\n', 3, "'every'"),
    ('[heartbeat]\nurl = "https://hc-ping.com/abc"\nmethod = "https://hc-ping.com/S3CRET-uuid"\n', 3, "'method'"),
    ('[[jobs]]\nname = "a"\ncommand = ["x"]\nrestart_on_stall = "https://hooks.example/S3CRET"\n', 1,
     "'restart_on_stall'"),
    ('[[jobs]]\nname = "a"\nkind = "https://hooks.example/S3CRET"\n', 3, "'kind'"),
    ('[[jobs]]\nname = "a"\ncommand = ["x"]\ndeadline = "https://hooks.example/S3CRET"\n', 1, "'deadline'"),
])
def test_no_fleet_file_mistake_echoes_a_value_that_may_be_a_url(tmp_path, text, line, key):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(text)
    r = gpudeck_watch("status", "-f", str(fleet))
    assert r.returncode == 2 and f"fleet.toml:{line}:" in r.stderr and key in r.stderr, r.stderr
    assert "S3CRET" not in r.stdout + r.stderr and "not shown" in r.stderr, r.stderr


def _crontab_test_missing() -> str:
    import os
    import shutil
    from pathlib import Path

    if os.geteuid() != 0:
        return "needs root (a user of its own, whose crontab it changes)"
    if not (shutil.which("crontab") and shutil.which("useradd") and Path("/usr/bin/python3").exists()):
        return "needs crontab, useradd and /usr/bin/python3"
    return ""


@pytest.mark.skipif(bool(_crontab_test_missing()), reason=_crontab_test_missing() or "-")
def test_two_homes_registered_with_cron_at_once_both_keep_their_lines(tmp_path):
    """Two processes of one user each register 25 homes with cron (what the agent does on
    `watch start --supervise cron`) at the same time, against the real crontab: every home's
    two lines are there at the end. A throwaway user, so that no real crontab is touched; the
    stdlib-only supervise module runs under Debian's python3 from this tree."""
    import os
    import shutil
    import subprocess
    from pathlib import Path

    from support import ROOT

    name = f"gdc{os.getpid() % 100000}"
    base = Path(f"/tmp/{name}")  # outside pytest's 0700 tmp: the user must reach it
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(mode=0o755)
    (base / "pp").mkdir(mode=0o755)
    (base / "pp" / "gpudeck").symlink_to(ROOT)
    subprocess.run(["userdel", "-r", name], capture_output=True)
    subprocess.run(["useradd", "-m", "-d", str(base / "home"), "-s", "/bin/sh", name], check=True)
    script = ("import sys; from pathlib import Path; from gpudeck.agents.watch.supervise import install\n"
              "for i in range(25): install('cron', Path(f'/tmp/{sys.argv[1]}-{i}'), ['--node', 'n'])\n")
    try:
        procs = [subprocess.Popen(["su", "-s", "/bin/sh", name, "-c",
                                   f"cd /tmp && PYTHONPATH={base / 'pp'} /usr/bin/python3 -c \"$0\" {side}",
                                   script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL) for side in ("left", "right")]
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err
        text = subprocess.run(["crontab", "-l", "-u", name], capture_output=True, text=True, check=True).stdout
        missing = [f"{side}-{i}" for side in ("left", "right") for i in range(25)
                   if sum(ln.endswith(f"# gpudeck-watch /tmp/{side}-{i}") for ln in text.splitlines()) != 2]
        assert not missing, f"homes whose lines were lost: {missing}"
    finally:
        subprocess.run(["crontab", "-r", "-u", name], capture_output=True)
        subprocess.run(["userdel", "-r", name], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_a_node_key_changed_under_a_running_watcher_is_named_and_applied_by_watch_start(tmp_path, home, watched):
    import psutil

    from support.watch import watcher_pid
    from support.wait import wait_for

    jobs = '''
        [[nodes]]
        name = "gpu1"
        local = true

        [[jobs]]
        name = "a"
        node = "gpu1"
        command = ["sh", "-c", "while true; do sleep 0.2; done"]
    '''
    fleet = write_fleet(tmp_path / "fleet.toml", home, jobs=jobs)
    f = ["-f", str(fleet)]
    assert gpudeck_watch("watch", "start", *f).returncode == 0
    assert gpudeck_watch("launch", "a", *f).returncode == 0
    old = wait_for(lambda: watcher_pid(home), 30, what="the detached watcher")
    prom = tmp_path / "textfile"
    prom.mkdir()
    fleet.write_text(fleet.read_text().replace("local = true\n", f'local = true\ntextfile_dir = "{prom}"\n', 1))

    status = gpudeck_watch("watch", "status", *f).stdout
    assert "STALE settings" in status and f"--textfile-dir {prom}" in status, status
    assert f"apply with: gpudeck watch start -f {fleet} gpu1" in status

    r = gpudeck_watch("watch", "start", *f)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    new = wait_for(lambda: (p := watcher_pid(home)) != old and p, 30, what="a watcher with the new settings")
    cmd = psutil.Process(new).cmdline()
    assert cmd.count("--home") == 1 and "--textfile-dir" in cmd and str(prom) in cmd, cmd
    wait_for(lambda: (prom / "gpudeck.prom").exists(), 30, what="the Prometheus file")
    assert "STALE" not in gpudeck_watch("watch", "status", *f).stdout
    # what the node's supervisor starts next (cron's line, the next handover) has them too
    assert "--textfile-dir" in json.loads((home / "watch.json").read_text())["agent_args"]
    assert job_state_pid_kept(home, "a")


def job_state_pid_kept(home, job: str) -> bool:
    """The job was adopted by the new watcher, not relaunched: still its first attempt."""
    from support.watch import job_state
    st = job_state(home, job)
    return st.get("attempt") == 1 and st.get("state") == "running"
