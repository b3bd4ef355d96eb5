"""Kill and verify: SIGTERM, a grace period, SIGKILL, then proof that nothing is left.

A verdict is ``ok`` only when

- no process of the attempt is alive: its process group, its process tree, and everything
  its containment holds (its cgroup, or every process carrying its token; see contain.py),
  read again at each step, so a process forked during the kill is caught too;
- the GPUs no longer show memory of those processes (NVML may lag a dead process briefly,
  so this is waited for, up to ``verify_timeout_s``);
- no process that escaped all of that holds one of the job's GPUs: a process on a GPU the
  job declared or held, started after the job's launch, that belongs to no other job and is
  still there. Such a process makes the verdict not ok, named:
  ``still held by pid 515 (python3 ..., outside the job's process tree): 6.6 GiB``.

The same verification serves the kill of a GPU process that belongs to no job
(:func:`kill_process`).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import psutil

from ..contract.clock import SYSTEM, Clock
from ..contract.wire import GpuHolder, KillVerdict
from .backend import GpuReader



QUIET_S = 0.2  # "gone" means no process of the attempt for this long, not one empty reading


@dataclass
class Target:
    """What a kill needs to know of one job attempt."""

    job: str
    pgid: Optional[int]
    started_at: Optional[int]  # the leader's start, in clock ticks since boot (start_ticks)
    gpus: list[int]  # declared
    members: Callable[[], set[int]]  # every live process of the attempt, read now
    kill_all: Callable[[], None]  # SIGKILL everything contained (cgroup.kill where there is one)
    reap: Callable[[], None] = lambda: None  # poll our own child, so it does not stay a zombie
    alive: Callable[[int], bool] = lambda pid: running(pid)  # whether a member still runs (not a zombie)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def signal_all(pgid: Optional[int], pids: Iterable[int], sig: int) -> None:
    if pgid:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:  # those that left the group
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def grace_left(started_at: Optional[float], grace_s: Optional[float], now: float) -> float:
    """What is left at ``now`` of a kill's grace that began at ``started_at`` (unix time) and an
    agent that died during it left behind: never negative; a kill with no recorded grace had
    the default 10 s."""
    grace = grace_s if grace_s is not None else 10.0
    return max(0.0, (started_at or 0.0) + grace - now)


def wait_gone(t: Target, timeout_s: float, sig: Optional[int] = None, clock: Clock = SYSTEM) -> set[int]:
    """Wait until the attempt has no live process; returns those still alive at the deadline.
    With ``sig``, a process that appears meanwhile (forked during the kill) gets it too."""
    deadline = clock.monotonic() + timeout_s
    signalled: set[int] = set()
    quiet_since: Optional[float] = None
    while True:
        t.reap()
        alive = {p for p in t.members() if t.alive(p)}
        if sig is not None and alive - signalled:
            signal_all(None, alive - signalled, sig)
            signalled |= alive
        now = clock.monotonic()
        if alive:
            quiet_since = None
        else:
            if quiet_since is None:
                quiet_since = now  # empty once: a process forked just as its parent died may not be listed yet
            if now - quiet_since >= QUIET_S:
                return alive
        if now >= deadline:
            return alive
        clock.sleep(0.05)


def gpu_holdings(gpu: GpuReader, pids: set[int]) -> list[tuple[int, int, float]]:
    return [(pid, index, mib) for index in range(len(gpu.uuids)) for pid, mib in gpu.processes(index)
            if pid in pids]


def start_ticks(pid: int) -> Optional[int]:
    """When a process started, in clock ticks since boot (/proc/PID/stat, field 22): exact and
    monotonic, where a start time in seconds is derived from a boot time that can shift."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def describe_process(pid: int) -> str:
    try:
        cmd = psutil.Process(pid).cmdline()
    except psutil.Error:
        return "gone"
    text = " ".join(cmd) or "?"
    return text if len(text) <= 40 else text[:39] + "…"


