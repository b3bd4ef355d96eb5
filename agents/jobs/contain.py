"""Containment: which processes belong to a job attempt, in a way a process cannot leave.

A job's process group and process tree are not enough: ``setsid``, a double fork, ``nohup
... &`` or a daemonizing server leave both, and a kill that looks only there reports success
while the escaped process still holds a GPU. So every attempt is contained in one of two
ways, chosen once per agent (the snapshot says which):

``cgroup``
    The attempt runs in a cgroup v2 of its own, ``<parent>/home-<hash>/<job>.<attempt>``, the
    hash of the home's path and of its instance (``<home>/instance-id``, random, written when the
    home is first used): a home deleted and made again at the same path, its old jobs still
    running in their cgroups, starts again at attempt 1 of the same job names, and must not
    find the old processes in its new attempts' cgroups. The job's
    wrapper moves itself there before it starts the command, so every descendant is born
    inside; no process can leave a cgroup without privileges. Members are read from
    ``cgroup.procs``; the kill ends with ``cgroup.kill`` and is verified by the cgroup being
    empty. The parent is ``$GPUDECK_CGROUP_PARENT``, else ``<cgroup2 mount>/gpudeck`` when the
    agent may create it (root), else ``gpudeck-jobs`` inside the agent's own cgroup when that
    subtree is delegated to the user (``systemd-run --user --scope -p Delegate=yes``).

``token``
    Where no cgroup can be made: each attempt gets a random token in its environment
    (``GPUDECK_ATTEMPT_TOKEN``), which every descendant inherits through fork, exec, setsid
    and reparenting. Members are found by reading the environments the agent may read
    (/proc/PID/environ). A process that clears its own environment escapes this; the kill's
    check against the GPUs then still names it if it holds GPU memory.

``$GPUDECK_CONTAINMENT=token`` forces the second mode (tests, or a node where cgroups misbehave).
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import signal
from pathlib import Path
from typing import Iterable, Optional, Union

from ..contract.atomic import atomic_write_text

log = logging.getLogger(__name__)

TOKEN_ENV = "GPUDECK_ATTEMPT_TOKEN"
CGROUP_ENV = "GPUDECK_CGROUP"  # the wrapper moves itself into this cgroup first


def new_token() -> str:
    return secrets.token_hex(12)


def cgroup2_mount() -> Optional[Path]:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup``, or ``.../unified`` on
    hybrid systems), or None."""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return Path(left.split()[4])
    except OSError:
        pass
    return None


def own_cgroup() -> Optional[str]:
    return cgroup_path_of("self")


def _usable(parent: Path) -> bool:
    """A parent where this agent can make an attempt's cgroup and move a process into it."""
    try:
        parent.mkdir(parents=False, exist_ok=True)
        probe = parent / f".probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        try:
            ok = os.access(probe / "cgroup.procs", os.W_OK) and (probe / "cgroup.kill").exists()
        finally:
            probe.rmdir()
        return ok
    except OSError:
        return False


