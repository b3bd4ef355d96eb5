"""Which fleet owns a node's jobs, so two fleet files on one home never mix.

A console's ``configure`` carries its fleet's identity and that file's jobs. The identity is
the file's ``[fleet] name`` when it has one (a copy of the file, a rename, a teammate's
checkout keep it: one name, one owner), else ``host:/abs/path/fleet.toml`` (a copy is then
another owner); "" for a console with no fleet file. ``source`` is always the file's own
``host:/path``: a named file's jobs owned under that old key (before the file had a name)
migrate to the name, and the node remembers which file last declared each fleet's jobs.

Each fleet's declarations are kept apart: a second console with another fleet file adds its
own jobs and leaves the first one's alone. A job name belongs to the fleet that first
declared it, for as long as that fleet declares it or the job runs.

What another fleet owns is never a reason to refuse a look: a ``reading`` configure (status,
doctor, events, logs, history, a read-only console) takes nothing, drops nothing and is never
refused; it declares only names no fleet owns, and :class:`Declared` says which of its names
another fleet owns. A configure that changes something (launch, kill, relaunch, the console)
is refused for such a name (:class:`OwnedByAnother`, exit 7), unless it takes the job over
(``--take-over``), which :class:`Declared` reports, name and former owner.

Owners are kept in ``<home>/owners.json`` (job -> owner) and the file each fleet was last
declared from in ``<home>/fleets.json``, both written atomically, so a new agent knows them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ..sense import writes
from ..contract.jobs import JobSpec
from ..contract.ops import CopyDiff
from ..contract.atomic import atomic_write_json
from ..contract.ownership import OWNED_ELSEWHERE, owner_text

log = logging.getLogger(__name__)
OWNERS_FILE = "owners.json"
FLEETS_FILE = "fleets.json"


class OwnedByAnother(ValueError):
    """A fleet file asks to change jobs another fleet owns on this node."""

    refusal = OWNED_ELSEWHERE  # the reply's refusal kind: the console exits 7 for it


@dataclass
class Declared:
    """What a configure did with ownership, for the console to say."""

    merged: dict[str, JobSpec]  # every fleet's declarations on the node
    elsewhere: dict[str, str] = field(default_factory=dict)  # this file's names another fleet owns: name -> owner
    taken: dict[str, str] = field(default_factory=dict)  # names taken over: name -> former owner
    differs: list[str] = field(default_factory=list)  # how this file's jobs differ from the node's for its fleet
    copy: Optional[CopyDiff] = None  # the same, as data
    # a look while another copy of the fleet declared its jobs last: that copy's declarations,
    # and so the watcher's (its saved jobs and settings), stay as they are
    kept_copy: bool = False
    changed: dict[str, list[str]] = field(default_factory=dict)  # job -> what its relaunch would change


class Declarations:
    def __init__(self, home: Path, node: str) -> None:
        self.path = Path(home) / OWNERS_FILE
        self.fleets_path = Path(home) / FLEETS_FILE
        self.node = node
        self.by_fleet: dict[str, dict[str, JobSpec]] = {}
        self.owners: dict[str, str] = self._load(self.path)
        self.sources: dict[str, str] = self._load(self.fleets_path)  # fleet -> the file it was last declared from

    @staticmethod
    def _load(path: Path) -> dict[str, str]:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("%s unreadable, forgotten: %s", path, exc)
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}

    def _migrate(self, fleet: str, source: str) -> None:
        """A named file's jobs owned under its ``host:/path`` (before it had a name) are the name's."""
        if not source or source == fleet:
            return
        moved = sorted(name for name, owner in self.owners.items() if owner == source)
        for name in moved:
            self.owners[name] = fleet
        old = self.by_fleet.pop(source, None)
        if old:
            self.by_fleet.setdefault(fleet, {}).update(old)
        if moved:
            log.info("node %s: jobs %s of %s now belong to fleet %r", self.node, ", ".join(moved), source, fleet)

    def declare(self, fleet: str, specs: list[JobSpec], take_over: bool, alive: Callable[[str], bool],
                source: str = "", reading: bool = False) -> Declared:
        """Take ``fleet``'s declarations (see the module's docstring for ``reading``).
        OwnedByAnother (and nothing changed) when another fleet owns one of the names, the
        configure changes something and ``take_over`` is off."""
        # what a console of a release before this one says, and the watcher re-declaring the
        # last console's jobs: no file named; a key of before names (its fleet file) is known
        # by the name that file has since taken
        fleet = next((f for f, src in sorted(self.sources.items()) if src == fleet and f != fleet), fleet)
        # a job of no fleet file ("": a console or a client without one) is anyone's to claim
        foreign = {s.name: o for s in specs if (o := self.owners.get(s.name)) not in (None, "", fleet, source or fleet)}
        if foreign and not take_over and not reading:
            name, owner = sorted(foreign.items())[0]
            more = f" (and {len(foreign) - 1} more job(s))" if len(foreign) > 1 else ""
            raise OwnedByAnother(
                f"job {name!r}{more} on node {self.node} belongs to another fleet, {owner_text(owner)}; "
                f"give this file the same [fleet] name if it is a copy of that one, give the job another name, "
                f"or take it over with --take-over")
        self._migrate(fleet, source)
        out = Declared(merged={})
        declared_from = self.sources.get(fleet)
        other_copy = bool(fleet and source and declared_from and declared_from != source)
        mine = {s.name: s for s in specs if not (reading and s.name in foreign)}
        held = {name for name, owner in self.owners.items() if owner == fleet}
        if other_copy:  # another file of this fleet's name declared it last: say how this one differs
            lacks, adds = sorted(held - set(mine) - set(foreign)), sorted(set(mine) - held)
            if lacks or adds:
                out.copy = CopyDiff(fleet, declared_from or "", lacks, adds, replaced=not reading)
                out.differs = out.copy.lines(self.node)
        if reading:
            out.elsewhere = foreign
        if reading and other_copy:
            # a look takes nothing and drops nothing: another copy's declarations stay as they
            # are; this file's other names are added (so that they show, pending) and recorded
            # as no one's, so that the next look finds the copies differ as this one did
            self.by_fleet[fleet] = {**mine, **self.by_fleet.get(fleet, {})}
            out.kept_copy = True
        else:  # this file's own declarations (a look leaves another fleet's names to it)
            taken = {} if reading else foreign
            out.taken = taken
            for name, owner in taken.items():  # taken from another fleet: no longer declared there
                self.by_fleet.get(owner, {}).pop(name, None)
            for name, owner in list(self.owners.items()):  # names this fleet dropped: free once they stop
                if owner == fleet and name not in mine and not alive(name):
                    del self.owners[name]
            self.by_fleet[fleet] = mine
            self.owners.update((name, fleet) for name in mine)
            if fleet and source:
                self.sources[fleet] = source
            for name, owner in sorted(taken.items()):
                log.warning("node %s: job %s taken over from %s by %s", self.node, name, owner_text(owner),
                            owner_text(fleet))
        self._save(self.path, self.owners)
        self._save(self.fleets_path, self.sources)
        for declared in self.by_fleet.values():
            out.merged.update(declared)
        return out

    @staticmethod
    def _save(path: Path, data: dict[str, str]) -> None:
        try:
            atomic_write_json(path, data)
        except OSError as exc:  # a full disk: kept in memory for this agent
            writes.failed(path, exc)
        else:
            writes.ok(path)

    def owner(self, name: str) -> Optional[str]:
        return self.owners.get(name) or None
