"""The fleet file's ``[[plans]]``: the plan.json files (``gpudeck plan generate|extract
--out DIR``) of the fleets the operator weighs, each as planned or scaled to a node set. `gpudeck
plan compare -f FLEET` and the console's plans screen (``p``) set them side by side with the
same arithmetic (agents/workers/plan/compare.py). A table is one argument of `plan compare`:
``path`` its PLAN, ``name`` its NAME=, ``servers`` and ``price`` its ``,servers=N,price=D``.

The plans live on the operator's machine (a pilot's output), so a relative ``path`` is taken
from the fleet file's directory, and ``~`` is this machine's home."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Optional

from ..agents.contract.names import name_problem
from .fleet_check import kind_of, unknown_key
from .fleet_text import Fail, Locator

PLAN_KEYS = ["name", "path", "servers", "price"]


@dataclass(frozen=True)
class PlanRef:
    """One ``[[plans]]`` table."""

    path: str  # a plan.json or the directory that holds it; absolute once parsed
    name: Optional[str] = None  # the fleet's name in the comparison; None: the plan's directory
    servers: Optional[int] = None  # the node set's servers (GPUs for an extract plan); None: the plan's own
    price: Optional[float] = None  # dollars per server-hour (GPU-hour); None: the plan's own price_per_hour


def parse_plans(raw: Any, base: str, loc: Locator, fail: Fail) -> list[PlanRef]:
    """[[plans]] tables, ``path`` made absolute from ``base`` (the fleet file's directory)."""
    if not isinstance(raw, list):
        raise fail(loc.top("plans"), "'plans' must be an array of tables: [[plans]]")
    out: list[PlanRef] = []
    for i, table in enumerate(raw):
        where = f"[[plans]] #{i + 1}"
        if not isinstance(table, dict):
            raise fail(loc.table("plans", i), f"{where} must be a table")
        for k, v in table.items():
            line = loc.key("plans", i, k)
            if k not in PLAN_KEYS:
                raise fail(line, unknown_key(where, k, PLAN_KEYS))
            if k in ("name", "path") and (not isinstance(v, str) or not v.strip()):
                raise fail(line, f"{where} {k!r}: expected a non-empty string, got {kind_of(v)}")
            if k == "name" and (problem := name_problem(v, "a plan's name")):
                raise fail(line, f"{where} 'name': {problem}")
            if k == "servers" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise fail(line, f"{where} 'servers': expected a whole number of at least 1, got {v!r}")
            if k == "price" and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                 or v < 0):
                raise fail(line, f"{where} 'price': expected dollars per server-hour, a finite number at least 0, "
                                 f"got {v!r}")
        if "path" not in table:
            raise fail(loc.table("plans", i), f"{where} needs a 'path': a plan.json, or the directory that holds it")
        path = os.path.join(base, os.path.expanduser(table["path"]))
        price = table.get("price")
        out.append(PlanRef(path=os.path.normpath(path), name=table.get("name"), servers=table.get("servers"),
                           price=None if price is None else float(price)))
    return out
