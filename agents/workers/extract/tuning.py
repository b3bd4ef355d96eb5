"""Pinned autotuning for the hybrid's kernel package (flash-linear-attention): the Triton
config that each of its autotuned kernels chose on a GPU, recorded once and shipped with
gpudeck, so that a fresh node of that GPU compiles one config per kernel instead of
compiling and timing every candidate (dozens per kernel: most of a cold start's minutes).

A table is JSON::

    {"format": 1, "gpu": "NVIDIA H200", "triton": "3.6.0", "fla": "0.6.0",
     "kernels": {"fla.ops.common.chunk_h.chunk_gated_delta_rule_fwd_kernel_h_blockdim64":
                 [{"kwargs": {"BV": 32}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": null}]}}

``kernels`` maps a kernel (its function's module and name) to the configs its autotuner chose
(one per tuning key it met). Applying a table narrows each kernel's candidate list to the
candidates it names; a kernel left with one candidate is not timed at all (Triton runs a
lone config as is), and with a few, only those are timed. A candidate is kept only when the
installed kernel has it, so a table from another version of the package narrows nothing it
does not know: it can cost speed, never correctness.

Where a table comes from: ``tuned/<gpu>.json`` beside this module (``<gpu>`` is the device
name with every run of other characters made one ``_``: ``NVIDIA_H200``), or the file named
by ``GPUDECK_KERNEL_TUNING`` (``off``: none). A worker whose compile cache was cold and that
applied no table writes what its kernels chose into its cache directory
(``kernel-tuning.json``) once its first shard is durable: the file to ship for that GPU.

flash-linear-attention has its own config files (``FLA_CACHE_MODE``), but it reads them only
for kernels declared after its autotune decorator was swapped in, which has to happen before
the package is first imported; narrowing the candidates after the import works for every
kernel whatever imported it first.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger("gpudeck.extract")

FORMAT = 1
PACKAGE = "fla"  # the kernel package whose autotuners are pinned
TABLES = Path(__file__).with_name("tuned")
ENV = "GPUDECK_KERNEL_TUNING"
RECORD_NAME = "kernel-tuning.json"


def gpu_slug(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_") or "unknown"


def config_dict(config: Any) -> dict[str, Any]:
    """A Triton config as JSON (its meta-parameters and launch settings; never its hooks)."""
    return {"kwargs": {k: config.kwargs[k] for k in sorted(config.kwargs)}, "num_warps": config.num_warps,
            "num_stages": config.num_stages, "num_ctas": getattr(config, "num_ctas", 1),
            "maxnreg": getattr(config, "maxnreg", None)}


def _same(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def kernel_name(tuner: Any) -> str:
    fn = getattr(tuner, "base_fn", None) or tuner.fn
    while not hasattr(fn, "__qualname__") and hasattr(fn, "fn"):
        fn = fn.fn
    return f"{fn.__module__}.{fn.__qualname__}"


def autotuners(package: Optional[str] = None) -> dict[str, Any]:
    """The autotuned kernels of ``package`` (the kernel package) that are imported now, by name
    (nothing when Triton is not installed)."""
    package = package or PACKAGE
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return {}
    found: dict[str, Any] = {}
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == package or mod_name.startswith(package + ".")):
            continue
        for value in list(vars(mod).values()):
            for _ in range(4):  # an autotuner under triton.heuristics (the usual order) is that wrapper's fn
                if isinstance(value, Autotuner):
                    found.setdefault(kernel_name(value), value)
                    break
                value = getattr(value, "fn", None)
                if value is None:
                    break
    return found


def chosen(tuners: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """What each autotuner chose so far: its distinct best configs, in the order met."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in sorted(tuners):
        picks: list[dict[str, Any]] = []
        for config in list(getattr(tuners[name], "cache", {}).values()):
            d = config_dict(config)
            if all(_same(d) != _same(p) for p in picks):
                picks.append(d)
        if picks:
            out[name] = picks
    return out


