"""Idle capacity acted on: a node's ``idle_action`` (the fleet file's, in ``[[nodes]]`` or
``[defaults]``: a shell command, the cloud's stop call, say) runs when the whole node has been
idle for ``[alerts] idle_paid_s``.

"Idle" here is stricter than the ``idle_paid`` alert's (which counts any subset of the GPUs,
and a GPU at 0% under a live job): **every** GPU of the node at 0% use (or, with no reading,
with no process on it), and **no job of the node alive** (starting, staging, loading or
running: a job that loads its model shows its GPU at 0% for minutes). The two hold together
for ``idle_paid_s`` without a break: then the command runs, once per idle episode (an episode
ends when a GPU is used or a job is alive again), with ``/bin/sh -c`` in the agent's home, its
output captured (the last :data:`OUTPUT_CHARS` characters kept) and a deadline of
:data:`TIMEOUT_S` (its process group killed past it). It runs in a thread of its own: a tick
never waits for it. What it said and how it ended go into the timeline as an ``idle_action``
event, notified like the others. A cluster's GPUs (a login's, whose GPUs are its compute
nodes') are never acted on. Without ``idle_action`` nothing runs: the default stays the
alert alone.

The episode is kept in memory: a new watcher counts ``idle_paid_s`` again before it acts.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ..contract.vocab import EventKind
from ..contract.wire import Gpu, JobStatus

log = logging.getLogger("agents")

TIMEOUT_S = 120.0  # the command's deadline
OUTPUT_CHARS = 2000  # the end of its output kept in the event


def node_idle(gpus: list[Gpu], jobs: list[JobStatus]) -> bool:
    """Every GPU of the node idle and no job of it alive (the module's rule)."""
    if not gpus or any(g.host is not None for g in gpus) or any(j.state.alive for j in jobs):
        return False
    return all((g.util_pct is not None and g.util_pct <= 0) or (g.util_pct is None and not g.processes)
               for g in gpus)


class IdleAction:
    def __init__(self, home: Path, node: str, emit: Callable[..., Any],
                 run: Optional[Callable[[str, Path], tuple[Optional[int], str, float]]] = None) -> None:
        self.home, self.node, self.emit = Path(home), node, emit
        self.run = run or run_command  # (command, cwd) -> (exit code or None on the deadline, output, seconds)
        self.since: Optional[float] = None  # the idle episode's start (unix time)
        self.acted = False  # the command ran (or runs) in this episode
        self.thread: Optional[threading.Thread] = None

    def tick(self, now: float, gpus: list[Gpu], jobs: list[JobStatus], command: Optional[str],
             idle_s: float) -> None:
        if not node_idle(gpus, jobs):
            self.since, self.acted = None, False  # the episode is over: the next one may act again
            return
        if self.since is None:
            self.since = now
        if command is None or self.acted or now - self.since < idle_s:
            return
        self.acted = True
        n = len(gpus)
        why = f"every GPU ({n}) idle for {now - self.since:.0f} s and no job alive"
        self.emit(EventKind.ACTION, f"idle_action on {self.node}: {why}; running it", notify=False,
                  action="idle_action")
        self.thread = threading.Thread(target=self._act, args=(command, why), name="idle-action", daemon=True)
        self.thread.start()

    def _act(self, command: str, why: str) -> None:
        try:
            code, output, took = self.run(command, self.home)
        except OSError as exc:
            code, output, took = None, f"cannot run it: {exc}", 0.0
        how = (f"exit code {code}" if code is not None else f"no exit within {TIMEOUT_S:.0f} s: killed")
        tail = output.strip()[-OUTPUT_CHARS:]
        self.emit(EventKind.IDLE_ACTION, f"idle_action on {self.node} ({why}): {how} in {took:.1f} s"
                  + (f"; it said: {tail}" if tail else "; it said nothing"),
                  exit_code=code, output=tail, seconds=round(took, 2))


def run_command(command: str, cwd: Path, timeout_s: float = TIMEOUT_S) -> tuple[Optional[int], str, float]:
    """``/bin/sh -c command`` in ``cwd`` with its own process group: (its exit code, or None
    when it passed ``timeout_s`` and its group was killed; its output and errors; seconds)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=str(cwd), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        code: Optional[int] = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, _ = proc.communicate()
        code = None
    return code, out.decode(errors="replace"), time.monotonic() - t0
