"""The history database after a simulated week: 8 stand-in GPUs and 16 jobs, every second for
7 days, written by the real code (agents/history/db.py) at a fast clock, with figures that
change every sample (the worst case for the size). Prints the size of each tier and of the
file, the CPU per sample, and the 90-day bound.

    python bench/history_size.py [--days 7] [--gpus 8] [--jobs 16] [--step 1]

``--step``: seconds between samples (1 is what an agent at its default interval writes; a
larger step is quicker, and its minute and hour rows are as large, only the hour of raw
samples is smaller).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from gpudeck.agents.history.db import HistoryDB  # noqa: E402
from test_historydb import T0, Clock, rows_bound, worst_snap  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--step", type=float, default=1.0)
    args = ap.parse_args()
    rng = random.Random(1)
    d = Path(tempfile.mkdtemp(prefix="gpudeck-history-size-"))
    try:
        clock = Clock()
        db = HistoryDB(d / "history.db", clock=clock)
        base = worst_snap(T0, rng)  # snapshot objects reused with fresh figures: the cost measured is the database's
        pool = [worst_snap(T0, rng) for _ in range(64)]
        import dataclasses
        n = int(args.days * 86400 / args.step)
        cpu = 0.0
        wal_most = 0
        for k in range(n):
            clock.t = T0 + k * args.step
            s = dataclasses.replace(pool[k % 64], t=clock.t, gpus=pool[k % 64].gpus[:args.gpus],
                                    jobs=pool[k % 64].jobs[:args.jobs])
            c0 = time.process_time()
            db.record(s)
            cpu += time.process_time() - c0
            if k % 10000 == 0:
                wal = d / "history.db-wal"
                wal_most = max(wal_most, wal.stat().st_size if wal.exists() else 0)
                print(f"\r{k / n:6.1%}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        counts = db.counts()
        live = sum(p.stat().st_size for p in d.glob("history.db*"))
        c = sqlite3.connect(d / "history.db")
        rows = {t: c.execute(f"SELECT count(*), avg(length(d)) FROM {t}").fetchone() for t in ("s1", "m1", "h1")}
        c.close()
        db.close()
        closed = (d / "history.db").stat().st_size
        del base
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"{args.days:g} days simulated: {args.gpus} GPUs, {args.jobs} jobs, a sample every {args.step:g} s, "
          f"every figure changing (the largest rows)")
    for (name, table) in (("1s", "s1"), ("1m", "m1"), ("1h", "h1")):
        count, avg = rows[table]
        print(f"  tier {name}: {count} rows, {avg or 0:.0f} bytes of JSON a row")
    print(f"CPU per sample in HistoryDB.record: {cpu / n * 1e3:.3f} ms (roll-ups and pruning included)")
    print(f"largest WAL seen: {wal_most / 2**20:.1f} MiB")
    print(f"history.db with its WAL while the agent runs: {live / 2**20:.1f} MiB")
    bound = rows_bound(args.gpus, args.jobs, 3600, 10080, 2160) + 4 * 2**20
    print(f"the bound at 90 days ({args.gpus} GPUs, {args.jobs} jobs; tests/unit/test_historydb.py): "
          f"{bound / 2**20:.0f} MiB")
    print(f"history.db after {args.days:g} days (closed, WAL checkpointed): {closed / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
