"""Checking the fleet file's values (remote/fleet.py reads the file): the error type, each
value's type and range (in the words of agents/contract/fields.py, which a job's spec checks its
own fields with), and near misses of key names.

A message names the file, the line and what was expected, and shows the wrong value, except
for a key that may hold a secret (``env``, URLs, tokens, identities), where it shows only the
value's type.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Iterable, Optional

from ..agents.contract.errors import OperatorError
from ..agents.contract.fields import Bounds, range_problem, show, type_problem
from ..agents.contract.watching import scrub


class FleetError(OperatorError, ValueError):
    """A fleet file mistake: ``str()`` is ``file:line: what was expected``."""

    def __init__(self, path: str, line: Optional[int], message: str) -> None:
        # whatever the key and whoever wrote the message, no value that may be a URL is echoed
        message = scrub(message)
        self.path, self.line, self.message = path, line, message
        super().__init__(message, f"{path}:{line}" if line else path)


# Ranges of the numeric keys of the fleet file's own tables ([defaults], [[nodes]], [[clusters]]):
# (lowest, highest), either end None for open. An interval of 0 made the agent busy-loop. A
# job's are its spec's own (agents/contract/jobs.py: JOB_RANGES), checked by JobSpec.
RANGES: dict[str, Bounds] = {
    "interval": (0.01, 3600.0), "connect_timeout": (0.1, 3600.0), "hello_timeout_s": (0.1, 3600.0),
    "port": (1, 65535), "price_per_hour": (0.0, None),
}
FINITE = {"price_per_hour"}  # keys where TOML's inf means nothing


def check_range(path: str, line: Optional[int], where: str, key: str, v: Any) -> None:
    bounds = RANGES.get(key)
    problem = range_problem(v, bounds, finite=key in FINITE) if bounds is not None else None
    if problem:
        raise FleetError(path, line, f"{where}: {problem}")


def check_type(path: str, line: Optional[int], where: str, f: "dataclasses.Field[Any]", v: Any) -> None:
    problem = type_problem(f, v)
    if problem:
        raise FleetError(path, line, f"{where}: {problem}")


HOST_KEYS = ("strict", "accept-new")


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


def kind_of(v: Any) -> str:
    """A TOML value's type in words ("an integer", "a table"): what a message shows of a wrong value."""
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(v), type(v).__name__)
