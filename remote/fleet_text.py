"""Where things are in the fleet file's text: the TOML decoded with its mistakes at their line,
and the line of each table and key (tomllib keeps no positions), for the readers of each section
(remote/fleet.py and its fleet_* siblings)."""

from __future__ import annotations

import re
import sys
from typing import Any, Callable, Optional, Protocol

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .fleet_check import FleetError

Fail = Callable[[Optional[int], str], Exception]  # (line, message) -> the FleetError to raise


class Locator(Protocol):
    """The line of a table or key in the fleet file's text, or None (:class:`TextLocator`)."""

    def table(self, name: str, index: Optional[int]) -> Optional[int]: ...

    def key(self, table: str, index: Optional[int], key: str) -> Optional[int]: ...

    def top(self, key: str) -> Optional[int]: ...


def decode(text: str, path: str) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = tomllib.loads(text)
        return doc
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        line = int(m.group(1)) if m else None
        if line is None and "end of document" in str(exc):  # the last line with something on it
            line = max((i for i, t in enumerate(text.splitlines(), 1) if t.strip()), default=None)
        msg = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", str(exc))
        raise FleetError(path, line, f"not valid TOML: {msg}") from None



class TextLocator:
    """Finds the line of a table or key in the TOML text (tomllib keeps no positions)."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.-]+)\s*\]\]?")
    _KEY = re.compile(r"^\s*([A-Za-z0-9_-]+|\"[^\"]*\")\s*=")

    def __init__(self, text: str) -> None:
        self.tables: list[tuple[str, int, int]] = []  # (name, index within array, line)
        self.keys: dict[tuple[str, Optional[int], str], int] = {}
        self.top_keys: dict[str, int] = {}
        counts: dict[str, int] = {}
        current: tuple[str, Optional[int]] = ("", None)
        for n, line in enumerate(text.splitlines(), start=1):
            h = self._HEADER.match(line)
            if h:
                name = h.group(2)
                if h.group(1) == "[[":
                    idx = counts.get(name, 0)
                    counts[name] = idx + 1
                    current = (name, idx)
                else:
                    current = (name, None)
                self.tables.append((name, current[1] if current[1] is not None else -1, n))
                self.top_keys.setdefault(name, n)
                continue
            k = self._KEY.match(line)
            if k:
                key = k.group(1).strip('"')
                self.keys.setdefault((current[0], current[1], key), n)
                if current[0] == "":
                    self.top_keys.setdefault(key, n)

    def table(self, name: str, index: Optional[int]) -> Optional[int]:
        for t, i, line in self.tables:
            if t == name and (index is None or i == index):
                return line
        return None

    def key(self, table: str, index: Optional[int], key: str) -> Optional[int]:
        return self.keys.get((table, index, key)) or self.table(table, index)

    def top(self, key: str) -> Optional[int]:
        return self.top_keys.get(key)

