"""When this laptop last looked at each fleet, for "since you last looked" (``since.py``).

One small JSON file, ``$XDG_STATE_HOME/gpudeck/last-looked.json`` (``~/.local/state/gpudeck/``
by default): ``{"fleets": {"/abs/path/fleet.toml": 1764504000.0, ...}}``, keyed by the fleet
file's absolute path ("this machine" for the fleet of no file). It is replaced atomically
(a temp file, fsynced, renamed), so a crash leaves the old moment or the new one. A file
that cannot be read or does not hold that shape is ignored with a warning: the console
then looks back ``LOOKBACK_S``, as it does the first time, and never fails for it. The
newest ``MAX_FLEETS`` fleets are kept.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Optional, Union

from ..agents.contract.atomic import atomic_write_json

FILE = "last-looked.json"
LOOKBACK_S = 8 * 3600.0  # the first time: what happened in the last 8 hours
MAX_FLEETS = 100
NO_FILE = "this machine"


def default_path() -> Path:
    """``$XDG_STATE_HOME/gpudeck/last-looked.json``; a relative $XDG_STATE_HOME is ignored,
    as the XDG spec says."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "gpudeck" / FILE


def fleet_key(path: Optional[str]) -> str:
    """The fleet file's absolute path; "this machine" for the fleet of no file."""
    return os.path.abspath(path) if path else NO_FILE


class LookedStore:
    """Read and record the last look per fleet. ``warning`` says why the file was ignored."""

    def __init__(self, path: Union[str, Path, None] = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.warning: Optional[str] = None

    def _read(self) -> dict[str, float]:
        try:
            doc: Any = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            self.warning = f"{self.path}: cannot be read ({exc}); looking back {LOOKBACK_S / 3600:g} h"
            return {}
        fleets = doc.get("fleets") if isinstance(doc, dict) else None
        if not isinstance(fleets, dict):
            self.warning = f"{self.path}: not a gpudeck last-looked file; looking back {LOOKBACK_S / 3600:g} h"
            return {}
        return {k: float(v) for k, v in fleets.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}

    def last(self, key: str) -> Optional[float]:
        """When this fleet was last looked at; None the first time (or when the file is broken)."""
        return self._read().get(key)

    def since(self, key: str, now: float) -> float:
        """The moment "since you last looked" starts: the last look, else ``LOOKBACK_S`` ago."""
        t = self.last(key)
        return t if t is not None and t <= now else now - LOOKBACK_S

    def record(self, key: str, t: float) -> Optional[str]:
        """Remember that ``key`` was looked at ``t``; why not, when the file cannot be written."""
        fleets = self._read()
        fleets[key] = t
        kept = dict(sorted(fleets.items(), key=lambda kv: kv[1])[-MAX_FLEETS:])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.path, {"fleets": kept})
        except OSError as exc:
            return f"{self.path}: cannot be written ({exc})"
        return None
