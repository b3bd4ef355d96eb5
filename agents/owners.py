"""Which fleet file a node's jobs belong to, so two fleet files on one home never mix.

A console's ``configure`` carries its fleet file's identity (``host:/abs/path/fleet.toml``;
"" for a console with no fleet file) and that file's jobs. Each fleet's declarations are
kept apart: a second console with another fleet file adds its own jobs and leaves the first
one's alone, where the last ``configure`` used to replace them all.

A job name belongs to the fleet that first declared it, for as long as that fleet declares
it or the job runs. Another fleet that declares the same name is refused with the owner's
name, unless it asks to take the job over (``--take-over``). Owners are kept in
``<home>/owners.json`` (written atomically), so a new agent knows them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable, Optional

from . import writes
from .contract.jobs import JobSpec
from .contract.atomic import atomic_write_json

log = logging.getLogger(__name__)
OWNERS_FILE = "owners.json"


class OwnedByAnother(ValueError):
    """A fleet file declares jobs that another fleet file owns on this node."""


class Declarations:
    def __init__(self, home: Path, node: str) -> None:
        self.path = Path(home) / OWNERS_FILE
        self.node = node
        self.by_fleet: dict[str, dict[str, JobSpec]] = {}
        self.owners: dict[str, str] = self._load()

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("%s unreadable, owners forgotten: %s", self.path, exc)
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}

    def declare(self, fleet: str, specs: list[JobSpec], take_over: bool,
                alive: Callable[[str], bool]) -> dict[str, JobSpec]:
        """Take ``fleet``'s declarations; returns every fleet's, merged. OwnedByAnother (and
        nothing changed) when another fleet owns one of the names and ``take_over`` is off."""
        # a job of no fleet file ("": a console or a client without one) is anyone's to claim
        theirs = {s.name: self.owners[s.name] for s in specs if self.owners.get(s.name) not in (None, "", fleet)}
        if theirs and not take_over:
            name, owner = sorted(theirs.items())[0]
            more = f" (and {len(theirs) - 1} more job(s))" if len(theirs) > 1 else ""
            raise OwnedByAnother(
                f"job {name!r}{more} on node {self.node} belongs to another fleet file, {owner or '(none)'}; "
                f"give it another name in this fleet file, or take it over with --take-over")
        for spec in specs:  # taken from another fleet (or from none): no longer declared there
            owner = self.owners.get(spec.name)
            if owner not in (None, fleet):
                self.by_fleet.get(owner, {}).pop(spec.name, None)
        mine = {s.name: s for s in specs}
        for name, owner in list(self.owners.items()):  # names this fleet dropped: free once they stop
            if owner == fleet and name not in mine and not alive(name):
                del self.owners[name]
        self.by_fleet[fleet] = mine
        self.owners.update((name, fleet) for name in mine)
        try:
            atomic_write_json(self.path, self.owners)
        except OSError as exc:  # a full disk: the owners stay in memory for this agent
            writes.failed(self.path, exc)
        else:
            writes.ok(self.path)
        merged: dict[str, JobSpec] = {}
        for declared in self.by_fleet.values():
            merged.update(declared)
        return merged

    def owner(self, name: str) -> Optional[str]:
        return self.owners.get(name) or None
