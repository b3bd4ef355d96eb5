"""The watcher's own life: ``<home>/watcher-life.json``.

A watching agent notes that it is alive (at most every :data:`ALIVE_EVERY_S`) and, when it
ends cleanly (its last console left with watching off, a newer agent took the node over), that
it stopped. The next agent to serve the home reads the note before it writes its own: one
that says watching and never says stopped is a watcher that died (kill -9, the OOM killer, a
power cut). The new agent then writes "watcher down from A to B (N s), restarted by WHO, K jobs
adopted" into the timeline as a ``watcher_restarted`` event, notified like the others: the
watcher's death and return are events like any other (DESIGN.md, "What a state may claim").

"Down from" is the last note of the dead one, so it is late by at most ALIVE_EVERY_S. Who
restarted it: cron (``--ensure`` says so to the watcher it starts, :data:`STARTED_BY_ENV`),
systemd (its ``$INVOCATION_ID``), or a console (an agent a console or `gpudeck` command
started, not detached).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Optional

from ..contract.atomic import atomic_write_json
from ..contract.units import human_duration

log = logging.getLogger("agents")

LIFE_FILE = "watcher-life.json"
ALIVE_EVERY_S = 2.0
STARTED_BY_ENV = "GPUDECK_STARTED_BY"  # set by ``--ensure`` (cron) for the watcher it spawns


def started_by(detached: bool) -> str:
    """Who started this agent, in words for the timeline. The variable is taken out of the
    environment, so that the jobs this agent launches do not inherit it."""
    said = os.environ.pop(STARTED_BY_ENV, None)
    if said:
        return said
    if detached and os.environ.get("INVOCATION_ID"):
        return "systemd"
    return "a detached start (python -m gpudeck.agents --detached)" if detached else "a console's agent"


class Life:
    """This agent's note in ``<home>/watcher-life.json``."""

    def __init__(self, home: Path) -> None:
        self.path = Path(home) / LIFE_FILE
        self.pid = os.getpid()
        self.started_at = time.time()
        self._written_at = 0.0
        self._writing = False  # whether this agent has written a note (it watched)

    def previous(self) -> Optional[dict[str, Any]]:
        """The note of the agent before this one, when it was watching and never said it
        stopped (it died); None otherwise."""
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("watch: cannot read %s (%s); a watcher's death before this start is not known", self.path, exc)
            return None
        if not isinstance(doc, dict) or doc.get("stopped") or doc.get("pid") == self.pid:
            return None
        alive = doc.get("alive_at")
        return doc if isinstance(alive, (int, float)) and not isinstance(alive, bool) else None

    def alive(self, now: float, watching: bool) -> None:
        """Each tick: the note, at most every ALIVE_EVERY_S, while the home is watched."""
        if not watching or now - self._written_at < ALIVE_EVERY_S:
            return
        self._write(now, stopped=False)

    def stopped(self) -> None:
        """A clean end: the next agent is no restart after a death."""
        if self._writing:
            self._write(time.time(), stopped=True)

    def _write(self, now: float, stopped: bool) -> None:
        try:
            atomic_write_json(self.path, {"pid": self.pid, "started_at": self.started_at, "alive_at": now,
                                          "stopped": stopped}, fsync=False)
        except OSError as exc:  # a full disk: noted by the agent's other writes; a death is then not known
            log.warning("watch: cannot write %s: %s", self.path, exc)
            return
        self._written_at, self._writing = now, True


def restart_message(dead: dict[str, Any], now: float, who: str, adopted: int) -> str:
    down_from = float(dead["alive_at"])
    same_day = time.localtime(down_from)[:3] == time.localtime(now)[:3]
    fmt = "%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S"
    return (f"watcher down from {time.strftime(fmt, time.localtime(down_from))} to "
            f"{time.strftime(fmt, time.localtime(now))} ({human_duration(max(0.0, now - down_from))}), "
            f"restarted by {who}, {adopted} job{'s' if adopted != 1 else ''} adopted")
