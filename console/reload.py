"""The console current with its fleet file: when to read the file again, and what a reload tells.

An open console looks at its fleet file (and at this laptop's ``placements.json``, where a move
from another terminal is kept: console/placements.py) every ``fleet_poll_s``. A change of
either file (its mtime, size or inode: an editor that writes a new file and renames it counts)
is applied once the files have stayed unchanged for ``settle_s`` (1 s) and the fleet file has
parsed: an editor's save in two writes, or a file half copied, is never read. A file that does
not parse is said once per change, as an error line naming the file and the line; the last
good version stays in use.

:class:`FleetFileWatch` decides; it reads its clock through the clock seam
(agents/contract/clock.py), so that the debounce is checked with a clock a test moves by hand.
The app applies what it returns (``FleetClient.apply_fleet``: the new nodes connect, each
connected node gets the ``configure`` a console sends anyway; nothing is launched or killed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from ..agents.contract.clock import SYSTEM, Clock
from ..agents.contract.errors import OperatorError

__all__ = ["FleetFileWatch", "Reload", "SETTLE_S", "reload_lines"]

SETTLE_S = 1.0  # a changed file is read once it has stayed as it is this long

Stamp = tuple[Optional[tuple[int, int, int]], ...]


@dataclass(frozen=True)
class Reload:
    """What a look at the files found: a fleet to use, or why the file cannot be used."""

    fleet: Any = None  # remote.fleet.Fleet, read and checked
    error: Optional[str] = None  # "fleet.toml:12: ...": what and where


def _stat(path: str) -> Optional[tuple[int, int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None  # gone, or not there yet: a change like another
    return st.st_mtime_ns, st.st_size, st.st_ino


@dataclass
class FleetFileWatch:
    """Says when the fleet file (and the files beside it that shape the fleet: ``watched``) has
    changed and settled, and hands the fleet read again (``load(path)``), or the mistake."""

    path: str
    load: Callable[[str], Any]
    watched: Sequence[str] = ()
    clock: Clock = SYSTEM
    settle_s: float = SETTLE_S
    _seen: Stamp = field(default=(), init=False)  # the files as last looked at
    _seen_at: float = field(default=0.0, init=False)  # since when they have looked so (monotonic)
    _done: Stamp = field(default=(), init=False)  # the files as last read (used, or said to be wrong)

    def __post_init__(self) -> None:
        self._seen = self._done = self.stamp()  # the console read them at start
        self._seen_at = self.clock.monotonic()

    def stamp(self) -> Stamp:
        return tuple(_stat(p) for p in (self.path, *self.watched))

    def poll(self) -> Optional[Reload]:
        """None while nothing changed, or while a change is younger than ``settle_s``; else the
        fleet read again, or its mistake (each change read once)."""
        now, stamp = self.clock.monotonic(), self.stamp()
        if stamp != self._seen:
            self._seen, self._seen_at = stamp, now
            return None
        if stamp == self._done or now - self._seen_at < self.settle_s:
            return None
        self._done = stamp
        try:
            return Reload(fleet=self.load(self.path))
        except (OperatorError, ValueError, OSError) as exc:  # FleetError is an OperatorError
            return Reload(error=str(exc) or type(exc).__name__)


def reload_lines(old: Any, new: Any, running: Callable[[str], Optional[str]], failed: dict[str, str]) -> list[str]:
    """What a reload changed, one line each: the nodes and jobs added and removed. A job removed
    while it runs (``running(job)``: its node, or None) is said to keep running, never killed.
    ``failed``: the nodes whose configure failed, with why."""
    from ..remote.client import nodes_in_use

    lines: list[str] = []
    old_nodes, new_nodes = {n.name for n in nodes_in_use(old)}, {n.name for n in nodes_in_use(new)}
    old_jobs, new_jobs = {j.name for j in old.jobs}, {j.name for j in new.jobs}
    for n in sorted(new_nodes - old_nodes):
        lines.append(f"node {n} added: connecting")
    for n in sorted(old_nodes - new_nodes):
        lines.append(f"node {n} no longer in the file")
    for n in sorted(old_nodes & new_nodes):
        if old.node(n) != new.node(n):  # its link was opened with the old settings
            lines.append(f"node {n} changed: its connection keeps the old settings until the console starts again")
    for j in sorted(new_jobs - old_jobs):
        lines.append(f"job {j} added")
    for j in sorted(old_jobs - new_jobs):
        node = running(j)
        lines.append(f"job {j} removed from the file; still running on {node}: not killed, shown as "
                     f"\"not in the fleet file\"" if node else f"job {j} removed from the file")
    changed = sorted(j.name for j in new.jobs if j.name in old_jobs and j != old.job(j.name))
    if changed:
        lines.append(f"changed: {', '.join(changed)} (a launch or relaunch runs what the file says now)")
    for node, why in sorted(failed.items()):
        lines.append(f"node {node}: the new file was not sent: {why}")
    return lines
