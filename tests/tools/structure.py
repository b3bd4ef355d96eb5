"""The house in figures: rooms (product modules), arrows (imports between them) and the arrows
that point the wrong way, read from the import graph (grimp, installed with import-linter).

    .venv/bin/python tests/tools/structure.py          # the figures, then each wrong-way arrow
    .venv/bin/python tests/tools/structure.py --quiet  # the figures alone

An arrow points the wrong way when it goes against the direction the layout intends:
  - console/ or remote/ into agents/ past agents/contract/ (the wire, the ops, the kinds, the
    documents), except the workers' command-line entry points that `gpudeck` passes through to;
  - agents/contract/ into anything outside itself (the contract is a leaf);
  - the node daemon (agents/, agents/watch/) into the workers (they are programs it starts);
  - a worker into the node daemon (a worker needs the contract and its own wing only).
Files, not packages: ``a.b`` and ``a.b.c`` are two rooms; a package's __init__ is a room too.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import grimp

PRODUCT = ("gpudeck.agents", "gpudeck.remote", "gpudeck.console")
CONTRACT = "gpudeck.agents.contract"
WORKERS = "gpudeck.agents.workers"
ROOT = Path(__file__).resolve().parents[2]


def passthrough() -> frozenset[str]:
    """What the console runs in-process for `gpudeck generate|extract|plan|audit|sim-engine`: the
    workers' entry points that pyproject.toml's import contract lets console/ import, by name."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (rule,) = [c for c in contracts if c["name"].startswith("console/ and remote/ import nothing of agents/")]
    targets = (line.split("->")[1].strip() for line in rule["ignore_imports"])
    return frozenset(t for t in targets if _under(t, WORKERS))


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


PASSTHROUGH = passthrough()


def wing(module: str) -> str:
    if _under(module, "gpudeck.console"):
        return "console"
    if _under(module, "gpudeck.remote"):
        return "remote"
    if _under(module, CONTRACT):
        return "contract"
    if _under(module, WORKERS):
        return "workers"
    if module == "gpudeck.agents":  # the package's face: the version
        return "contract"
    return "daemon"


def wrong_way(a: str, b: str) -> bool:
    wa, wb = wing(a), wing(b)
    if wa in ("console", "remote"):
        return wb in ("daemon", "workers") and b not in PASSTHROUGH
    if wa == "contract":
        return wb != "contract"
    if wa == "daemon":
        return wb == "workers"
    if wa == "workers":
        return wb == "daemon"
    return False


def figures() -> tuple[int, list[tuple[str, str]], list[tuple[str, str]]]:
    graph = grimp.build_graph(*PRODUCT)
    rooms = sorted(m for m in graph.modules if _under(m, "gpudeck"))
    arrows = sorted((a, b) for a in rooms for b in graph.find_modules_directly_imported_by(a)
                    if b in graph.modules and b != a)
    return len(rooms), arrows, [(a, b) for a, b in arrows if wrong_way(a, b)]


def main(argv: list[str]) -> int:
    rooms, arrows, wrong = figures()
    print(f"rooms {rooms}  arrows {len(arrows)}  wrong-way arrows {len(wrong)}")
    if "--quiet" not in argv:
        for a, b in wrong:
            print(f"  {a} -> {b}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
