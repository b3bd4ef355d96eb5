"""The pilot's error against llama-server, repeated: on one llama-server (SmolLM2-135M on the
CPU, as bench/plan_accuracy.py starts it), REPS times a pilot of PILOT prompts at LEVELS, then
the run of what is left at the top level (RUN at least: with HOLD, each level held full HOLD
seconds, the pilot may take up to half of the 2 x RUN others); for each, the rate the plan
counts at the top level (stats.project_steady) and four other estimators on the same records,
against the run's own
rate, and the projected wall time against the run's. The records go to ``--keep`` as JSON.
For each part (pilot, run) it also prints what the server had of the CPU: its own CPU time
over the wall time (a share of one core; it runs one thread), the machine's steal time (the
host's other guests), and its CPU per completion: when the completions cost the server the
same CPU in the pilot and the run, a rate that differs is the CPU the server was given.

    .venv/bin/python bench/plan_pilot_repeat.py [--reps 4] [--pilot 120] [--run 480] [--levels 2,8] [--hold 20]

Used for bench/results/plan_accuracy/README.md ("A pilot of 120 on llama-server").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plan_accuracy as pa  # noqa: E402 -- its llama-server, prompts and run

from gpudeck.agents.workers.plan import generate_plan, stats  # noqa: E402
from gpudeck.agents.workers.plan.pilot import PilotGenerator  # noqa: E402


def pilot(prompts: str, out: str, url: str, n: int, levels: list[int], hold: float) -> dict:
    p = argparse.ArgumentParser(conflict_handler="resolve")
    generate_plan.add_arguments(p)
    args = p.parse_args(["--prompts", prompts, "--out", out, "--server", url, "--pilot", str(n), "--concurrency",
                         ",".join(map(str, levels)), "--max-tokens", "32", "--model-name", "smollm2"])
    opts = generate_plan.options_from_args(argparse.Namespace(**{**vars(args), "concurrency": max(levels)}))
    gen = PilotGenerator(opts, levels)
    gen.prepare()
    generate_plan.choose_prompts(gen, n, levels, hold)
    asyncio.run(gen.run())
    return {"completions": [c.__dict__ for c in gen.result.completions], "timeline": gen.result.timeline,
            "levels": levels}


def meter(pid: int) -> tuple[float, float, float]:
    """(wall, the server's CPU seconds, the machine's steal seconds) now."""
    import psutil
    t = psutil.Process(pid).cpu_times()
    with open("/proc/stat") as f:
        steal = int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")
    return time.monotonic(), t.user + t.system, steal


def cpu_part(name: str, a: tuple, b: tuple, completions: int) -> str:
    wall, cpu, steal = (y - x for x, y in zip(a, b))
    return (f"{name}: server {cpu / wall:.0%} of a core, steal {steal / wall:.1%}, "
            f"{cpu / max(completions, 1) * 1e3:.0f} ms CPU a completion")


def report(r: dict) -> str:
    lv = r["levels"]
    obs = [stats.Obs(c["start"], c["end"], c["tokens"]) for c in r["completions"]]
    tl, tokens = stats.Timeline(r["timeline"]), [c["tokens"] for c in r["completions"]]
    w, fit = stats.steady_windows(tl, lv, obs)[-1], stats.fit(obs, tl, lv)
    actual = r["run_made"] / r["run_wall"]
    if w is None:
        return f"run {actual:.3f}/s; the top level was never held full"
    n = stats.mean(tokens) or 0.0
    share = sum(max(0.0, min(o.end, w.end) - max(o.start, w.start)) / o.latency_s for o in obs if o.latency_s > 0)
    toks = sum(o.tokens * max(0.0, min(o.end, w.end) - max(o.start, w.start)) / o.latency_s
               for o in obs if o.latency_s > 0)
    est = {"plan's": w.completions_per_s(1, n), "no length correction": w.completions_per_s(1),
           "shares of the window": share / w.seconds,
           "ends counted": sum(1 for o in obs if w.start < o.end <= w.end) / w.seconds,
           "tokens over mean length": toks / w.seconds / n}
    proj = stats.project_steady(fit, w, tokens, lv[-1], 1, r["run_made"])
    return (f"run {actual:.3f}/s; window {w.seconds:.1f} s, {len(w.obs)} completions; "
            + ", ".join(f"{k} {v:.3f} ({v / actual - 1:+.1%})" for k, v in est.items())
            + f"; wall projected {proj.wall_s:.1f} s (90% {proj.low_s:.1f}-{proj.high_s:.1f}), "
              f"actual {r['run_wall']:.1f} s: {proj.wall_s / r['run_wall'] - 1:+.1%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--pilot", type=int, default=120)
    ap.add_argument("--run", type=int, default=480)
    ap.add_argument("--levels", default="2,8")
    ap.add_argument("--hold", type=float, default=generate_plan.HOLD_S,
                    help=f"seconds each level is held full (default {generate_plan.HOLD_S:g}; 0: PILOT prompts only)")
    ap.add_argument("--keep", help="write the records here (JSON)")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    work = tempfile.mkdtemp(prefix="gpudeck-pilot-repeat-")
    server, url = pa.start_llama(work)
    records, lines = [], []
    try:
        for i in range(a.reps):
            d = os.path.join(work, f"r{i}")
            os.makedirs(d)
            prompts, out = os.path.join(d, "prompts.jsonl"), os.path.join(d, "out")
            # with a hold, the pilot may take up to half of the others: RUN are left at least
            pa.write_prompts(prompts, a.pilot + (2 if a.hold > 0 else 1) * a.run, chat=True, seed=i)
            m0 = meter(server.pid)
            r = pilot(prompts, out, url, a.pilot, levels, a.hold)
            m1 = meter(server.pid)
            r["run_wall"], r["run_made"], _ = pa.full_run(prompts, out, url, max(levels), 32, "smollm2")
            m2 = meter(server.pid)
            records.append(r)
            lines.append(f"pair {i}: {report(r)}\n  {cpu_part('pilot', m0, m1, len(r['completions']))}; "
                         f"{cpu_part('run', m1, m2, r['run_made'])}")
            print(lines[-1], flush=True)
    finally:
        server.terminate()
        server.wait(15)
    if a.keep:
        with open(a.keep, "w") as f:
            json.dump(records, f)
    print("\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
