"""On a GPU machine: the health readings the watcher alerts on (XID events, volatile
uncorrected ECC errors, pages waiting for retirement or rows for remapping, clock slowdowns),
read through NVML as the agent reads them, with the time each reading takes.

    python bench/gpu_health.py        (gpudeck installed, or on PYTHONPATH)
"""

from __future__ import annotations

import time

from gpudeck.agents.sense.gpu import GpuSampler


def main() -> int:
    gpu = GpuSampler(enabled=True)
    if gpu.error:
        print("no NVML:", gpu.error)
        return 1
    t0 = time.perf_counter()
    reader = gpu.health_reader()
    print(f"health reader over {len(gpu.uuids)} GPU(s) set up in {1000 * (time.perf_counter() - t0):.1f} ms;"
          f" XID events {'registered' if reader._events is not None else 'NOT available'}")
    for i in range(3):
        t0 = time.perf_counter()
        readings = reader.read(now=time.time() + i * 10)  # each a slow reading too (ECC, pages, clocks)
        ms = 1000 * (time.perf_counter() - t0)
        for h in readings:
            print(f"read {i}: GPU{h.index}: xids={h.xids} ecc_uncorrected={h.ecc_uncorrected} "
                  f"pages_pending={h.pages_pending} throttle={h.throttle}  ({ms:.2f} ms for all GPUs)")
    reader.close()
    print("RESULT: PASS (every reading taken without an exception)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
