"""What differs between the spec a job last ran with and the fleet file's: what a relaunch
changes, said before it runs (the console's question, `status --json`'s spec_changes)."""

from __future__ import annotations

import os
import shlex
from typing import Any

from ..contract.jobs import SHELL, JobSpec


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
                    out.append(_change(k, a[key].get(k), b[key].get(k)))
        else:
            out.append(_change(key, a[key], b[key]))
    return out


WIDTH = 60  # the most of each side shown
CONTEXT = 12  # characters kept around the part that differs, when no space is nearer


def _change(key: str, old: Any, new: Any) -> str:
    """``key: old -> new``; two long values are shown around where they differ, with the same
    cut on both sides (… marks it), so the change itself is what is left, never the prefix
    they share (a long command with one flag changed)."""
    a, b = _text(old), _text(new)
    if len(a) > WIDTH or len(b) > WIDTH:
        a, b = _around_difference(a, b)
    return f"{key}: {a} -> {b}"


def _around_difference(a: str, b: str) -> tuple[str, str]:
    head = len(os.path.commonprefix([a, b]))
    tail = len(os.path.commonprefix([a[head:][::-1], b[head:][::-1]]))  # the shared end, after the shared start
    # the cut falls on a space near the difference, a word before it (a flag and its value are
    # shown), else CONTEXT characters away
    word = a.rfind(" ", 0, head)
    space = a.rfind(" ", max(0, head - 3 * CONTEXT), max(0, word)) if word > 0 else -1
    start = space + 1 if space > 0 else max(0, head - CONTEXT)
    shared_end = a[len(a) - tail:]
    space = shared_end.find(" ", 1, 2 * CONTEXT)
    drop_end = tail - (space if space > 0 else min(tail, CONTEXT))

    def cut(t: str) -> str:
        middle = t[start:len(t) - drop_end]
        if len(middle) > WIDTH:  # the differing part itself is long: its start is what says most
            middle, drop = middle[:WIDTH - 1], True
        else:
            drop = drop_end > 0
        return ("…" if start else "") + middle + ("…" if drop else "")
    return cut(a), cut(b)


def _text(value: Any) -> str:
    if isinstance(value, list) and value[:2] == [SHELL, "-c"] and len(value) == 3:
        text = repr(value[2])  # a shell-form command: its string, as the fleet file wrote it
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        text = shlex.join(value) if value else "[]"
    else:
        text = repr(value)
    return text

