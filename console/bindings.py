"""Textual bindings built from the one keymap (``console/keymap.py``): a screen or a widget
takes the bindings of its scope, each with its id (what a user's ``[keys]`` table moves)."""

from __future__ import annotations

from textual.binding import Binding, BindingType

from . import keymap


def bindings(scope: str) -> list[BindingType]:
    """Typed as Textual's own ``BINDINGS`` (a list of ``BindingType``), which a subclass sets."""
    return [Binding(k.keys, k.action, k.label, show=k.show, priority=k.priority, id=k.id,
                    key_display=_display(k)) for k in keymap.of(scope)]


def _display(k: keymap.Key) -> str | None:
    """The footer's key: Textual shows a shift+letter in lower case and F-keys as "f6"."""
    first = k.key_list[0]
    if len(first) == 1 and first.isupper():
        return first
    if first.startswith("f") and first[1:].isdigit():
        return first.upper()
    return None
