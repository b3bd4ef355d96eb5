"""Keep watch when nobody looks: the agent's restart policies, alerts, notifications and
timeline (watcher.py), and the detached agent that outlives its consoles (daemon.py)."""

from .watcher import Watcher

__all__ = ["Watcher"]
