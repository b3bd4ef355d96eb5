"""Simulated GPUs: a stand-in for NVML, for the demo and the tests, never for a real node.

It is used only when the agent is started with ``--simulate-gpus SPEC`` (the fleet file's
``simulate_gpus`` for a node); nothing picks it up by itself, and every snapshot of such a
node says ``simulated``. Its readings come from what the processes on the node really do:

- a process "holds" memory on a simulated GPU by writing a claim file, ``claim(...)`` below,
  in ``<home>/simgpu/``; the GPU shows that memory, and that pid in its process list, for as
  long as the process lives (its start time is checked, so a reused pid never inherits it);
- when the process dies, by itself or by a kill, its memory is free at the next reading.

So a kill that verifies against the GPUs works the same on simulated GPUs as on NVML.

SPEC is ``COUNTxNAME:GIB`` (``4xRTX PRO 6000:96``), several joined with ``+``.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from .sense.gpu import ProcInfo
from .contract.wire import Gpu, GpuProcess

if TYPE_CHECKING:
    from .sense.health import GpuHealth

MIB = 1024 * 1024
_SPEC = re.compile(r"\s*(\d+)\s*x\s*([^:+]+?)\s*:\s*(\d+(?:\.\d+)?)\s*$")


@dataclass(frozen=True)
class Claim:
    pid: int
    gpu: int
    mib: float
    util_pct: float
    start_time: float
    start_ticks: Optional[int] = None  # the exact start (clock ticks since boot): a reused pid never matches


def parse_spec(spec: str) -> list[tuple[str, float]]:
    """``4xRTX PRO 6000:96+2xH200:141`` -> [(name, total MiB), ...] one per GPU."""
    out: list[tuple[str, float]] = []
    for part in spec.split("+"):
        m = _SPEC.match(part)
        if not m:
            raise ValueError(f"simulated GPUs {part!r}: expected COUNTxNAME:GIB, e.g. 4xRTX PRO 6000:96")
        out += [(m.group(2), float(m.group(3)) * 1024)] * int(m.group(1))
    if not out or len(out) > 64:
        raise ValueError(f"simulated GPUs {spec!r}: expected 1 to 64 GPUs")
    return out


def claims_dir(home: Path) -> Path:
    return Path(home) / "simgpu"


def claim(home: Path, gpu: int, mib: float, util_pct: float = 0.0, pid: Optional[int] = None) -> Path:
    """Hold ``mib`` of simulated GPU ``gpu`` for as long as process ``pid`` (this one) lives."""
    import psutil

    pid = pid or os.getpid()
    d = claims_dir(home)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{pid}-{gpu}.json"
    tmp = path.with_suffix(".tmp")
    from .jobs.killing import start_ticks

    tmp.write_text(json.dumps({"pid": pid, "gpu": gpu, "mib": mib, "util_pct": util_pct,
                               "start_time": psutil.Process(pid).create_time(), "start_ticks": start_ticks(pid)}))
    os.replace(tmp, path)
    return path


class SimGpuSampler:
    """The GpuSampler interface over claim files."""

    simulated = True

    def __init__(self, home: Path, spec: str) -> None:
        self.dir = claims_dir(home)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._gpus = parse_spec(spec)
        self._uuids = [f"GPU-sim-{i:04d}" for i in range(len(self._gpus))]  # asked for by every job each tick
        self.error: Optional[str] = None
        self._claims: list[Claim] = []
        self._read_at = 0.0
        self.procs = ProcInfo()
        self._unclaimed: Optional[list[Gpu]] = None  # the readings with no claim, made once

    @property
    def uuids(self) -> list[str]:
        return self._uuids

    @property
    def totals(self) -> list[tuple[str, float]]:
        """(name, total MiB) of each GPU, as GpuSampler.totals."""
        return [(f"{name} (simulated)", mib) for name, mib in self._gpus]

    def _live_claims(self, max_age_s: float = 0.05) -> list[Claim]:
        """Claims of live processes; files of dead ones are removed. Read at most every 50 ms."""
        now = time.monotonic()
        if now - self._read_at < max_age_s:
            return self._claims
        out = []
        try:
            names = os.listdir(self.dir)  # (a tenth of Path.glob's cost, read every tick)
        except FileNotFoundError:
            names = []
        from .jobs.killing import start_ticks

        for name in names:
            if not name.endswith(".json") or name == HEALTH_FILE:  # the health readings are not a claim
                continue
            path = self.dir / name
            import psutil
            try:
                c = Claim(**json.loads(path.read_text()))
                # the start in ticks is exact; one in seconds moves with the boot time the kernel
                # derives from a wall clock NTP adjusts (a claim of a live process read as dead)
                same = start_ticks(c.pid) == c.start_ticks if c.start_ticks is not None else \
                    abs(psutil.Process(c.pid).create_time() - c.start_time) < 0.05
                alive = same and psutil.Process(c.pid).status() != psutil.STATUS_ZOMBIE
            except (OSError, ValueError, TypeError, psutil.Error):
                alive = False
            if alive:
                out.append(c)
            else:
                path.unlink(missing_ok=True)
        self._claims, self._read_at = out, now
        return out

    def sample(self, owner_of: Optional[Callable[[int], Optional[str]]] = None) -> list[Gpu]:
        claims = self._live_claims()
        if not claims and self._unclaimed is not None:  # nothing holds them: the same readings as last time
            self.procs.forget_unseen()
            return list(self._unclaimed)
        out = []
        for index, (name, total) in enumerate(self._gpus):
            mine = [c for c in claims if c.gpu == index]
            used = min(total, 420.0 + sum(c.mib for c in mine))  # the driver's own few hundred MiB
            util = min(100.0, sum(c.util_pct for c in mine))
            procs = []
            for c in mine:
                cpu, command, started = self.procs.read(c.pid)
                procs.append(GpuProcess(c.pid, c.mib, owner_of(c.pid) if owner_of else None, cpu_pct=cpu,
                                        command=command, started_at=started))
            out.append(Gpu(index=index, uuid=self.uuids[index], name=f"{name} (simulated)", mem_used_mib=used,
                           mem_total_mib=total, util_pct=util, temp_c=round(32 + util * 0.45, 1),
                           power_w=round(60 + util * 5.4, 1), processes=procs))
        self.procs.forget_unseen()
        self._unclaimed = out if not claims else None
        return out

    def processes(self, index: int) -> list[tuple[int, float]]:
        return [(c.pid, c.mib) for c in self._live_claims(max_age_s=0.0) if c.gpu == index]

    def memory_used_mib(self, index: int) -> float:
        return 420.0 + sum(c.mib for c in self._live_claims(max_age_s=0.0) if c.gpu == index)

    def health_reader(self) -> "SimHealth":
        return SimHealth(self.dir / HEALTH_FILE, len(self._gpus))


# ---------------------------------------------------------------- simulated GPU health

HEALTH_FILE = "health.json"


def set_health(home: Path, gpu: int, *, xid: Optional[list[int]] = None, ecc_uncorrected: Optional[int] = None,
               pages_pending: Optional[bool] = None, throttle: Optional[list[str]] = None) -> None:
    """SIMULATED: make stand-in GPU ``gpu`` report these health readings (tests, the demo).
    ``xid`` lists every XID error raised so far on it: each new one is reported once."""
    path = claims_dir(home) / HEALTH_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        doc = {}
    entry = doc.setdefault(str(gpu), {})
    for key, value in (("xid", xid), ("ecc_uncorrected", ecc_uncorrected), ("pages_pending", pages_pending),
                       ("throttle", throttle)):
        if value is not None:
            entry[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


class SimHealth:
    """SIMULATED health readings from ``<home>/simgpu/health.json``: ``{"0": {"xid": [79],
    "ecc_uncorrected": 2, "pages_pending": true, "throttle": ["hw_thermal"]}}``. Read only when
    the file changed; every reading says ``simulated``."""

    def __init__(self, path: Path, count: int) -> None:
        self.path, self.count = path, count
        self._stamp: Optional[tuple[int, int]] = None
        self._doc: dict[str, Any] = {}  # the file's JSON
        self._xids_seen: dict[int, int] = {}
        self._steady: Optional[list[GpuHealth]] = None  # the last readings, while they hold no new XID error

    def read(self, now: Optional[float] = None) -> list[GpuHealth]:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp != self._stamp:
            self._stamp, self._steady = stamp, None
            try:
                self._doc = json.loads(self.path.read_text()) if stamp else {}
            except (OSError, ValueError):
                self._doc = {}
        elif self._steady is not None:  # the file as read, and its XID errors reported: as last time
            return list(self._steady)
        from .sense.health import GpuHealth

        out = []
        for i in range(self.count):
            e = self._doc.get(str(i)) or {}
            xids = [int(x) for x in e.get("xid") or []]
            new, self._xids_seen[i] = xids[self._xids_seen.get(i, 0):], len(xids)
            out.append(GpuHealth(index=i, xids=new, ecc_uncorrected=e.get("ecc_uncorrected", 0),
                                 pages_pending=e.get("pages_pending", False), throttle=list(e.get("throttle") or []),
                                 simulated=True))
        self._steady = out if not any(h.xids for h in out) else None
        return out


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m gpudeck.agents.simgpu HOME GPU MIB [UTIL] -- CMD...``: claim, then exec CMD
    (the claim follows the pid through exec), for jobs of the demo and the tests."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args or len(args[:args.index("--")]) < 3:
        print("usage: python -m gpudeck.agents.simgpu HOME GPU MIB [UTIL_PCT] -- CMD...", file=sys.stderr)
        return 2
    head, cmd = args[:args.index("--")], args[args.index("--") + 1:]
    claim(Path(head[0]), int(head[1]), float(head[2]), float(head[3]) if len(head) > 3 else 0.0)
    if not cmd:
        return 0
    os.execvp(cmd[0], cmd)
    return 127


if __name__ == "__main__":
    raise SystemExit(main())
