"""No import cycles between product modules (gpudeck.agents, gpudeck.remote, gpudeck.console).

The import graph comes from grimp (installed with import-linter); it counts every import
statement, those inside functions and under TYPE_CHECKING included. A cycle is a strongly
connected component of more than one module.
"""

from __future__ import annotations

import grimp
import pytest

PRODUCT = ("gpudeck.agents", "gpudeck.remote", "gpudeck.console")

# Cycles that exist today and are being removed on their own branches. Each entry is the
# set of modules one cycle may span; a cycle found must lie within one entry. Empty this
# list as that work merges: test_known_cycles_still_exist fails once an entry is stale.
KNOWN_CYCLES: list[frozenset[str]] = []  # none left; a cycle that comes back fails the test


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PRODUCT)


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, without recursion)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            if i < len(edges[v]):
                work.append((v, i + 1))
                w = edges[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
            if work:  # back in the caller: its low link takes this one's
                caller = work[-1][0]
                low[caller] = min(low[caller], low[v])
    return cycles


def describe(graph: grimp.ImportGraph, cycle: list[str]) -> str:
    lines = []
    for a in cycle:
        for b in cycle:
            for d in graph.get_import_details(importer=a, imported=b):
                lines.append(f"    {a}:{d['line_number']}: {d['line_contents']}")
    return "\n".join(lines)


def test_the_graph_has_every_layer(graph):
    for package in PRODUCT:
        assert len(graph.find_descendants(package)) > 3, package


def test_no_import_cycle_between_product_modules(graph):
    unknown = [c for c in import_cycles(graph) if not any(set(c) <= known for known in KNOWN_CYCLES)]
    assert not unknown, "import cycles:\n" + "\n".join(
        f"  {' <-> '.join(c)}\n{describe(graph, c)}" for c in unknown)


def test_known_cycles_still_exist(graph):
    # an entry whose cycle is gone must leave KNOWN_CYCLES, so that it cannot come back unseen
    cycles = import_cycles(graph)
    stale = [sorted(known) for known in KNOWN_CYCLES if not any(set(c) <= known for c in cycles)]
    assert not stale, f"these cycles are gone: remove them from KNOWN_CYCLES: {stale}"


def test_the_cycle_finder_finds_cycles():
    g = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c", "p.d"):
        g.add_module(m)
    g.add_import(importer="p.a", imported="p.b")
    g.add_import(importer="p.b", imported="p.c")
    g.add_import(importer="p.c", imported="p.a")
    g.add_import(importer="p.c", imported="p.d")
    assert import_cycles(g) == [["p.a", "p.b", "p.c"]]
    g.remove_import(importer="p.c", imported="p.a")
    assert import_cycles(g) == []
