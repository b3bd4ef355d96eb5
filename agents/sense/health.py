"""GPU health beyond the tick's readings: XID errors, uncorrected ECC errors, pages waiting to
be retired (or rows to be remapped), and clock slowdowns that are not the normal power cap.

Each NVML read is guarded on its own: a board without the feature (no ECC on a workstation
card, no row remapping before Ampere, events not supported in a container) gives None for
that reading, never an exception, and the others are still read. XID errors come from an
NVML event set polled with a timeout of 0, so a tick never waits on the driver. The slower
readings (ECC, pages, clocks) are taken every ``SLOW_EVERY_S``.

The stand-in GPUs (agents/simgpu.py) have their own reader, fed by a file a test writes;
their readings say ``simulated``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

log = logging.getLogger(__name__)

SLOW_EVERY_S = 5.0
MAX_EVENTS_PER_READ = 64
# clock event reasons worth waking someone for (the software power cap is normal under load)
THROTTLE_REASONS = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}


@dataclass(frozen=True)
class GpuHealth:
    index: int
    xids: list[int] = field(default_factory=list)  # XID errors since the last reading
    ecc_uncorrected: Optional[int] = None  # volatile (since the last driver load) uncorrected ECC errors
    pages_pending: Optional[bool] = None  # a retired page or a row remap waits for a GPU reset
    throttle: list[str] = field(default_factory=list)  # names from THROTTLE_REASONS
    simulated: bool = False


class HealthReader(Protocol):
    """A GPU reader's health readings (GpuReader.health_reader): NVML's, or the stand-in's."""

    def read(self, now: Optional[float] = None) -> list[GpuHealth]:
        ...


class NvmlHealth:
    def __init__(self, nv: Any, handles: list[Any]) -> None:
        self.nv, self.handles = nv, handles
        self._slow_at = 0.0
        self._slow: dict[int, tuple[Optional[int], Optional[bool], list[str]]] = {}
        self._events = self._event_set()

    def _event_set(self) -> Optional[Any]:
        nv = self.nv
        try:
            events = nv.nvmlEventSetCreate()
        except Exception as exc:  # noqa: BLE001 -- no events here: XIDs are not watched, the rest is
            log.info("GPU health: no NVML event set (%s): XID errors are not watched", exc)
            return None
        registered = 0
        for i, h in enumerate(self.handles):
            try:
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, events)
                registered += 1
            except Exception as exc:  # noqa: BLE001
                log.info("GPU %d: XID events not supported (%s)", i, exc)
        return events if registered else None

    def read(self, now: Optional[float] = None) -> list[GpuHealth]:
        now = time.monotonic() if now is None else now
        xids = self._xids()
        if now - self._slow_at >= SLOW_EVERY_S:
            self._slow_at = now
            self._slow = {i: (self._ecc(h), self._pages(h), self._throttle(h)) for i, h in enumerate(self.handles)}
        out = []
        for i in range(len(self.handles)):
            ecc, pages, throttle = self._slow.get(i, (None, None, []))
            out.append(GpuHealth(index=i, xids=xids.get(i, []), ecc_uncorrected=ecc, pages_pending=pages,
                                 throttle=throttle))
        return out

    def _xids(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        if self._events is None:
            return out
        nv = self.nv
        for _ in range(MAX_EVENTS_PER_READ):
            try:
                data = nv.nvmlEventSetWait_v2(self._events, 0)
            except Exception:  # noqa: BLE001 -- NVMLError_Timeout: none waiting (or the set failed)
                break
            try:
                index = nv.nvmlDeviceGetIndex(data.device)
            except Exception:  # noqa: BLE001
                index = -1
            out.setdefault(index, []).append(int(data.eventData))
        return out

    def _ecc(self, h: Any) -> Optional[int]:
        nv = self.nv
        try:
            return int(nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC))
        except Exception:  # noqa: BLE001 -- no ECC on this board, or ECC off
            return None

    def _pages(self, h: Any) -> Optional[bool]:
        nv = self.nv
        pending: Optional[bool] = None
        try:
            pending = nv.nvmlDeviceGetRetiredPagesPendingStatus(h) == nv.NVML_FEATURE_ENABLED
        except Exception:  # noqa: BLE001 -- boards with row remapping (Ampere and later) say not supported
            pass
        try:
            _, _, remap_pending, failed = nv.nvmlDeviceGetRemappedRows(h)
            pending = bool(pending) or bool(remap_pending) or bool(failed)
        except Exception:  # noqa: BLE001 -- before Ampere
            pass
        return pending

    def _throttle(self, h: Any) -> list[str]:
        nv = self.nv
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        try:
            mask = int(fn(h)) if fn is not None else 0
        except Exception:  # noqa: BLE001
            return []
        return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]

    def close(self) -> None:
        if self._events is not None:
            try:
                self.nv.nvmlEventSetFree(self._events)
            except Exception:  # noqa: BLE001
                pass
            self._events = None
