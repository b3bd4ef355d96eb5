"""Where the watcher's tick goes: the watcher case of bench/agent_tick.py (8 stand-in GPUs, 16
jobs with restart policies and deadlines writing progress twice a second, 3 notify targets,
the history on) driven in this process at a real pace, no console connected, with the CPU of
each part of ``Agent.snapshot`` (thread time; the parts nest, indented under their caller).
bench/agent_tick.py measures the whole process from outside; this says which part to look at.

    python bench/tick_parts.py [--interval 1] [--ticks 30] [--no-history] [--console] [--profile FILE]

``--console``: as if a console were connected (the snapshot is encoded, and what only a console
reads is filled in). ``--profile FILE``: cProfile of the ticks (without the per-part timers),
for ``python -m pstats FILE``. At 1 Hz a tick costs more than at 20 Hz for the same work: the
caches are cold after a second asleep, and every job's progress.json has changed since.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agent_tick  # noqa: E402 -- the watcher case's jobs and settings, as the process bench has them

from gpudeck.agents.node import agent as agent_module  # noqa: E402
from gpudeck.agents.node.start import node_agent  # noqa: E402
from gpudeck.agents.contract import ops, wire  # noqa: E402


class Parts:
    """Thread CPU per named part, summed over the ticks measured."""

    def __init__(self) -> None:
        self.ns: collections.Counter = collections.Counter()
        self.calls: collections.Counter = collections.Counter()
        self.labels: list[str] = []  # in the order they were wrapped: callers before the parts under them
        self.on = False

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        inner: Callable = getattr(owner, attr)
        self.labels.append(label)

        def timed(*args: Any, **kw: Any) -> Any:
            if not self.on:
                return inner(*args, **kw)
            t = time.thread_time_ns()
            try:
                return inner(*args, **kw)
            finally:
                self.ns[label] += time.thread_time_ns() - t
                self.calls[label] += 1

        setattr(owner, attr, timed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--ticks", type=int, default=30)
    ap.add_argument("--no-history", action="store_true")
    ap.add_argument("--console", action="store_true", help="as if a console read the snapshots")
    ap.add_argument("--profile", metavar="FILE", default=None, help="cProfile the ticks into FILE instead")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="gpudeck-bench-parts-"))
    agent = node_agent(home, "bench", args.interval, nvml=False, simulate_gpus="8xH200:141", detached=True)
    if args.no_history:
        agent.history.path = None
    agent._running = True  # as under run(): the snapshots go to the consoles, of which there are none ...
    link = [object()] if args.console else []
    agent.consoles = types.SimpleNamespace(all=lambda: link)  # ... or one
    send = (lambda msg, to=None: wire.encode(msg)) if args.console else agent.send
    try:
        agent.handle(wire.Request(id=1, op="configure", args={}),
                     ops.op_of(wire.Request(id=1, op="configure",
                                            args={"jobs": agent_tick.watch_jobs(16), "watch": agent_tick.WATCH})))
        for i in range(16):
            agent.jobs.launch(f"job{i}")
        for _ in range(10):  # warm up: imports, first readings, the jobs' first progress
            send(agent.snapshot())
            time.sleep(args.interval)
        parts = Parts()
        w = agent.watch
        for owner, attr, label in [
                (agent.jobs, "refresh", "jobs.refresh"), (agent.jobs, "_cap_logs", "  jobs._cap_logs"),
                (agent.gpu, "sample", "gpu.sample"), (agent, "job_statuses", "job_statuses"),
                (agent_module.ProgressTracker, "poll", "  progress poll"),
                (agent.host, "sample", "host.sample"), (agent_module, "node_alerts", "node_alerts"),
                (w, "on_tick", "watch.on_tick"), (w.restarts, "tick", "  restarts"), (w.checks, "evaluate", "  checks"),
                (w, "_read_health", "  GPU health"), (agent.history, "record", "history.record")]:
            parts.wrap(owner, attr, label)
        if args.profile:
            import cProfile
            prof = cProfile.Profile()
        gc_ns = [0, 0, 0]  # thread CPU in the collector, collections, the start of the one running

        def gc_clock(phase: str, info: dict) -> None:
            if phase == "start":
                gc_ns[2] = time.thread_time_ns()
            elif parts.on or args.profile:
                gc_ns[0] += time.thread_time_ns() - gc_ns[2]
                gc_ns[1] += 1

        gc.callbacks.append(gc_clock)
        ticks = []
        for _ in range(args.ticks):
            parts.on = not args.profile
            t = time.thread_time_ns()
            if args.profile:
                prof.enable()
            send(agent.snapshot())
            if args.profile:
                prof.disable()
            ticks.append(time.thread_time_ns() - t)
            parts.on = False
            time.sleep(args.interval)
        if args.profile:
            prof.dump_stats(args.profile)
    finally:
        for state in home.glob("jobs/*/state.json"):
            try:
                os.killpg(json.loads(state.read_text())["pgid"], 9)
            except (OSError, ValueError, KeyError, TypeError):
                pass
        agent.watch.close()
        agent.history.close()
        shutil.rmtree(home, ignore_errors=True)
    ticks.sort()
    n = len(ticks)
    print(f"{n} ticks at {args.interval:g} s, history {'off' if args.no_history else 'on'}, "
          f"{'a console' if args.console else 'no console'}: snapshot {sum(ticks) / n / 1e6:.3f} ms CPU a tick "
          f"(median {ticks[n // 2] / 1e6:.3f}, {ticks[0] / 1e6:.3f} to {ticks[-1] / 1e6:.3f})"
          + (" with the per-part timers" if not args.profile else f"; cProfile in {args.profile}"))
    print(f"  (the garbage collector: {gc_ns[0] / n / 1e6:.3f} ms a tick in {gc_ns[1] / n:.1f} collections, "
          f"inside the parts above)")
    for label in parts.labels if not args.profile else []:
        print(f"  {label:22s} {parts.ns[label] / n / 1e6:7.3f} ms a tick  ({parts.calls[label] / n:.0f} calls)")


if __name__ == "__main__":
    main()
