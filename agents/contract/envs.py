"""An engine environment as both sides know it: the fleet file's ``[[envs]]`` table
(:class:`EnvSpec`), and where a node keeps it.

``gpudeck deploy`` builds each env a node's jobs name (``python_env``) into its own venv,
``<home>/envs/<name>-<key>``, the key a hash of the table: an unchanged table is not built
again, a changed one is built beside the old one. ``<home>/envs/<name>`` is a link to the last
build that succeeded, swapped only then: a failed build leaves the old env in use. A job with
``python_env`` runs with that link's python, and keeps the build it started with (the link
resolved at its launch); the older builds of a name are removed, keeping the last two and any a
live job runs in."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

ENVS_DIR = "envs"  # under the node's home
ENV_DOC = ".gpudeck-env.json"  # in a build: its table, key and when it was built; written last
ENV_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class EnvSpec:
    """One ``[[envs]]`` table."""

    name: str
    packages: list[str]  # pip specifiers: "sglang[all]==0.5.9", "torch>=2.8"
    pip_args: list[str] = field(default_factory=list)  # "--prerelease=allow", "--extra-index-url", "URL"
    python: Optional[str] = None  # the base interpreter on the node; None: the node's python
    setup: list[str] = field(default_factory=list)  # shell commands run in the venv after the install

    @property
    def key(self) -> str:
        """12 hex digits of the table's hash: the build's name, and what says it changed."""
        doc = json.dumps({"packages": self.packages, "pip_args": self.pip_args, "python": self.python,
                          "setup": self.setup}, sort_keys=True)
        return hashlib.sha256(doc.encode()).hexdigest()[:12]

    @property
    def build_name(self) -> str:
        return f"{self.name}-{self.key}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "packages": list(self.packages), "pip_args": list(self.pip_args),
                "python": self.python, "setup": list(self.setup), "key": self.key}


def package_names(packages: list[str]) -> list[str]:
    """The distribution names of pip specifiers (``sglang[all]==0.5.9`` -> ``sglang``); a URL or
    a path names none."""
    out = []
    for p in packages:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", p)
        if m and "://" not in p and "/" not in p.split(";")[0].split("@")[0]:
            out.append(m.group(1))
    return out
