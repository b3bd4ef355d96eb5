"""What the supervisor keeps of a job: ``state.json`` (JobRecord, shared between agents: its
type and reader are agents/contract/jobstate.py) and, in memory only, what this agent holds of
a live job (_Live); and what still runs of a job: its leader (leader_alive), its process group
(group_members) and its descendants, read from /proc's children lists."""

from __future__ import annotations

import os
import select
import subprocess
from dataclasses import dataclass, field
from typing import Optional

import psutil

from ..contract.jobstate import JobRecord  # state.json: the contract's (one reader)
from ..contract.vocab import JobState


def first_start_of(prev: JobRecord, now: float) -> float:
    """The first start of the run a launch at ``now`` belongs to: a relaunch or a restart goes
    on with the run of the attempt before it; a launch after a job ended with exit code 0 (or
    its first launch) starts a new one. A record of an older agent has only its attempt's start."""
    if prev.state is JobState.EXITED or prev.started_at is None:
        return now
    return prev.first_started_at or prev.started_at


@dataclass
class _Live:
    """In-memory only: a Popen to reap while this agent is the parent, cached group members."""

    popen: Optional[subprocess.Popen[bytes]] = None
    members: list[int] = field(default_factory=list)
    members_at: float = 0.0
    # a pidfd names the leader itself, not its number: a reused pid can never answer for it,
    # and asking whether it ended costs one poll(2), no /proc parsing
    pidfd: Optional[int] = None

    def close_pidfd(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def descendants(pid: int) -> Optional[list[int]]:
    """Every descendant of ``pid`` from /proc/<pid>/task/<tid>/children: a few small reads,
    where a scan of every process costs milliseconds. None where the kernel lacks the file."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children", "rb") as f:
                    kids = [int(c) for c in f.read().split()]
            except FileNotFoundError:
                if p == pid and not out:
                    return None  # no children lists in this kernel (or the leader just ended)
                continue
            except (OSError, ValueError):
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


# the leader's start time as recorded and as read back may differ by rounding
START_TIME_TOLERANCE_S = 0.05


def ended_pidfds(fds: list[int]) -> set[int]:
    """Those of ``fds`` (pidfds) whose process has ended: one poll(2) for them all."""
    if not fds:
        return set()
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return {fd for fd, _ in poller.poll(0)}


def leader_alive(rec: JobRecord, live: "_Live", ended: Optional[set[int]] = None) -> bool:
    """Whether the job's leader process still runs: through its pidfd once opened (a pid
    that cannot be reused), else /proc with the start time checked. ``ended``: the pidfds
    found readable just now (:func:`ended_pidfds`), so that this one is not asked again."""
    if rec.pid is None:
        return False
    if live.popen is not None and live.popen.poll() is not None:
        live.close_pidfd()
        return False  # our child, and reaped just now
    if live.pidfd is not None:
        if (live.pidfd in ended if ended is not None
                else select.select([live.pidfd], [], [], 0)[0]):  # readable: the process has ended
            live.close_pidfd()
            return False
        return True
    try:
        p = psutil.Process(rec.pid)
        if abs(p.create_time() - (rec.create_time or 0)) > START_TIME_TOLERANCE_S:
            return False  # the pid now belongs to another process
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return False
    if hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(rec.pid)
            # the pid was checked above; check again through the fd, which cannot be reused
            if abs(psutil.Process(rec.pid).create_time() - (rec.create_time or 0)) <= START_TIME_TOLERANCE_S:
                live.pidfd = fd
            else:
                os.close(fd)
                return False
        except (OSError, psutil.Error):
            pass  # no pidfds here (old kernel, a sandbox): ask /proc every time
    return True


def group_members(rec: JobRecord, leader_ok: bool) -> list[int]:
    """Live processes of the job: its process group, plus the leader and its descendants that
    left the group (an adopted process that leads no group of its own has no group here:
    its tree alone). Scans /proc, so it is not for every tick."""
    if rec.pgid is None and (rec.pid is None or not leader_ok):
        return []
    pids = []
    group_exists = False
    if rec.pgid is not None:
        try:
            os.killpg(rec.pgid, 0)
            group_exists = True
        except ProcessLookupError:
            group_exists = False
        except PermissionError:
            group_exists = True
    if group_exists:
        for p in psutil.process_iter(["status"]):
            try:
                if p.info["status"] == psutil.STATUS_ZOMBIE or os.getpgid(p.pid) != rec.pgid:
                    continue
            except (ProcessLookupError, psutil.Error):
                continue
            if p.pid == rec.pid and not leader_ok:
                continue  # a stranger that took the leader's pid (and so its group id)
            pids.append(p.pid)
    if leader_ok:
        if rec.pid is not None and rec.pid not in pids:
            pids.append(rec.pid)
        try:
            for c in psutil.Process(rec.pid).children(recursive=True):
                if c.pid not in pids and c.status() != psutil.STATUS_ZOMBIE:
                    pids.append(c.pid)
        except psutil.Error:
            pass
    return sorted(pids)
