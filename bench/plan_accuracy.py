"""How well ``gpudeck plan generate`` predicts the run it plans.

20,000 prompts against ``gpudeck sim-engine`` made to look like a thinking model on a
batching server: log-normal output lengths (median 300 tokens, sigma 1.1: most answers a few
hundred tokens, about 1% cut at max_tokens=4096) and a decode speed shared by the requests
running (800 tok/s each up to 50,000 tok/s for the server, so throughput grows with
concurrency up to about 62 in flight, then stays). In one process: the plan (a pilot of
200 at 1,32,64,128), then the real run of the rest at the plan's best concurrency through
the generate worker. Prints the projected and the actual wall time and the error, last.

    .venv/bin/python bench/plan_accuracy.py [--prompts 20000] [--pilot 200] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

SIM = ["--tok-s", "800", "--batch-tok-s", "50000", "--latency-ms", "20", "--out-median", "300",
       "--out-sigma", "1.1", "--out-tokens", "1-32768", "--seed", "1"]
WORDS = "alpha beta gamma delta epsilon zeta theta lambda sigma omega river star bread code".split()


def write_prompts(path: str, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            words = " ".join(rng.choice(WORDS) + str(rng.randint(0, 9999)) for _ in range(rng.randint(5, 300)))
            f.write(json.dumps({"id": f"q{i}", "prompt": words}) + "\n")


def start_sim() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "gpudeck.agents.workers.sim_engine", "--port", "0", *SIM],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    line = proc.stdout.readline().decode()
    m = re.search(r"listening on (http://\S+)", line)
    if not m:
        raise SystemExit(f"sim-engine did not start: {line}")
    return proc, m.group(1)


def plan(prompts: str, out: str, url: str, pilot: int) -> dict:
    from gpudeck.agents.workers.plan import generate_plan
    p = argparse.ArgumentParser(conflict_handler="resolve")
    generate_plan.add_arguments(p)
    args = p.parse_args(["--prompts", prompts, "--out", out, "--server", url, "--pilot", str(pilot),
                         "--max-tokens", "4096", "--price-per-hour", "3.5"])
    generate_plan.run(args)
    with open(os.path.join(out, "plan.json")) as f:
        return json.load(f)


def output_figures(out: str) -> tuple[int, int]:
    """(output tokens, shard bytes) of the finished output."""
    import glob
    tokens = size = 0
    for path in glob.glob(os.path.join(out, "shard-*.jsonl")):
        size += os.path.getsize(path)
        with open(path) as f:
            tokens += sum(json.loads(line)["completion_tokens"] for line in f)
    return tokens, size


def full_run(prompts: str, out: str, url: str, concurrency: int) -> tuple[float, int, int]:
    from gpudeck.agents.workers.generate.generator import Generator
    from gpudeck.agents.workers.generate.options import Options
    gen = Generator(Options(prompts=prompts, out=out, servers=[url], concurrency=concurrency, max_tokens=4096))
    gen.prepare()
    before = len(gen.done)
    t0 = time.monotonic()
    rc = asyncio.run(gen.run())
    return time.monotonic() - t0, len(gen.done) - before, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=20000)
    ap.add_argument("--pilot", type=int, default=200)
    ap.add_argument("--keep", help="work in this directory and keep it")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="gpudeck-plan-bench-")
    os.makedirs(work, exist_ok=True)
    prompts, out = os.path.join(work, "prompts.jsonl"), os.path.join(work, "out")
    write_prompts(prompts, a.prompts)
    sim, url = start_sim()
    try:
        p = plan(prompts, out, url, a.pilot)
        wall, made, rc = full_run(prompts, out, url, p["best_concurrency"])
        tokens, size = output_figures(out)
    finally:
        sim.terminate()
        sim.wait(10)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    inside = p["projected_wall_s_low"] <= wall <= p["projected_wall_s_high"]
    err = (p["projected_wall_s"] - wall) / wall
    print(f"\nsim-engine {' '.join(SIM)}")
    print(f"pilot {p['pilot_done']} at {','.join(str(r['concurrency']) for r in p['levels'])}; best concurrency "
          f"{p['best_concurrency']}; {p['remaining']} prompts left; full run: {made} completions, exit {rc}")
    print(f"output tokens: projected {p['projected_output_tokens']:,}, actual {tokens:,} "
          f"({(p['projected_output_tokens'] - tokens) / tokens:+.1%}); shard bytes: projected "
          f"{p['projected_bytes']:,}, actual {size:,} ({(p['projected_bytes'] - size) / size:+.1%})")
    print(f"projected {p['projected_wall_s']:.1f} s (90% interval {p['projected_wall_s_low']:.1f}-"
          f"{p['projected_wall_s_high']:.1f} s, {'actual inside' if inside else 'actual OUTSIDE'}), "
          f"actual {wall:.1f} s, error {err:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
