"""The fleet file's ``[[envs]]``: engine environments that `gpudeck deploy` builds on the nodes
whose jobs name them (``python_env``; agents/contract/envs.py says where and how)."""

from __future__ import annotations

from typing import Any

from ..agents.contract.envs import ENV_NAME, EnvSpec
from .fleet_check import kind_of, unknown_key
from .fleet_text import Fail, Locator

ENV_KEYS = ["name", "packages", "pip_args", "python", "setup"]


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) and x.strip() for x in v)


def parse_envs(raw: Any, loc: Locator, fail: Fail) -> dict[str, EnvSpec]:
    if not isinstance(raw, list):
        raise fail(loc.top("envs"), "'envs' must be an array of tables: [[envs]]")
    out: dict[str, EnvSpec] = {}
    for i, table in enumerate(raw):
        name = table.get("name") if isinstance(table, dict) else None
        where = f"[[envs]] #{i + 1}" + (f" ({name!r})" if isinstance(name, str) else "")
        if not isinstance(table, dict):
            raise fail(loc.table("envs", i), f"{where} must be a table")
        for k, v in table.items():
            line = loc.key("envs", i, k)
            if k not in ENV_KEYS:
                raise fail(line, unknown_key(where, k, ENV_KEYS))
            if k in ("name", "python") and (not isinstance(v, str) or not v.strip()):
                raise fail(line, f"{where} {k!r}: expected a non-empty string, got {kind_of(v)}")
            if k in ("packages", "pip_args", "setup") and not _strings(v):
                raise fail(line, f"{where} {k!r}: expected a list of non-empty strings, got {kind_of(v)}")
        if not isinstance(name, str):
            raise fail(loc.table("envs", i), f"{where} needs a 'name'")
        if not ENV_NAME.fullmatch(name):
            raise fail(loc.key("envs", i, "name"), f"{where} 'name': 1 to 64 letters, digits, '.', '_' or '-', "
                                                    f"starting with a letter or a digit (it names a folder on the "
                                                    f"node); got {name!r}")
        if name in out:
            raise fail(loc.key("envs", i, "name"), f"{where}: env {name!r} is declared twice")
        if not table.get("packages"):
            raise fail(loc.table("envs", i), f"{where} needs 'packages': the pip specifiers it installs")
        out[name] = EnvSpec(name=name, packages=list(table["packages"]), pip_args=list(table.get("pip_args", [])),
                            python=table.get("python"), setup=list(table.get("setup", [])))
    return out
