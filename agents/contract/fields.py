"""A dataclass field's value checked against its declared type and range, in words an operator
reads: ``expected an integer, got "22"``, ``expected a number from 0 to 1000, got -1``.

One reader for what two sides check: the job spec (agents/contract/jobs.py) checks its own fields
with these, wherever it comes from (the fleet file, an op, state.json), and the fleet file's other
tables (remote/fleet_check.py) with the same words. A value is shown unless its key may hold a
secret (``env``, URLs, tokens, identities): then only its type.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Optional

Bounds = tuple[Optional[float], Optional[float]]  # (lowest, highest); either end None for open

SECRET_WORDS = re.compile(r"env|url|secret|token|passw|key|auth|cred|identity", re.IGNORECASE)
NOT_SECRET = {"host_keys"}  # "key" in its name, but its values are "strict" and "accept-new"


def kind_of(v: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(v), type(v).__name__)


def show(v: Any, key: str = "") -> str:
    """A wrong value for an error message; for a key that may hold a secret, only its type."""
    if (SECRET_WORDS.search(key) and key not in NOT_SECRET) or isinstance(v, dict):
        return kind_of(v)
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


def value_is(tp: str, v: Any) -> bool:
    """Whether ``v`` is of the plain type named ``tp`` (int, float, str, bool); any other name: yes."""
    if tp == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    if tp == "float":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if tp == "str":
        return isinstance(v, str)
    if tp == "bool":
        return isinstance(v, bool)
    return True


def type_problem(f: "dataclasses.Field[Any]", v: Any) -> Optional[str]:
    """What is wrong with ``v`` as the value of field ``f`` (by its declared type), or None."""
    tp = str(f.type)
    if v is None and tp.startswith("Optional["):  # (TOML has no null: only our own defaults are None)
        return None
    if tp.startswith("list["):
        inner = tp[5:-1]
        if f.name == "command" and isinstance(v, str):  # a string command runs with /bin/sh -c
            return None
        if isinstance(v, list) and all(value_is(inner, x) for x in v):
            return None
        expected = {"int": "a list of integers (GPU indices)", "str": "a list of strings"}.get(inner, "a list")
    elif tp.startswith("dict["):
        if not isinstance(v, dict):
            expected = "a table of strings"
        else:  # name the key that is wrong, never a value: env holds secrets
            bad = [k for k, x in v.items() if not isinstance(x, str)]
            if not bad:
                return None
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            return f"expected a table of strings; {bad[0]!r} is {kind_of(v[bad[0]])}{more}"
    else:
        base = tp.replace("Optional[", "").rstrip("]")
        if value_is(base, v):
            return None
        expected = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}.get(base, base)
    return f"expected {expected}, got {show(v, f.name)}"


def range_problem(v: Any, bounds: Bounds, finite: bool = False) -> Optional[str]:
    """What is wrong with the number ``v`` for its range, or None (a value that is no number is
    :func:`type_problem`'s to say). NaN is refused by every range; ``finite``: so is infinity."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    low, high = bounds
    if v == v and (low is None or v >= low) and (high is None or v <= high) and \
            not (finite and v in (float("inf"), float("-inf"))):
        return None
    span = (f"from {low:g} to {high:g}" if low is not None and high is not None
            else f"at least {low:g}" if low is not None else f"at most {high:g}")
    return f"expected a {'finite ' if finite else ''}number {span}, got {v!r}"
