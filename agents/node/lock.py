"""``<home>/agent.lock``: one agent per node, and how a new agent takes the node over."""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path
from typing import Optional

log = logging.getLogger("agents")


class AgentLockError(RuntimeError):
    """Another agent holds this node's lock and would not let go."""


class AgentLock:
    """``<home>/agent.lock``: one agent per node. A new agent takes over from the one that
    holds it (a console that reconnected after a network drop leaves the old agent behind):
    it asks the holder to exit with SIGTERM, waits ``grace_s``, then sends SIGKILL. The lock
    is an flock, so a dead holder never blocks anyone; the file holds the holder's pid."""

    def __init__(self, fd: int, path: Path, replaced: Optional[int]) -> None:
        self.fd, self.path, self.replaced = fd, path, replaced

    @classmethod
    def take_over(cls, home: Path, grace_s: float = 10.0, kill_wait_s: float = 5.0) -> "AgentLock":
        import fcntl
        import signal

        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = home / "agent.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

        def try_lock() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False

        def wait_lock(seconds: float) -> bool:
            deadline = time.monotonic() + seconds
            while not try_lock():
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.02)
            return True

        old: Optional[int] = None
        if not try_lock():
            old, where = _lock_holder(fd)
            if where is not None:  # the home is on a file system shared with another machine
                os.close(fd)
                raise AgentLockError(f"{path} is held by an agent on host {where}: this home is shared "
                                     f"between nodes; give each node its own `home` in the fleet file")
            if old is not None:
                log.info("taking over from the agent with pid %d (%s)", old, path)
                _signal(old, signal.SIGTERM)
            if not wait_lock(grace_s):
                if old is not None:
                    log.warning("agent pid %d did not exit within %.0f s of SIGTERM; sending SIGKILL", old, grace_s)
                    _signal(old, signal.SIGKILL)
                if not wait_lock(kill_wait_s):
                    os.close(fd)
                    who = f"pid {old}" if old is not None else "a process that is not a gpudeck agent"
                    raise AgentLockError(f"{path} is held by {who} and was not released; "
                                         f"is another agent running with this home?")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        return cls(fd, path, old)

    def release(self) -> None:
        os.close(self.fd)


def _lock_holder(fd: int) -> tuple[Optional[int], Optional[str]]:
    """(pid, None) for the pid in the lock file when it is a live gpudeck agent here (never
    signal a process that merely reuses an old pid); (None, host) when another host wrote it."""
    import psutil

    fields = os.pread(fd, 300, 0).decode(errors="replace").split()
    try:
        pid = int(fields[0]) if fields else 0
    except ValueError:
        return None, None
    if len(fields) > 1 and fields[1] != socket.gethostname():
        return None, fields[1]
    if pid <= 0 or pid == os.getpid():
        return None, None
    try:
        argv = psutil.Process(pid).cmdline()
    except psutil.Error:
        return None, None
    # "agents": an agent of a version before the gpudeck.* namespace, still to be taken over
    is_agent = bool({"gpudeck.agents", "agents"} & set(argv)) or \
        any(a.endswith(("agents/__main__.py", "gpudeck-agent")) for a in argv)
    return (pid if is_agent else None), None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
