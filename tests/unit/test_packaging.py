"""The install: every package of the three folders is in pyproject's list, under gpudeck.*"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_installed_under_the_gpudeck_namespace():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = cfg["package-dir"]
    assert mapping == {f"gpudeck.{d}": d for d in ("agents", "console", "remote")}
    on_disk = sorted("gpudeck." + ".".join(p.parent.relative_to(ROOT).parts)
                     for d in ("agents", "console", "remote") for p in (ROOT / d).rglob("__init__.py")
                     if "__pycache__" not in p.parts)
    assert sorted(cfg["packages"]) == on_disk
