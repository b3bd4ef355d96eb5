"""What differs between the spec a job last ran with and the fleet file's: what a relaunch
changes, said before it runs (the console's question, `status --json`'s spec_changes)."""

from __future__ import annotations

import shlex
from typing import Any

from .contract.jobs import SHELL, JobSpec


def spec_changes(old: JobSpec, new: JobSpec) -> list[str]:
    """What differs between the spec a job last ran with and the fleet file's, one
    ``field: old -> new`` each; for ``env`` the names of the variables only (values are secrets)."""
    if old == new:
        return []
    a, b = old.to_dict(), new.to_dict()
    out = []
    for key in a:
        if a[key] == b.get(key):
            continue
        if key == "env":
            names = sorted(k for k in set(a[key]) | set(b[key]) if a[key].get(k) != b[key].get(k))
            out.append(f"env: {', '.join(names)} changed")
        elif key == "options":
            for k in sorted(set(a[key]) | set(b[key])):
                if a[key].get(k) != b[key].get(k):
                    out.append(f"{k}: {_shown(a[key].get(k))} -> {_shown(b[key].get(k))}")
        else:
            out.append(f"{key}: {_shown(a[key])} -> {_shown(b[key])}")
    return out


def _shown(value: Any, width: int = 60) -> str:
    if isinstance(value, list) and value[:2] == [SHELL, "-c"] and len(value) == 3:
        text = repr(value[2])  # a shell-form command: its string, as the fleet file wrote it
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        text = shlex.join(value) if value else "[]"
    else:
        text = repr(value)
    return text if len(text) <= width else text[:width - 1] + "…"

