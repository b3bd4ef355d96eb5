"""Host sampling through psutil."""

from __future__ import annotations

import dataclasses
import os
import socket
from typing import Optional

import psutil

from ..contract.wire import Disk, Host


class HostSampler:
    def __init__(self) -> None:
        self.hostname = socket.gethostname()
        self.cpu_count = psutil.cpu_count() or 1
        psutil.cpu_percent(None)  # prime: the first call has nothing to compare with
        self._last: Optional[Host] = None

    def sample(self, paths: list[str], figures: bool = True) -> Host:
        """The host now. ``figures`` False (a snapshot no console reads: the watcher's checks
        read only the disks) keeps the last CPU, memory and load figures instead of reading
        them again, most of the cost; the next reading's CPU use is then since the last one."""
        if not figures and self._last is not None:
            return dataclasses.replace(self._last, disks=disk_usage(paths))
        vm = psutil.virtual_memory()
        load = os.getloadavg()
        self._last = Host(hostname=self.hostname, cpu_pct=psutil.cpu_percent(None), cpu_count=self.cpu_count,
                          mem_used_bytes=vm.total - vm.available, mem_total_bytes=vm.total,
                          load1=load[0], load5=load[1], load15=load[2], disks=disk_usage(paths))
        return self._last


def disk_usage(paths: list[str]) -> list[Disk]:
    """Free space of the file systems holding ``paths``, one entry per file system."""
    seen: set[int] = set()
    out = []
    for path in paths:
        probe = path
        while True:  # an output dir not created yet: its parent
            try:
                dev = os.stat(probe).st_dev
                break
            except (OSError, ValueError):  # (a path with a null byte: as os.path.exists, not there)
                if not probe or probe == "/":
                    dev = None
                    break
                probe = os.path.dirname(probe.rstrip("/")) or "/"
        if dev is None or dev in seen:
            continue
        seen.add(dev)
        try:
            du = psutil.disk_usage(probe)
        except OSError:
            continue
        out.append(Disk(path=path, free_bytes=du.free, total_bytes=du.total))
    return out
