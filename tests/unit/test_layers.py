"""The layers: agents/ imports neither textual nor asyncssh; remote/ never imports textual; the
console's core and its headless commands work without textual.

The unit tier's tests of this file (starts nothing); the others are in tests/system/test_layers.py."""

from __future__ import annotations

import re

from support import ROOT


def test_no_test_imports_conftest():
    """Helpers live in the support package; conftest.py holds fixtures only."""
    offenders = [p.name for p in (ROOT / "tests").rglob("*.py")
                 if re.search(r"^\s*(from conftest import|import conftest)", p.read_text(), re.M)]
    assert offenders == []


def test_the_contract_s_leaf_rule_names_every_other_module_of_agents():
    """import-linter's "agents/contract/ is a leaf" lists agents/'s other modules by name: one
    added to agents/ must be added there too, or the contract could import it unseen."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (leaf,) = [c for c in config if c["name"].startswith("agents/contract/ is a leaf")]
    tree = {p.stem if p.suffix == ".py" else p.name for p in (ROOT / "agents").iterdir()
            if p.name not in ("__pycache__", "contract", "__init__.py") and (p.suffix == ".py" or p.is_dir())}
    assert {m.removeprefix("gpudeck.agents.") for m in leaf["forbidden_modules"]
            if m.startswith("gpudeck.agents.")} == tree


def test_product_imports_are_relative_so_static_tools_follow_them():
    """No folder is named gpudeck: an import of gpudeck.* resolves only through the installed
    package, which editors, type checkers and structure tools cannot follow. Relative imports
    resolve from the checkout itself."""
    bad = []
    for wing in ("agents", "console", "remote"):
        for path in (ROOT / wing).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if re.match(r"\s*(from|import) gpudeck\b", line):
                    bad.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_the_floors_of_agents_name_every_folder_but_the_workers():
    """import-linter's "agents/ floors" contract states which folder of agents/ may import which:
    a folder added to agents/ must take its floor there, or it stands outside every rule."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (floors,) = [c for c in config if c["name"].startswith("agents/ floors")]
    named = {part.strip() for layer in floors["layers"] for part in layer.split("|")}
    folders = {p.name for p in (ROOT / "agents").iterdir() if (p / "__init__.py").is_file()}
    assert named == folders - {"workers"}


# functions over the limit, each with why it is still there
LONG_FUNCTIONS_ALLOWED = {
    "agents/node/doctor.py",  # its checks move to a doctor/ package of one module per check (issue 37)
}


def test_no_product_function_is_over_60_lines():
    """A function reads in one sitting: at most 60 lines, def to last line, in agents/, remote/
    and console/."""
    import ast

    long = []
    for wing in ("agents", "console", "remote"):
        for path in sorted((ROOT / wing).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in LONG_FUNCTIONS_ALLOWED:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > 60:
                        long.append(f"{rel}:{node.lineno} {node.name}: {lines} lines")
    assert long == [], "\n".join(long)


def test_no_console_module_is_over_500_lines():
    """A module of the console reads in one sitting: at most 500 lines. FleetState and the app
    are each a module of their own input and wiring, with their parts beside them (state_*.py,
    app_*.py, screens/filter_sort.py)."""
    long = [f"{p.relative_to(ROOT).as_posix()}: {n} lines" for p in sorted((ROOT / "console").rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > 500]
    assert long == [], "\n".join(long)