def strangers(gpu: GpuReader, gpus: set[int], since: Optional[int], owner_of: Callable[[int], Optional[str]],
              job: str, leader: int = 0) -> list[tuple[int, int, float]]:
    """Processes on ``gpus`` started after ``since`` (start ticks, :func:`start_ticks`) that
    belong to no job but ``job``; none when the launch's start is not known. Ticks are 10 ms:
    within the leader's own tick, a higher pid (``leader`` is the leader's) counts as later."""
    out: list[tuple[int, int, float]] = []
    if since is None:
        return out
    for index in sorted(gpus):
        for pid, mib in gpu.processes(index):
            if owner_of(pid) not in (None, job):
                continue
            started = start_ticks(pid)
            if started is not None and (started, pid) > (since, leader):
                out.append((pid, index, mib))
    return out


def kill_and_verify(t: Target, gpu: GpuReader, owner_of: Callable[[int], Optional[str]], grace_s: float,
                    verify_timeout_s: float, on_stopping: Callable[[set[int]], None],
                    clock: Clock = SYSTEM) -> KillVerdict:
    t0 = clock.monotonic()
    members = t.members()
    held_before = gpu_holdings(gpu, members)
    on_stopping(members)
    gpus = set(t.gpus) | {g for _, g, _ in held_before}
    signal_used = "SIGTERM"
    signal_all(t.pgid, members, signal.SIGTERM)
    alive = wait_gone(t, grace_s, signal.SIGTERM, clock)
    if alive:
        signal_used = "SIGKILL"
        t.kill_all()
        signal_all(t.pgid, alive, signal.SIGKILL)
        alive = wait_gone(t, 5.0, signal.SIGKILL, clock)
    everyone = members | alive
    deadline = clock.monotonic() + verify_timeout_s
    while True:  # NVML may report a dead process's memory for a moment: wait until it lets go
        held = gpu_holdings(gpu, everyone)
        escaped = [s for s in strangers(gpu, gpus, t.started_at, owner_of, t.job, t.pgid or 0)
                   if s[0] not in everyone]
        if (not held and not escaped) or clock.monotonic() >= deadline:
            break
        clock.sleep(0.1)
    seconds = clock.monotonic() - t0
    freed_mib = sum(m for _, _, m in held_before) - sum(m for _, _, m in held)
    ok = not alive and not held and not escaped
    if ok:
        message = (f"freed {freed_mib / 1024:.1f} GiB in {seconds:.1f} s" if held_before
                   else f"stopped in {seconds:.1f} s ({signal_used}); it held no GPU memory")
    else:
        parts = [f"pid {p} still alive" for p in sorted(alive)]
        parts += [f"still held by pid {pid} on GPU {g} ({mib / 1024:.1f} GiB)" for pid, g, mib in held]
        parts += [f"still held by pid {pid} ({describe_process(pid)}, outside the job's process tree): "
                  f"{mib / 1024:.1f} GiB on GPU {g}" for pid, g, mib in escaped]
        message = "; ".join(parts)
    return KillVerdict(job=t.job, ok=ok, signal=signal_used, seconds=round(seconds, 3),
                       freed_gib=round(freed_mib / 1024, 3), pids=sorted(members), survivors=sorted(alive),
                       gpu_holders=[GpuHolder(pid=p, gpu=g, mib=m) for p, g, m in held + escaped],
                       message=message, at=clock.time())


def kill_process(pid: int, gpu: GpuReader, grace_s: float, verify_timeout_s: float = 15.0, clock: Clock = SYSTEM) -> KillVerdict:
    """Kill one GPU process that belongs to no job (the caller checked that), and verify that
    it is gone and its memory came back."""
    name = f"pid {pid}"
    try:
        proc = psutil.Process(pid)
        started = proc.create_time()
    except psutil.Error:
        return KillVerdict(job="", ok=True, message=f"{name} had already ended", at=clock.time())

    def same() -> set[int]:  # the very process, not a later one that took its pid
        try:
            return {pid} if abs(psutil.Process(pid).create_time() - started) < 0.05 else set()
        except psutil.Error:
            return set()

    t = Target(job="", pgid=None, started_at=None, gpus=[], members=same,
               kill_all=lambda: signal_all(None, same(), signal.SIGKILL))
    verdict = kill_and_verify(t, gpu, lambda p: None, grace_s, verify_timeout_s, on_stopping=lambda m: None,
                              clock=clock)
    return KillVerdict(**{**verdict.__dict__, "message": f"{name}: {verdict.message}"})
