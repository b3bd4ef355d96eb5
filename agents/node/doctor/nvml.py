"""The nvml line: the driver and the GPUs as NVML sees them."""

from __future__ import annotations

import os
from typing import Any, Optional

from ...contract.ops import Check
from .base import FAIL, OK, WARN, _who


def probe_nvml() -> tuple[Optional[dict[str, Any]], str, str]:
    """(what NVML says, or None; why not; the fix)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed for the agent's python", "gpudeck deploy (a base dependency)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        text = str(exc)
        module = os.path.exists("/proc/driver/nvidia/version")
        if "Library Not Found" in text or "not found" in text.lower():
            why = "libnvidia-ml.so not found: no NVIDIA driver here" + (
                " (yet the kernel module is loaded: its user-space library is missing)" if module else "")
            return None, why, "install the NVIDIA driver (the distribution's nvidia-driver-NNN, or the CUDA " \
                              "repository's cuda-drivers) and reboot; nvidia-smi must work"
        if "Driver Not Loaded" in text:
            return None, "the NVIDIA kernel module is not loaded", "sudo modprobe nvidia, or reboot after the " \
                                                                   "driver's install"
        if "Mismatch" in text:
            return None, f"NVML: {text} (the library was upgraded, the kernel module was not)", "reboot"
        return None, f"NVML: {text}", "nvidia-smi says more; reinstall the driver if it fails too"
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        except pynvml.NVMLError:
            cuda = None
        count = pynvml.nvmlDeviceGetCount()
        totals = []
        for i in range(count):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            totals.append((name.decode() if isinstance(name, bytes) else str(name),
                           pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**20))
    except pynvml.NVMLError as exc:
        return None, f"NVML started but cannot read the GPUs: {exc}", "nvidia-smi says more"
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return {"driver": driver.decode() if isinstance(driver, bytes) else str(driver),
            "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None, "totals": totals}, "", ""


def nvml_verdict(found: Optional[dict[str, Any]], why: str, fix: str, needed_by: list[str], simulated: bool = False,
                 polling_off: bool = False) -> Check:
    if simulated:
        return Check("nvml", WARN, "the GPUs are simulated (--simulate-gpus): NVML and the driver are not used",
                     "nothing to do in a demo; a real node runs without --simulate-gpus")
    if found is None:
        needed = f"needed by {_who(needed_by)}" if needed_by else "no job of this node needs a GPU"
        return Check("nvml", FAIL if needed_by else OK, f"{why} ({needed})", fix)  # a note where no job needs it
    totals = found["totals"]
    if not totals:
        return Check("nvml", FAIL if needed_by else WARN, f"driver {found['driver']}: NVML sees no GPU",
                     "nvidia-smi -L; a GPU lost from the bus needs a reboot (dmesg shows Xid 79)")
    kinds = sorted({name for name, _ in totals})
    detail = (f"driver {found['driver']}" + (f" (CUDA {found['cuda']})" if found.get("cuda") else "")
              + f", {len(totals)} GPU(s): {', '.join(kinds)}")
    if polling_off:
        return Check("nvml", WARN, detail + "; but the agent does not poll them (nvml = false for this node)",
                     "set nvml = true on the node (or leave it off on purpose: no GPU figures in the console)")
    return Check("nvml", OK, detail)

