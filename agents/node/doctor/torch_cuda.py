"""The torch line: the import, its time, and CUDA starting."""

from __future__ import annotations

from typing import Any, Optional

from ...contract.needs import Need, fix_line
from ...contract.ops import Check
from .base import FAIL, OK, WARN, Thresholds, _who
from .imports import SLOW_FIX


_TORCH = r"""
import json, sys, time
out = {}
t = time.perf_counter()
try:
    import torch
except BaseException as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
    out["missing"] = isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "torch"
    print(json.dumps(out))
    sys.exit(0)
out["import_s"] = time.perf_counter() - t
out["version"] = str(getattr(torch, "__version__", "?"))
out["cuda_build"] = getattr(getattr(torch, "version", None), "cuda", None)
t = time.perf_counter()
try:
    out["cuda"] = bool(torch.cuda.is_available())
    if out["cuda"]:
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        out["devices"] = torch.cuda.device_count()
        out["device"] = torch.cuda.get_device_name(0)
except BaseException as exc:
    out["cuda"] = False
    out["cuda_error"] = f"{type(exc).__name__}: {exc}"
out["cuda_s"] = time.perf_counter() - t
print(json.dumps(out))
"""

def torch_verdict(python: str, said: Optional[dict[str, Any]], why: str, needed_by: list[str], cuda_by: list[str],
                  th: Thresholds) -> Check:
    """The torch line from what the subprocess said (``said``) or why it said nothing (``why``)."""
    needed = f"needed by {_who(needed_by)}" if needed_by else "no job of this node needs it"
    bad = FAIL if needed_by else OK  # what no job needs is a note, never a warning
    if said is None:
        timed_out = why.startswith("did not finish")
        return Check("torch", bad, f"{python}: import torch {why} ({needed})",
                     SLOW_FIX.format(python=python, module="torch") if timed_out else
                     "set python = \"/path/to/bin/python\" on the job, or gpudeck deploy")
    if "error" in said:
        fix = fix_line(Need("torch", False, "torch"), python) if said.get("missing") else \
            f"{python} -c 'import torch' shows the whole error; reinstall torch there (gpudeck deploy)"
        return Check("torch", bad, f"{python}: import torch failed: {said['error']} ({needed})", fix)
    took, cuda_s = float(said.get("import_s", 0.0)), float(said.get("cuda_s", 0.0))
    head = f"{python}: torch {said.get('version')} imported in {took:.1f} s"
    if said.get("cuda"):
        head += f"; CUDA ready in {cuda_s:.1f} s ({said.get('devices')} GPU(s), {said.get('device')})"
    elif said.get("cuda_error"):
        head += f"; CUDA failed to start: {said['cuda_error']}"
    else:
        build = said.get("cuda_build")
        head += "; CUDA not available" + (f" (torch built for CUDA {build})" if build else " (a CPU build of torch)")
    if not said.get("cuda") and cuda_by:
        cpu = not said.get("cuda_build")
        return Check("torch", FAIL, f"{head}; CUDA needed by {_who(cuda_by)}",
                     f"{python} -m pip install torch from a CUDA index (https://pytorch.org/get-started)" if cpu
                     else "the driver: see the nvml line (nvidia-smi must work)")
    if took > th.import_warn_s or cuda_s > th.import_warn_s:
        which = "import" if took > th.import_warn_s else "CUDA start"
        return Check("torch", WARN if needed_by else OK, f"{head}: the {which} is slow (over {th.import_warn_s:g} s)"
                     + ("" if needed_by else f" ({needed})"),
                     SLOW_FIX.format(python=python, module="torch"))
    if not said.get("cuda") and not cuda_by:
        return Check("torch", WARN if needed_by else OK, f"{head} ({needed})",
                     "nothing to do unless a GPU job will run here")
    return Check("torch", OK, head)


# The first SGLang release whose argument parser has each flag that sizes a hybrid model's state
