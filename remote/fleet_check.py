"""Checking the fleet file's values (remote/fleet.py reads the file): the error type, each
value's type and range, what a message may show of a value, and near misses of key names.

A message names the file, the line and what was expected, and shows the wrong value, except
for a key that may hold a secret (SECRET_WORDS: ``env``, URLs, tokens, identities), where it
shows only the value's type.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any, Iterable, Optional

from ..agents.contract.errors import OperatorError
from ..agents.contract.watching import scrub


class FleetError(OperatorError, ValueError):
    """A fleet file mistake: ``str()`` is ``file:line: what was expected``."""

    def __init__(self, path: str, line: Optional[int], message: str) -> None:
        # whatever the key and whoever wrote the message, no value that may be a URL is echoed
        message = scrub(message)
        self.path, self.line, self.message = path, line, message
        super().__init__(message, f"{path}:{line}" if line else path)


# Ranges of numeric keys: (lowest, highest), either end None for open. An interval of 0 made
# the agent busy-loop; NaN is refused by every range.
RANGES: dict[str, tuple[Optional[float], Optional[float]]] = {
    "interval": (0.01, 3600.0), "connect_timeout": (0.1, 3600.0), "hello_timeout_s": (0.1, 3600.0),
    "port": (1, 65535),
    "stall_after_s": (1.0, None), "log_max_mb": (0.01, None), "total": (0, None), "tp": (1, None), "dp": (1, None),
    "max_restarts": (0, 1000), "restart_backoff_s": (0.0, 86400.0), "kill_grace_s": (0.0, 3600.0),
    "price_per_hour": (0.0, None),
}
FINITE = {"price_per_hour"}  # keys where TOML's inf means nothing


def check_range(path: str, line: Optional[int], where: str, key: str, v: Any) -> None:
    if key == "stage" and isinstance(v, list):  # each { from, to }: said at the key's line
        from ..agents.contract.staging import StageError, read_stage
        try:
            read_stage(v, where)
        except StageError as exc:
            raise FleetError(path, line, str(exc)) from None
        return
    bounds = RANGES.get(key)
    if bounds is None or not isinstance(v, (int, float)) or isinstance(v, bool):
        return
    low, high = bounds
    if v != v or (low is not None and v < low) or (high is not None and v > high) or \
            (key in FINITE and v in (float("inf"), float("-inf"))):
        span = (f"from {low:g} to {high:g}" if low is not None and high is not None
                else f"at least {low:g}" if low is not None else f"at most {high:g}")
        raise FleetError(path, line, f"{where}: expected a {'finite ' if key in FINITE else ''}number {span}, "
                                     f"got {v!r}")


def check_type(path: str, line: Optional[int], where: str, f: dataclasses.Field, v: Any) -> None:
    tp = str(f.type)
    if v is None and tp.startswith("Optional["):  # (TOML has no null: only our own defaults are None)
        return
    ok = True
    if tp.startswith("list["):
        inner = tp[5:-1]
        if f.name == "command" and isinstance(v, str):
            return
        ok = isinstance(v, list) and all(_is(inner, x) for x in v)
        expected = {"int": "a list of integers (GPU indices)", "str": "a list of strings"}.get(inner, "a list")
    elif tp.startswith("dict["):
        if isinstance(v, dict):  # name the key that is wrong, never a value: env holds secrets
            bad = [k for k, x in v.items() if not isinstance(x, str)]
            if bad:
                raise FleetError(path, line, f"{where}: expected a table of strings; {bad[0]!r} is "
                                             f"{kind_of(v[bad[0]])}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1
                                                                          else ""))
            return
        ok, expected = False, "a table of strings"
    else:
        base = tp.replace("Optional[", "").rstrip("]")
        ok = _is(base, v)
        expected = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}.get(base, base)
    if not ok:
        raise FleetError(path, line, f"{where}: expected {expected}, got {show(v, f.name)}")


SECRET_WORDS = re.compile(r"env|url|secret|token|passw|key|auth|cred|identity", re.IGNORECASE)


def kind_of(v: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(v), type(v).__name__)


def show(v: Any, key: str = "") -> str:
    """A wrong value for an error message; for a key that may hold a secret, only its type."""
    if (SECRET_WORDS.search(key) and key not in NOT_SECRET) or isinstance(v, dict):
        return kind_of(v)
    import json
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


def _is(tp: str, v: Any) -> bool:
    if tp == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    if tp == "float":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if tp == "str":
        return isinstance(v, str)
    if tp == "bool":
        return isinstance(v, bool)
    return True


HOST_KEYS = ("strict", "accept-new")
NOT_SECRET = {"host_keys"}  # "key" in its name, but its values are the two words above


def unknown_key(where: str, key: str, allowed: Iterable[str], what: str = "key") -> str:
    """``[[nodes]] #1 has no key 'prot' (did you mean 'port'?); expected one of ...``"""
    from ..agents.contract.watching import shown

    allowed = list(allowed)
    said = shown(key)  # a URL pasted as a key is a secret too
    near = did_you_mean(key, allowed) if said == repr(key) else ""
    return f"{where} has no {what} {said}{near}; expected one of {', '.join(allowed)}"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'port'?)`` for a near miss of one of ``choices``, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_host_keys(path: str, line: Optional[int], where: str, v: Any) -> None:
    if v not in HOST_KEYS:
        raise FleetError(path, line, f"{where}: expected \"strict\" or \"accept-new\", got {show(v, 'host_keys')}")
