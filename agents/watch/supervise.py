"""Who watches the watcher: the node's own supervisor, never a keeper process of ours.

`gpudeck watch start` registers the home's watcher with one of:

- **systemd** (where ``systemctl --user`` answers): a user unit
  ``~/.config/systemd/user/gpudeck-watch-<id>.service`` running the detached watcher in the
  foreground with ``Restart=always``, enabled for the user's default target; ``loginctl
  enable-linger`` keeps the user's manager (and so the unit) running with no login session,
  and where the user may not run it, the status says what an admin must run.
- **cron** (where ``crontab`` works and a cron daemon runs): two lines in the user's crontab,
  each tagged with the home: ``@reboot`` and every minute, both ``python -m gpudeck.agents
  --home H --ensure``: start a detached watcher when the home is watched and none is alive
  (under the agent lock, agents/node/agent.py), else do nothing. A watcher killed with kill -9 is
  back within a minute and adopts the jobs.
- **none**: nothing registered (the old behaviour: a console or `watch start` restarts it).

``watch stop`` removes what was added: the unit, or the tagged lines, nothing else of the user's.
The crontab is read, changed and written back whole, so every change of it holds a lock of the
user's (``fcntl`` on ``~/.cache/gpudeck/crontab.lock``): two homes of one user registered at
once would otherwise lose one home's lines.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

from ..contract.ops import SupervisorState
from ..contract.watching import agent_args

log = logging.getLogger(__name__)

KINDS = ("systemd", "cron", "none")
TAG = "# gpudeck-watch"


def _run(argv: list[str], stdin: Optional[str] = None, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not installed")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]}: no answer within {timeout:g} s")


def _said(r: subprocess.CompletedProcess[str]) -> str:
    lines = (r.stderr or r.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit {r.returncode}"


def home_id(home: Path) -> str:
    return hashlib.sha256(str(Path(home).resolve()).encode()).hexdigest()[:10]


def ensure_argv(home: Path, args: list[str], python: str = sys.executable) -> list[str]:
    """What the supervisor runs: start a watcher for ``home`` unless one is alive."""
    return [python, "-m", "gpudeck.agents", *args, "--home", str(Path(home).resolve()), "--ensure"]


# ---------------------------------------------------------------- systemd


def _unit(home: Path) -> str:
    return f"gpudeck-watch-{home_id(home)}.service"


def _unit_path(home: Path) -> Path:
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "systemd" / "user" / _unit(home)


def systemd_problem() -> Optional[str]:
    r = _run(["systemctl", "--user", "show-environment"], timeout=5.0)
    return None if r.returncode == 0 else f"systemctl --user does not work here ({_said(r)})"


def systemd_install(home: Path, args: list[str], python: str = sys.executable) -> str:
    path = _unit_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    exec_start = shlex.join([python, "-m", "gpudeck.agents", *args, "--home", str(Path(home).resolve()),
                             "--detached"])
    path.write_text(f"[Unit]\nDescription=gpudeck watcher for {home}\n\n[Service]\nExecStart={exec_start}\n"
                    f"Restart=always\nRestartSec=5\n\n[Install]\nWantedBy=default.target\n")
    for argv in (["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", _unit(home)]):
        r = _run(argv)
        if r.returncode != 0:
            raise OSError(f"{shlex.join(argv)}: {_said(r)}")
    user = _user()
    r = _run(["loginctl", "enable-linger", user])
    if r.returncode != 0:
        return (f"systemd user unit {_unit(home)} (Restart=always); linger is off, so it stops when you log out: "
                f"an admin must run `sudo loginctl enable-linger {user}`")
    return f"systemd user unit {_unit(home)} (Restart=always, linger on)"


def systemd_start(home: Path) -> bool:
    """Start the unit now (the handover of a console's agent when the last console leaves)."""
    return _run(["systemctl", "--user", "start", _unit(home)]).returncode == 0


def systemd_remove(home: Path) -> bool:
    path = _unit_path(home)
    if not path.exists():
        return False
    _run(["systemctl", "--user", "disable", "--now", _unit(home)])
    path.unlink(missing_ok=True)
    _run(["systemctl", "--user", "daemon-reload"])
    return True


def systemd_state(home: Path) -> SupervisorState:
    present = _unit_path(home).exists()
    active = _run(["systemctl", "--user", "is-active", _unit(home)]).stdout.strip() if present else "absent"
    linger = _run(["loginctl", "show-user", _user(), "--property=Linger"]).stdout.strip()
    note = "" if linger.endswith("yes") else f"; linger off: an admin must run `sudo loginctl enable-linger {_user()}`"
    return SupervisorState("systemd", present, present and active == "active", f"{_unit(home)}: {active}{note}")


# ---------------------------------------------------------------- cron


def _tag(home: Path) -> str:
    return f"{TAG} {Path(home).resolve()}"


def _crontab() -> tuple[Optional[str], str]:
    """The user's crontab (text, "" when there is none), or None and why it cannot be read."""
    r = _run(["crontab", "-l"])
    if r.returncode == 0:
        return r.stdout, ""
    if "no crontab" in (r.stderr or "").lower():
        return "", ""
    return None, _said(r)


def _cron_daemon() -> bool:
    import psutil

    for p in psutil.process_iter(["name"]):
        if p.info["name"] in ("cron", "crond", "cronie", "fcron", "busybox-crond"):
            return True
    return False


def cron_problem() -> Optional[str]:
    text, why = _crontab()
    if text is None:
        return f"crontab does not work here ({why})"
    if not _cron_daemon():
        return "crontab works but no cron daemon runs (an admin must start cron)"
    return None


def cron_lines(home: Path, args: list[str], python: str = sys.executable) -> list[str]:
    cmd = shlex.join(ensure_argv(home, args, python)) + " >/dev/null 2>&1"
    return [f"@reboot {cmd} {_tag(home)}", f"* * * * * {cmd} {_tag(home)}"]


def _write_crontab(text: str) -> None:
    r = _run(["crontab", "-"], stdin=text)
    if r.returncode != 0:
        raise OSError(f"crontab -: {_said(r)}")


CRONTAB_LOCK_WAIT_S = 60.0  # a holder runs two crontab commands of at most 10 s each


def crontab_lock_path() -> Path:
    return Path.home() / ".cache" / "gpudeck" / "crontab.lock"


@contextlib.contextmanager
def _crontab_lock() -> Iterator[None]:
    """The user's crontab to ourselves while we read, change and write it back: one lock per
    user (not per home), since every home of the user shares the one crontab. OSError when it
    cannot be had (an unwritable home, a holder that does not let go)."""
    path = crontab_lock_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + CRONTAB_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OSError(f"another gpudeck has held {path} for {CRONTAB_LOCK_WAIT_S:g} s; "
                                  f"the crontab was not changed") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # lets go of the lock too


def cron_install(home: Path, args: list[str], python: str = sys.executable) -> str:
    with _crontab_lock():
        text, why = _crontab()
        if text is None:
            raise OSError(f"crontab -l: {why}")
        kept = [ln for ln in text.splitlines() if not ln.endswith(_tag(home))]
        _write_crontab("\n".join(kept + cron_lines(home, args, python)) + "\n")
    return "the user's crontab: @reboot and every minute, a watcher started when none is alive"


def cron_remove(home: Path) -> bool:
    text, _ = _crontab()
    if not any(ln.endswith(_tag(home)) for ln in (text or "").splitlines()):
        return False  # nothing of ours (every `watch start` asks): no lock, no write
    with _crontab_lock():
        text, _ = _crontab()
        if not text:
            return False
        lines = text.splitlines()
        kept = [ln for ln in lines if not ln.endswith(_tag(home))]
        if len(kept) == len(lines):
            return False
        _write_crontab("\n".join(kept) + "\n" if kept else "")
    return True


def cron_state(home: Path) -> SupervisorState:
    text, why = _crontab()
    ours = [ln for ln in (text or "").splitlines() if ln.endswith(_tag(home))]
    daemon = _cron_daemon()
    detail = (f"{len(ours)} crontab line(s)" if text is not None else f"crontab unreadable ({why})") + \
        ("" if daemon else "; no cron daemon runs: an admin must start cron")
    return SupervisorState("cron", bool(ours), len(ours) == 2 and daemon, detail)


# ---------------------------------------------------------------- choosing


def _user() -> str:
    import getpass

    return getpass.getuser()


def choose(wanted: str) -> tuple[str, str]:
    """(the supervisor to use, why the ones before it were passed over). ``auto``: the first of
    systemd, cron that works, else none. ValueError when the one asked for does not work here."""
    if wanted == "auto":  # $GPUDECK_SUPERVISE: the default for this node's agents (the tests say none)
        wanted = os.environ.get("GPUDECK_SUPERVISE", "auto")
    if wanted not in (*KINDS, "auto"):
        raise ValueError(f"supervise must be one of auto, {', '.join(KINDS)}; got {wanted!r}")
    problems = {"systemd": systemd_problem, "cron": cron_problem}
    if wanted == "none":
        return "none", ""
    if wanted != "auto":
        problem = problems[wanted]()
        if problem:
            raise ValueError(f"--supervise {wanted}: {problem}")
        return wanted, ""
    passed: list[str] = []
    for kind in ("systemd", "cron"):
        problem = problems[kind]()
        if problem is None:
            return kind, "; ".join(passed)
        passed.append(problem)
    return "none", "; ".join(passed)


def install(kind: str, home: Path, argv: list[str]) -> str:
    """Register the watcher of ``home``, started with the agent's own arguments ``argv``."""
    if kind == "systemd":
        return systemd_install(home, agent_args(argv))
    if kind == "cron":
        return cron_install(home, agent_args(argv))
    return "no supervisor: a watcher killed or lost in a reboot stays down until a console or `watch start`"


def remove(home: Path) -> list[str]:
    """Remove whatever gpudeck registered for ``home``; what was removed."""
    out = []
    if systemd_remove(home):
        out.append("systemd")
    if cron_remove(home):
        out.append("cron")
    return out


def state(kind: Optional[str], home: Path) -> SupervisorState:
    if kind == "systemd":
        return systemd_state(home)
    if kind == "cron":
        return cron_state(home)
    return SupervisorState("none", False, False, "no supervisor registered")
