"""Where a moved job runs now, when the fleet file still names the node it was moved off.

``gpudeck move JOB --to NODE`` (and the console's ``m``, and the fleet watch's automatic move)
does not edit the fleet file: the file is the operator's (comments, order, a copy in git, a
file shared by several laptops), a rewrite at 3 a.m. by an automatic move would surprise its
owner, and TOML has no writer in the standard library that keeps a file as it was. The move
is kept here instead, beside the last look, in ``$XDG_STATE_HOME/gpudeck/placements.json``
(``~/.local/state/gpudeck/`` by default)::

    {"fleets": {"/abs/path/fleet.toml": {"gen": {"node": "gpu2", "fleet_node": "gpu1",
                                                  "moved_from": "gpu1", "attempt_id": "...", "at": 1764504000.0}}}}

:func:`apply` turns a fleet read from its file into the fleet as it runs: each moved job's
``node`` is the node it was moved to, and its ``env`` carries the move's attempt id
(``$GPUDECK_ATTEMPT_ID``: agents/contract/fencing.py), so a relaunch there resumes as the same
attempt and the attempt on the old node stays fenced. A placement holds while the fleet file
still names the node the job had when it was first moved (``fleet_node``): once the operator
edits the job's ``node`` in the file, the file wins and the placement is dropped. Every
command of this laptop sees the placement (they all load the fleet through
``commands/common.load_fleet``); a console on another laptop does not, and says the job is on
the old node until its own file is edited (the nodes themselves know: the new node runs it).

Two gpudecks of one laptop (a console and ``gpudeck watch fleet``, say) may both decide to move
one job. A move records its placement with :meth:`PlacementStore.claim`: under a lock on
``placements.json.lock`` it reads the job's placement again and refuses
(:class:`PlacementConflict`) when it is not the one the mover started from, that is when the
other gpudeck moved the job meanwhile (:func:`conflicting`). The loser launches nothing.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..agents.contract.atomic import atomic_write_json
from ..agents.contract.fencing import ENV as ATTEMPT_ENV
from .looked import fleet_key

if TYPE_CHECKING:  # the console's core imports no remote module at import time
    from ..remote.fleet import Fleet

FILE = "placements.json"


@dataclass(frozen=True)
class Placement:
    node: str  # where the job runs now
    fleet_node: str  # what the fleet file said when it was first moved
    moved_from: str  # the node of the last move
    attempt_id: str  # the newest attempt's id (agents/contract/fencing.py)
    at: float  # when it moved (unix time)


def default_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "gpudeck" / FILE


class PlacementStore:
    """Read and record the placements of one fleet file. ``warning`` says why the file was
    ignored (it then holds no placement: the fleet file's nodes are used)."""

    def __init__(self, path: Optional[Path] = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.warning: Optional[str] = None

    def _read_all(self) -> dict[str, Any]:
        try:
            doc: Any = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            self.warning = f"{self.path}: cannot be read ({exc}); moved jobs are shown on their fleet file's node"
            return {}
        fleets = doc.get("fleets") if isinstance(doc, dict) else None
        if not isinstance(fleets, dict):
            self.warning = f"{self.path}: not a gpudeck placements file; ignored"
            return {}
        return fleets

    def of(self, fleet_path: Optional[str]) -> dict[str, Placement]:
        raw = self._read_all().get(fleet_key(fleet_path))
        out: dict[str, Placement] = {}
        for job, p in (raw or {}).items() if isinstance(raw, dict) else ():
            try:
                place = Placement(str(p["node"]), str(p["fleet_node"]), str(p["moved_from"]), str(p["attempt_id"]),
                                  float(p["at"]))
            except (KeyError, TypeError, ValueError):
                self.warning = f"{self.path}: the placement of job {job!r} is not readable; ignored"
                continue
            if math.isfinite(place.at):
                out[job] = place
        return out

    def record(self, fleet_path: Optional[str], job: str, place: Placement) -> None:
        """Keep ``place`` for ``job``; OSError when the file cannot be written (the move says so)."""
        fleets = self._read_all()
        key = fleet_key(fleet_path)
        held = fleets.get(key)
        jobs: dict[str, Any] = held if isinstance(held, dict) else {}
        jobs[job] = dataclasses.asdict(place)
        fleets[key] = jobs
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, {"fleets": fleets})

    def claim(self, fleet_path: Optional[str], job: str, place: Placement, src: str,
              seen_attempt: Optional[str]) -> None:
        """Keep ``place`` for ``job``, moved off ``src``, unless another gpudeck of this machine
        moved the job since this one read where it runs (``seen_attempt``: the attempt id of the
        placement it read, None for none): then PlacementConflict, and nothing is written. The
        read and the write hold the lock together. OSError when the file cannot be written."""
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            current = self.of(fleet_path).get(job)
            if conflicting(current, src, seen_attempt):
                assert current is not None
                raise PlacementConflict(job, current)
            self.record(fleet_path, job, place)
        finally:
            os.close(fd)  # and the lock with it


class PlacementConflict(Exception):
    """Another gpudeck of this machine moved the job since this one read where it runs."""

    def __init__(self, job: str, place: Placement) -> None:
        self.job, self.place = job, place
        super().__init__(moved_meanwhile(job, place))


def conflicting(current: Optional[Placement], src: str, seen_attempt: Optional[str]) -> bool:
    """Whether ``current``, the job's placement on file now, is a move its mover did not see. The
    mover read the job on ``src`` with the placement of attempt ``seen_attempt`` (None: none held).
    A placement it read is one it may replace; so is one that does not hold against its fleet
    file (moved off another node than ``src``: the file was edited since)."""
    if current is None:
        return False
    if seen_attempt is not None:
        return current.attempt_id != seen_attempt
    return current.fleet_node == src and current.node != src


def moved_meanwhile(job: str, place: Placement) -> str:
    return (f"job {job!r} was moved to {place.node} at {time.strftime('%H:%M:%S', time.localtime(place.at))} by "
            f"another gpudeck of this machine (attempt id {place.attempt_id}): it runs there")


def apply(fleet: Fleet, placements: dict[str, Placement]) -> Fleet:
    """The fleet as it runs: each job with a placement that still holds on its moved node, with
    the move's attempt id in its env."""
    if not placements:
        return fleet
    jobs = []
    for spec in fleet.jobs:
        place = placements.get(spec.name)
        if place is not None and spec.cluster is None and (spec.node or "local") == place.fleet_node \
                and any(n.name == place.node for n in fleet.nodes):
            spec = dataclasses.replace(spec, node=place.node, env={**spec.env, ATTEMPT_ENV: place.attempt_id})
        jobs.append(spec)
    return dataclasses.replace(fleet, jobs=jobs)


def moved(fleet: Fleet, placements: dict[str, Placement]) -> dict[str, Placement]:
    """Per moved job of ``fleet`` (as it runs), its placement: where the rows say it moved from."""
    nodes = {j.name: j.node for j in fleet.jobs}
    return {name: p for name, p in placements.items() if nodes.get(name) == p.node}


def moved_text(place: Placement, now: float) -> str:
    """"moved from gpu1 02:10": the row of a moved job (a day or more ago: with its date)."""
    when = time.localtime(place.at)
    stamp = time.strftime("%H:%M" if now - place.at < 86400 else "%b %d %H:%M", when)
    return f"moved from {place.moved_from} {stamp}"
