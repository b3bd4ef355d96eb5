"""What the watcher needs when no console is there: ``<home>/watch.json``, read by its one
reader (agents/contract/watchfile.py); saved here, where a failed write is an alert."""

from __future__ import annotations

from pathlib import Path

from ..contract.watchfile import WATCH_FILE, WatchDoc

__all__ = ["WATCH_FILE", "WatchConfig"]


class WatchConfig(WatchDoc):
    def save(self, home: Path) -> None:
        """watch.json (0600), atomically; on a full disk the settings stay in memory, the file
        keeps its last good version and the failure is an alert (agents/sense/writes.py)."""
        from ..sense import writes

        path = Path(home) / WATCH_FILE
        try:
            self._write(path)
        except OSError as exc:
            writes.failed(path, exc)
        else:
            writes.ok(path)
