"""The Prometheus metrics an inference engine defines, read from its source with ``ast``.

    python tests/tools/engine_metric_names.py vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl > names.json
    python tests/tools/engine_metric_names.py /path/to/site-packages/sglang

For engines whose metrics module cannot be imported on a CPU machine (vLLM: see
tests/unit/test_engine_sources.py), this is how the tests know the names without a GPU and without
typing them by hand. A source is a wheel, a directory or a .py file. Prints JSON:
``{"source": ..., "metrics": {exposed name: "counter" | "gauge" | "histogram" | "summary" | "unknown"}}``.

A metric is found where a string literal ``"vllm:..."`` / ``"sglang:..."`` is
- the ``name=`` (or first positional) argument of ``Gauge(``, ``Counter(``, ``Histogram(``,
  ``Summary(``, SGLang's ``GaugeHistogram(`` (it serves gauges) or an engine's injectable ``self._gauge_cls(`` ... : that constructor's type;
- anywhere else in a function that builds metrics of one type only from a variable name
  (vLLM's ``counter_specs = [("vllm:spec_decode_num_drafts", ...)]`` then
  ``self._counter_cls(name=name, ...)``): that type; otherwise ``unknown``.
Counters are listed under the name prometheus_client exposes, with ``_total``.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Iterator, Optional

NAME = re.compile(r"^(vllm|sglang):[A-Za-z0-9_]+$")
KINDS = {"gauge": "gauge", "counter": "counter", "histogram": "histogram", "summary": "summary",
         "gaugehistogram": "gauge"}  # SGLang's GaugeHistogram: gauges with gt/le labels


def _kind(call: ast.Call) -> Optional[str]:
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    key = name.lower().strip("_").removesuffix("_cls")
    if key.startswith("prom"):  # SGLang: `from prometheus_client import Gauge as _PromGauge`
        key = key[4:]
    return KINDS.get(key)


def _name_arg(call: ast.Call) -> Optional[ast.expr]:
    for kw in call.keywords:
        if kw.arg == "name":
            return kw.value
    return call.args[0] if call.args else None


def _literal(node: Optional[ast.expr]) -> Optional[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.match(node.value):
        return node.value
    return None


def metrics_in(code: str) -> dict[str, str]:
    found: dict[str, str] = {}
    tree = ast.parse(code)
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope in scopes + [tree]:
        calls = [n for n in ast.walk(scope) if isinstance(n, ast.Call) and _kind(n)]
        direct = {id(_name_arg(c)): _kind(c) for c in calls if _literal(_name_arg(c))}
        indirect = {_kind(c) for c in calls if _name_arg(c) is not None and not _literal(_name_arg(c))}
        one_kind = next(iter(indirect)) if len(indirect) == 1 else None
        for node in ast.walk(scope):
            name = _literal(node) if isinstance(node, ast.Constant) else None
            if not name:
                continue
            kind = direct.get(id(node)) or one_kind
            if kind or name not in found:
                found[name] = kind or found.get(name) or "unknown"
    return {(n + "_total" if k == "counter" and not n.endswith("_total") else n): k for n, k in found.items()}


def sources(path: Path) -> Iterator[tuple[str, str]]:
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.filename.endswith(".py"):
                    yield info.filename, z.read(info).decode("utf-8", errors="replace")
    elif path.is_dir():
        for p in sorted(path.rglob("*.py")):
            yield str(p.relative_to(path.parent)), p.read_text(errors="replace")
    else:
        yield path.name, path.read_text(errors="replace")


def engine_metrics(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for _, code in sources(path):
        if '"vllm:' not in code and '"sglang:' not in code:
            continue
        try:
            for name, kind in metrics_in(code).items():
                if kind != "unknown" or name not in out:
                    out[name] = kind
        except SyntaxError:
            continue
    return dict(sorted(out.items()))


def main() -> int:
    path = Path(sys.argv[1])
    json.dump({"source": path.name, "metrics": engine_metrics(path)}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
