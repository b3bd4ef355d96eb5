"""GPU sampling through NVML: a few microseconds per GPU per tick, no subprocess."""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import psutil

from ..contract.wire import Gpu, GpuProcess
from .health import NvmlHealth

log = logging.getLogger(__name__)

MIB = 1024 * 1024


class GpuSampler:
    """Reads every GPU once per call. With no NVML it reports no GPUs and says why."""

    simulated = False

    def __init__(self, enabled: bool = True) -> None:
        self.error: Optional[str] = None
        self._nvml = None
        self._handles: list[Any] = []  # NVML's device handles
        self._static: list[tuple[str, str, float]] = []  # uuid, name, total MiB
        self.procs = ProcInfo()
        if not enabled:
            self.error = "NVML polling is switched off for this node"
            return
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            self.error = "nvidia-ml-py is not installed"
            return
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            for i in range(count):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                self._handles.append(h)
                mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                self._static.append((_str(pynvml.nvmlDeviceGetUUID(h)),
                                     _str(pynvml.nvmlDeviceGetName(h)), mem.total / MIB))
        except pynvml.NVMLError as exc:
            self.error = f"NVML unavailable: {exc}"
            self._handles = []
            self._static = []
            return
        self._nvml = pynvml
        if not self._handles:
            self.error = "NVML found no GPUs"

    @property
    def uuids(self) -> list[str]:
        return [s[0] for s in self._static]

    @property
    def totals(self) -> list[tuple[str, float]]:
        """(name, total MiB) of each GPU, read once at the start: safe from any thread."""
        return [(s[1], s[2]) for s in self._static]

    def sample(self, owner_of: Optional[Callable[[int], Optional[str]]] = None) -> list[Gpu]:
        """One reading of every GPU. ``owner_of(pid)`` names the job owning a pid, or None."""
        nv = self._nvml
        if nv is None:
            return []
        out = []
        for index, h in enumerate(self._handles):
            uuid, name, total = self._static[index]
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                used = mem.used / MIB
            except nv.NVMLError as exc:
                log.warning("GPU %d: memory read failed: %s", index, exc)
                used = float("nan")
            util = _try(lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu))
            temp = _try(lambda: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)))
            power = _try(lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
            procs = []
            for p in self.processes(index):
                pid, used_mib = p
                cpu, command, started = self.procs.read(pid)
                procs.append(GpuProcess(pid=pid, used_mib=used_mib, job=owner_of(pid) if owner_of else None,
                                        cpu_pct=cpu, command=command, started_at=started))
            out.append(Gpu(index=index, uuid=uuid, name=name, mem_used_mib=used, mem_total_mib=total,
                           util_pct=util, temp_c=temp, power_w=power, processes=procs))
        self.procs.forget_unseen()
        return out

    def processes(self, index: int) -> list[tuple[int, float]]:
        """(pid, MiB) of every compute process on GPU ``index``."""
        nv = self._nvml
        if nv is None or index >= len(self._handles):
            return []
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(self._handles[index])
        except nv.NVMLError as exc:
            log.warning("GPU %d: process list failed: %s", index, exc)
            return []
        return [(p.pid, (p.usedGpuMemory or 0) / MIB) for p in procs]

    def memory_used_mib(self, index: int) -> float:
        nv = self._nvml
        if nv is None or index >= len(self._handles):
            return 0.0
        return float(nv.nvmlDeviceGetMemoryInfo(self._handles[index]).used) / MIB

    def health_reader(self) -> Optional[NvmlHealth]:
        """XID, ECC, page and clock health through NVML (agents/sense/health.py); None without GPUs."""
        return NvmlHealth(self._nvml, list(self._handles)) if self._nvml is not None and self._handles else None


COMMAND_CHARS = 200


class ProcInfo:
    """CPU%, command line and start of GPU processes, cheaply: one psutil.Process kept per pid
    (its CPU% is measured between two readings), its command line and start read once."""

    def __init__(self) -> None:
        self._procs: dict[int, tuple[psutil.Process, Optional[str], Optional[float]]] = {}
        self._seen: set[int] = set()

    def read(self, pid: int) -> tuple[Optional[float], Optional[str], Optional[float]]:
        """(CPU%, command line, start as unix time) of ``pid``."""
        self._seen.add(pid)
        known = self._procs.get(pid)
        try:
            if known is None:
                proc = psutil.Process(pid)
                try:
                    command: Optional[str] = " ".join(proc.cmdline())[:COMMAND_CHARS] or proc.name()
                except psutil.AccessDenied:
                    command = None
                known = self._procs[pid] = (proc, command, proc.create_time())
                proc.cpu_percent(None)  # the first reading only starts the measure
                return None, command, known[2]
            return round(known[0].cpu_percent(None), 1), known[1], known[2]
        except psutil.Error:  # gone, or not ours to read (another container's pid)
            self._procs.pop(pid, None)
            return None, known[1] if known else None, known[2] if known else None

    def forget_unseen(self) -> None:
        """Drop the pids not read since the last call: a reading holds no dead process."""
        for pid in [p for p in self._procs if p not in self._seen]:
            del self._procs[pid]
        self._seen.clear()


def _str(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _try(fn: Callable[[], Optional[float]]) -> Optional[float]:
    try:
        return fn()
    except Exception:  # a field this GPU does not support (power on some boards): leave it empty
        return None
