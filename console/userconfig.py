"""The console's user config: ``$XDG_CONFIG_HOME/gpudeck/console.toml`` (``~/.config/gpudeck/``),
or the file ``$GPUDECK_CONSOLE_CONFIG`` names. Its ``[keys]`` table moves keys by binding id
(console/keymap.py lists them; docs/console.md#keys too), for hands that want the old keys back::

    [keys]
    "job.kill" = "k"              # kill on k again ...
    "cursor.up" = "up"            # ... so k no longer moves up in a table ...
    "scroll.up" = "up"            # ... nor in a log
    "view.describe" = ["enter"]   # a list, or "a,b": several keys

The file is optional. A mistake in it (an id no binding has, a value that is no key, two
bindings on one key) stops `gpudeck up` with the file and the key named: a keymap half
applied would leave a hand pressing keys that do something else.

No Textual here: the keymap is checked against console/keymap.py's table.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from . import keymap as km

ENV = "GPUDECK_CONSOLE_CONFIG"
TABLES = ("keys",)
# what a hand may write for a key, as Textual names it
_NAMES = {"?": "question_mark", "/": "slash", ":": "colon", " ": "space", ",": "comma", ".": "full_stop",
          "-": "minus", "+": "plus", "=": "equals_sign", ";": "semicolon", "!": "exclamation_mark", "esc": "escape",
          "return": "enter"}


class UserConfigError(Exception):
    """The user config has a mistake; the message names the file and the key."""


def config_path() -> Path:
    given = os.environ.get(ENV)
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "gpudeck" / "console.toml"


def load_keymap(path: Optional[Path] = None) -> dict[str, str]:
    """The ``[keys]`` of the user config, as Textual's ``set_keymap`` takes it ({id: "k1,k2"});
    {} without a file."""
    path = path or config_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise UserConfigError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserConfigError(f"{path}: not TOML: {exc}") from None
    unknown = sorted(set(doc) - set(TABLES))
    if unknown:
        raise UserConfigError(f"{path}: unknown table or key {unknown[0]!r}; the console reads [keys]")
    keys = doc.get("keys", {})
    if not isinstance(keys, dict):
        raise UserConfigError(f"{path}: keys must be a table: [keys]")
    return parse_keys(keys, str(path))


def parse_keys(keys: dict[str, Any], where: str) -> dict[str, str]:
    """Check a [keys] table against the keymap: ids that exist, keys that are keys, no clash."""
    out: dict[str, str] = {}
    for binding_id, value in keys.items():
        if binding_id not in km.BY_ID:
            near = [i for i in km.BY_ID if i.split(".")[-1] == binding_id.split(".")[-1]]
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise UserConfigError(f"{where}: [keys] {binding_id!r}: no binding has this id{hint}; the ids are in "
                                  f"docs/console.md#keys")
        items = value if isinstance(value, list) else str(value).split(",") if isinstance(value, str) else None
        names = [_name(str(x)) for x in items] if items is not None and all(isinstance(x, str) for x in items) else []
        if not names or any(not n for n in names):
            raise UserConfigError(f"{where}: [keys] {binding_id!r}: {value!r} is no key: a key's name (\"k\", "
                                  f"\"ctrl+k\", \"f9\") or a list of them")
        out[binding_id] = ",".join(names)
    moved = tuple(km.Key(**{**k.__dict__, "keys": out[k.id]}) if k.id in out else k for k in km.KEYMAP)
    clashes = km.collisions(moved)
    if clashes:
        raise UserConfigError(f"{where}: [keys] puts two bindings on one key: {clashes[0]}; move the other one too")
    return out


def _name(key: str) -> str:
    key = key if key.strip() == "" else key.strip()
    if key in _NAMES:
        return _NAMES[key]
    if "+" in key[:-1]:  # ctrl+k, shift+tab: in lower case (Textual's names)
        *mods, last = key.split("+")
        return "+".join([*(m.lower() for m in mods), _NAMES.get(last, last.lower())])
    return key.lower() if len(key) > 1 else key
