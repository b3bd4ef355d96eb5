"""What a name shown on screen may not hold: control characters.

A node, cluster or plan name is a word in every view, every table row and every log line. A
newline in one starts a line that looks like another node's; an escape sequence recolours the
terminal; a bidi override reverses what follows. Job names are stricter still
(jobs.job_name_problem)."""

from __future__ import annotations

import unicodedata
from typing import Optional

# Cc: C0/C1 controls (newline, tab, escape); Cf: invisible formatting (bidi overrides, zero
# width); Zl/Zp: the line and paragraph separators, which end a line as a newline does
_REFUSED = {"Cc", "Cf", "Zl", "Zp"}


def control_character(text: str) -> Optional[str]:
    """The first control character of ``text``, said (``'\\n' (U+000A) at position 4``), or None."""
    for i, ch in enumerate(text):
        if unicodedata.category(ch) in _REFUSED:
            return f"{ch!r} (U+{ord(ch):04X}) at position {i + 1}"
    return None


def name_problem(name: str, what: str = "a name") -> Optional[str]:
    """Why ``name`` cannot be shown as one, or None."""
    bad = control_character(name)
    if bad is not None:
        return f"{what} may not hold a control character; {name!r} holds {bad}"
    return None
