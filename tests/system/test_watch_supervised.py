"""Who watches the watcher: `watch start --supervise cron` on a node set up from nothing.

The node is a real user of this machine (so that "every process of the watcher's user" can
be ended, as a reboot does) reached over a real sshd, deployed with `gpudeck deploy` from
Debian's python3 and the local wheelhouse. A real cron daemon runs the user's crontab. With
no console and no gpudeck command run by hand, a watcher killed with kill -9 comes back
within cron's period and adopts the running job; after a simulated reboot (every process of
the user ended, then what cron runs at boot), the watcher is back and restarts the job its
policy says to. `watch stop` removes gpudeck's lines and nothing else of the user's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from support.nodes import WHEELHOUSE, Laptop
from support.wait import wait_for

CRON = shutil.which("cron") or "/usr/sbin/cron"
DEBIAN_PYTHON = Path("/usr/bin/python3")


def _missing() -> str:
    if os.geteuid() != 0:
        return "needs root (a user of its own, a cron daemon)"
    for what, ok in (("the cron package (cron, crontab)", Path(CRON).exists() and shutil.which("crontab")),
                     ("useradd", shutil.which("useradd")), ("/usr/bin/python3 with venv", DEBIAN_PYTHON.exists()),
                     (f"the wheelhouse at {WHEELHOUSE} (`make test`)", (WHEELHOUSE / ".done").exists())):
        if not ok:
            return f"needs {what}"
    return ""


pytestmark = [pytest.mark.system, pytest.mark.skipif(bool(_missing()), reason=_missing() or "-")]


def _as(user: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["su", "-s", "/bin/sh", user, "-c", command], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _watcher(home: Path):
    """The detached watcher of ``home``: the lock holder, if its command line says --detached."""
    try:
        pid = int((home / "agent.lock").read_text().split()[0])
        cmd = psutil.Process(pid).cmdline()
    except (OSError, ValueError, IndexError, psutil.Error):
        return None
    return pid if "--detached" in cmd else None


def _audit(home: Path, action: str, job: str, after: float) -> list[dict]:
    out = []
    for line in (home / "audit.log").read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("action") == action and e.get("job") == job and e.get("t", 0) > after:
            out.append(e)
    return out


@pytest.fixture
def node_user():
    name = f"gdw{os.getpid() % 100000}"
    base = Path(f"/tmp/{name}")  # outside pytest's 0700 tmp: the user must reach its home
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(mode=0o755)
    subprocess.run(["userdel", "-r", name], capture_output=True)
    subprocess.run(["useradd", "-m", "-d", str(base / "home"), "-s", "/bin/sh", name], check=True)
    subprocess.run(["usermod", "-p", "*", name], check=True)  # no password, but not locked: ssh keys work
    started = None
    if not any(p.info["name"] == "cron" for p in psutil.process_iter(["name"])):
        started = subprocess.Popen([CRON, "-f"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield name, base / "home"
    subprocess.run(["crontab", "-r", "-u", name], capture_output=True)
    subprocess.run(["pkill", "-9", "-u", name], capture_output=True)
    wait_for(lambda: not any(p.info["username"] == name for p in psutil.process_iter(["username"])), 30,
             what="the user's processes gone")
    subprocess.run(["userdel", "-r", name], capture_output=True)
    shutil.rmtree(base, ignore_errors=True)
    if started is not None:
        started.send_signal(signal.SIGTERM)
        started.wait(10)


def test_a_watcher_killed_or_rebooted_comes_back_through_cron_and_adopts_the_job(node_user, tmp_path, receiver):
    user, user_home = node_user
    home = user_home / ".gpudeck"
    laptop = Laptop(tmp_path, {"w1": None}, user=user, python3=DEBIAN_PYTHON, keys_dir=user_home.parent)
    try:
        (laptop.dir / "fleet.toml").write_text(
            '[defaults]\nhost_keys = "accept-new"\nnvml = false\n\n[[nodes]]\nname = "w1"\n\n'
            '[[jobs]]\nname = "sleeper"\nnode = "w1"\ncommand = "exec sleep 3600"\nrestart = "on-failure"\n'
            'restart_backoff_s = 0\n\n'
            f'[heartbeat]\nurl = "http://127.0.0.1:{receiver.port}/ping/{{node}}"\nevery = 2\n')
        laptop.gpudeck("gpudeck deploy -f fleet.toml")
        assert _as(user, "echo '0 3 * * * true # my own line' | crontab -").returncode == 0
        laptop.gpudeck("gpudeck launch sleeper -f fleet.toml")
        r = laptop.gpudeck("gpudeck watch start -f fleet.toml --supervise cron")
        assert "supervisor: cron (healthy)" in r.stdout, r.stdout
        lines = _as(user, "crontab -l").stdout
        assert "# my own line" in lines and lines.count("--ensure") == 2 and "@reboot" in lines, lines
        first = wait_for(lambda: _watcher(home), 60, what="the detached watcher")
        job_pid = json.loads((home / "jobs/sleeper/state.json").read_text())["pid"]

        # kill -9 of the watcher, no console, nothing run by hand: cron brings it back
        killed_at = time.time()
        os.kill(first, signal.SIGKILL)
        second = wait_for(lambda: (p := _watcher(home)) not in (None, first) and p, 150,
                          what="a new watcher started by cron")
        back_s = time.time() - killed_at
        wait_for(lambda: _audit(home, "adopt", "sleeper", killed_at), 30, what="the job adopted")
        back_at = time.time()
        try:
            wait_for(lambda: any(t > back_at and path == "/ping/w1" for t, path in list(receiver.gets)), 30,
                     what="the heartbeat back with the watcher")
        except AssertionError:
            raise AssertionError(f"pings: {list(receiver.gets)[-5:]}; watch.log: "
                                 f"{(home / 'watch.log').read_text()[-3000:]}") from None
        assert psutil.pid_exists(job_pid)  # adopted, not relaunched
        print(f"\nwatcher back {back_s:.1f} s after kill -9 (cron's period: 60 s)")

        # a reboot: every process of the user ends, then what cron runs at boot
        subprocess.run(["pkill", "-9", "-u", user], check=True)
        wait_for(lambda: not psutil.pid_exists(second) and not psutil.pid_exists(job_pid), 30, what="all gone")
        rebooted_at = time.time()
        at_boot = next(ln for ln in _as(user, "crontab -l").stdout.splitlines() if ln.startswith("@reboot"))
        command = at_boot[len("@reboot"):].split(" # gpudeck-watch")[0].strip()
        assert _as(user, command).returncode == 0
        wait_for(lambda: _watcher(home), 60, what="the watcher after the reboot")
        # the job died with the machine: lost, and its on-failure policy relaunches it
        wait_for(lambda: _audit(home, "relaunch", "sleeper", rebooted_at), 90, what="the job restarted")

        r = laptop.gpudeck("gpudeck watch stop -f fleet.toml")
        lines = _as(user, "crontab -l").stdout
        assert "--ensure" not in lines and "# my own line" in lines, lines
    finally:
        laptop.gpudeck("gpudeck kill sleeper -f fleet.toml --grace 1", check=False, timeout=60)
        laptop.stop()


def test_a_supervisor_that_does_not_work_here_is_refused_with_why(tmp_path, fleet_home):
    """systemd without a user manager (as in a container): `--supervise systemd` says so and
    changes nothing; auto falls through to the next that works."""
    from support.cli import gpudeck

    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{fleet_home}"\nnvml = false\n')
    r = subprocess.run(["systemctl", "--user", "show-environment"], capture_output=True, timeout=10) \
        if shutil.which("systemctl") else None
    if r is not None and r.returncode == 0:
        pytest.skip("systemctl --user works on this machine: nothing to refuse")
    r = gpudeck("watch", "start", "-f", str(fleet), "--supervise", "systemd", check=False)
    assert r.returncode != 0 and "systemctl --user does not work here" in r.stdout + r.stderr
    assert not json.loads((fleet_home / "watch.json").read_text()).get("watching") \
        if (fleet_home / "watch.json").exists() else True