def apply(table: dict[str, Any], tuners: dict[str, Any]) -> tuple[int, int]:
    """Narrow each kernel's candidates to those the table names. (kernels narrowed, kernels
    with more than one candidate)."""
    wanted = table.get("kernels") or {}
    narrowed = tunable = 0
    for name, tuner in tuners.items():
        if len(tuner.configs) <= 1:
            continue
        tunable += 1
        names = {_same(w) for w in wanted.get(name) or () if isinstance(w, dict)}
        keep = [c for c in tuner.configs if _same(config_dict(c)) in names]
        if keep:
            tuner.configs = keep
            narrowed += 1
    return narrowed, tunable


def versions() -> dict[str, Optional[str]]:
    from importlib import metadata
    out: dict[str, Optional[str]] = {}
    for key, dist in (("triton", "triton"), ("fla", "fla-core")):
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[key] = None
    return out


def load_table(gpu: str, environ: Optional[dict] = None) -> tuple[Optional[dict[str, Any]], str]:
    """(the table for this GPU or None, where it came from or why there is none)."""
    env = os.environ if environ is None else environ
    choice = env.get(ENV, "").strip()
    if choice.lower() == "off":
        return None, f"{ENV}=off"
    path = Path(choice) if choice else TABLES / f"{gpu_slug(gpu)}.json"
    try:
        table = json.loads(path.read_text())
    except FileNotFoundError:
        return None, f"no table for {gpu} ({path})"
    except (OSError, ValueError) as exc:
        log.warning("kernel tuning: cannot read %s (%s); the kernels autotune", path, exc)
        return None, f"unreadable {path}"
    if not isinstance(table, dict) or table.get("format") != FORMAT or not isinstance(table.get("kernels"), dict):
        log.warning("kernel tuning: %s is not a format-%d table; the kernels autotune", path, FORMAT)
        return None, f"not a table: {path}"
    return table, str(path)


_pinned: dict[str, Any] = {}  # the process's kernels are the process's own: what pin() did to them


def pin(gpu: str) -> bool:
    """Narrow the imported kernels' candidates to this GPU's table; True when a table was applied."""
    tuners = autotuners()
    if not tuners:
        return False
    table, where = load_table(gpu)
    _pinned.update(gpu=gpu, applied=table is not None)
    if table is None:
        log.info("kernel tuning: %s; %d kernels autotune", where, len(tuners))
        return False
    narrowed, tunable = apply(table, tuners)
    mine = versions()
    differs = [f"{k} {table.get(k)} there, {v} here" for k, v in mine.items() if table.get(k) != v]
    log.info("kernel tuning: %s narrowed %d of %d autotuned kernels%s", where, narrowed, tunable,
             f" ({'; '.join(differs)})" if differs else "")
    return narrowed > 0


def record(path: str, gpu: str, package: Optional[str] = None) -> int:
    """Write what the imported kernels chose (a table for this GPU) to ``path``; the number of
    kernels in it (0: nothing written)."""
    from ...contract.atomic import atomic_write_bytes
    picks = chosen(autotuners(package))
    if not picks:
        return 0
    table = {"format": FORMAT, "gpu": gpu, **versions(), "kernels": picks}
    atomic_write_bytes(Path(path), (json.dumps(table, indent=1, sort_keys=True) + "\n").encode())
    log.info("kernel tuning: what %d kernels chose is in %s", len(picks), path)
    return len(picks)


def state() -> dict[str, Any]:
    """What pin() did in this process (gpu, applied, recorded) and how many kernels autotune."""
    return {**_pinned, "kernels": len(autotuners())}


def record_learned(cache_root: str) -> int:
    """Once the first shard is durable: when this process autotuned its kernels (pin() found
    no table), what they chose goes to ``<cache_root>/kernel-tuning.json``. 0 when nothing
    was written."""
    if not _pinned or _pinned.get("applied") or _pinned.get("recorded"):
        return 0
    _pinned["recorded"] = True
    try:
        return record(os.path.join(cache_root, RECORD_NAME), _pinned["gpu"])
    except (OSError, RuntimeError) as exc:  # a full home, or a kernel still tuning: no table, no harm
        log.warning("kernel tuning: not recorded (%s)", exc)
        return 0