class Containment:
    """How this agent contains job attempts: ``mode`` is ``cgroup`` or ``token``."""

    def __init__(self, parent: Optional[Path]) -> None:
        self.parent = parent
        self.mode = "cgroup" if parent is not None else "token"

    @classmethod
    def detect(cls) -> "Containment":
        if os.environ.get("GPUDECK_CONTAINMENT") == "token":
            return cls(None)
        candidates = []
        if os.environ.get("GPUDECK_CGROUP_PARENT"):
            candidates.append(Path(os.environ["GPUDECK_CGROUP_PARENT"]))
        mount = cgroup2_mount()
        if mount is not None:
            candidates.append(mount / "gpudeck")
            own = own_cgroup()
            if own and own != "/":
                candidates.append(mount / own.lstrip("/") / "gpudeck-jobs")
        for parent in candidates:
            if _usable(parent):
                return cls(parent)
        return cls(None)

    # ---------------------------------------------------------------- per attempt

    def home_cgroup(self, home: Path) -> Optional[Path]:
        """The cgroup under which one agent home keeps its attempts: agents of several homes
        on one machine (several users, the tests) never share an attempt's cgroup, nor do two
        homes made one after the other at the same path (home_instance)."""
        if self.parent is None:
            return None
        key = f"{Path(home).resolve()}\0{home_instance(Path(home))}"
        return self.parent / ("home-" + hashlib.sha1(key.encode()).hexdigest()[:12])

    def prepare(self, home: Path, job: str, attempt: int, env: dict[str, str]) -> str:
        """Set up attempt ``attempt`` of ``job``: its token (always, also in cgroup mode, where
        it names the job of a GPU process cheaply) and its cgroup. Returns the token."""
        token = new_token()
        env[TOKEN_ENV] = token
        if self.parent is not None:
            try:
                base = self.home_cgroup(home)
                assert base is not None
                base.mkdir(exist_ok=True)
                cg = base / f"{job}.{attempt}"
                cg.mkdir(exist_ok=True)
                env[CGROUP_ENV] = str(cg)
            except OSError as exc:
                log.warning("job %s: cannot make its cgroup under %s (%s): contained by its token only",
                            job, self.parent, exc)
        return token

    def members(self, token: Optional[str], cgroup: Optional[str]) -> Optional[set[int]]:
        """Every live process of the attempt, or None when its containment cannot be read."""
        if cgroup:
            pids = read_cgroup_procs(Path(cgroup))
            if pids is not None:
                return pids
        if token:
            return processes_with_token(token)
        return None

    def kill_all(self, token: Optional[str], cgroup: Optional[str]) -> None:
        """SIGKILL every member: ``cgroup.kill`` where there is one (nothing can fork away
        meanwhile), else each process that carries the token."""
        if cgroup:
            try:
                Path(cgroup, "cgroup.kill").write_text("1")
                return
            except OSError:
                pass
        for pid in self.members(token, cgroup) or ():
            _kill(pid, signal.SIGKILL)

    @staticmethod
    def remove(cgroup: Optional[str]) -> None:
        """Remove an attempt's empty cgroup (a cgroup with processes cannot be removed), and
        its home's when that holds no other attempt."""
        if cgroup:
            for path in (cgroup, os.path.dirname(cgroup)):
                try:
                    os.rmdir(path)
                except OSError:
                    return


INSTANCE_FILE = "instance-id"


def home_instance(home: Path) -> str:
    """This home's instance: a random id in ``<home>/instance-id``, written the first time it is
    asked for (by the one agent that holds the home: agents/node/lock.py). A home made again at the
    same path has another one."""
    path = home / INSTANCE_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = ""
    if not text:
        text = new_token()
        atomic_write_text(str(path), text + "\n")  # whole or not at all
    return text


def read_cgroup_procs(cg: Path) -> Optional[set[int]]:
    try:
        text = (cg / "cgroup.procs").read_text()
    except FileNotFoundError:
        return set()  # removed: empty
    except OSError:
        return None
    return {int(x) for x in text.split()}


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read()
    except OSError:  # gone, or not ours to read
        return False


def processes_with_token(token: str, pids: Optional[Iterable[int]] = None) -> set[int]:
    """The processes whose environment carries ``GPUDECK_ATTEMPT_TOKEN=token``."""
    needle = f"{TOKEN_ENV}={token}\0".encode()
    if pids is None:
        pids = (int(d) for d in os.listdir("/proc") if d.isdigit())
    me = os.getpid()
    return {pid for pid in pids if pid != me and _environ_has(pid, needle)}


def token_of(pid: int) -> Optional[str]:
    """The attempt token in a process's environment, if it has one we may read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return None
    key = f"{TOKEN_ENV}=".encode()
    start = env.find(key)
    if start < 0 or (start > 0 and env[start - 1] != 0):
        return None
    end = env.find(b"\0", start)
    return env[start + len(key):end if end >= 0 else None].decode(errors="replace")


def cgroup_path_of(pid: Union[int, str]) -> Optional[str]:
    """A process's cgroup v2 path (``pid`` a number, or "self")."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
