"""How well ``gpudeck plan generate`` predicts the run it plans, on three kinds of server.

- ``batch``: 20,000 prompts against ``gpudeck sim-engine`` made to look like a thinking model
  on a batching server: log-normal output lengths (median 300 tokens, sigma 1.1: about 1% cut
  at max_tokens=4096) and a decode speed shared by the requests running (800 tok/s each up to
  50,000 tok/s for the server, so throughput grows up to about 62 in flight, then stays); a
  pilot of 200 at 1,32,64,128.
- ``fixed``: 3,000 prompts against a sim-engine whose every answer takes 200 ms
  (``--latency-ms 200``): a pilot of 100 at 8,16, the other 2,900 at 16. Here the client's
  own overhead decides the pace, which a latency model misses.
- ``llama``: 1,800 prompts against llama.cpp's llama-server serving SmolLM2-135M on the CPU
  (tests/tools/llama_server.sh; ``--parallel 8``): a pilot of 120 at 2,8, max_tokens 32, then a
  run many times the pilot's length, as a real one is (about 8 min here at 3/s). A
  pilot of 40 held 8 full for 7 s (15 completions, a 90% interval of about +-11%), and on
  this shared machine it missed the run by 9 to 18%; 120 count 8 on about 80 (+-5%), and the
  plan says so when a pilot is too short for its spread (its ``cautions``).

In one process: the plan, then the real run of the rest at the plan's best concurrency
through the generate worker. Prints the projected and the actual wall time and the error,
last; ``--engine all`` runs the three one after the other.

    .venv/bin/python bench/plan_accuracy.py [--engine batch|fixed|llama|all] [--prompts N] [--pilot N] [--hold S]
        [--keep DIR]
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
from pathlib import Path

WORDS = "alpha beta gamma delta epsilon zeta theta lambda sigma omega river star bread code".split()
QUESTIONS = ["What is the capital of France?", "Name a primary color.", "What is 2 + 2?", "Say hello in Spanish.",
             "What do bees make?", "Name a planet.", "What is water made of?", "Give a synonym for happy."]
ROOT = Path(__file__).resolve().parent.parent
LLAMA = Path(os.environ.get("CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "gpudeck-test") / "llama-server"

ENGINES = {
    "batch": {"sim": ["--tok-s", "800", "--batch-tok-s", "50000", "--latency-ms", "20", "--out-median", "300",
                      "--out-sigma", "1.1", "--out-tokens", "1-32768", "--seed", "1"],
              "prompts": 20000, "pilot": 200, "levels": "1,32,64,128", "max_tokens": 4096},
    "fixed": {"sim": ["--latency-ms", "200"], "prompts": 3000, "pilot": 100, "levels": "8,16", "max_tokens": 4096},
    "llama": {"sim": None, "prompts": 1800, "pilot": 120, "levels": "2,8", "max_tokens": 32},
}


def write_prompts(path: str, n: int, chat: bool = False, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            if chat:
                doc = {"id": f"q{i}", "messages": [{"role": "user",
                                                    "content": f"{QUESTIONS[i % len(QUESTIONS)]} (#{i})"}]}
            else:
                words = " ".join(rng.choice(WORDS) + str(rng.randint(0, 9999)) for _ in range(rng.randint(5, 300)))
                doc = {"id": f"q{i}", "prompt": words}
            f.write(json.dumps(doc) + "\n")


def start_sim(sim_args: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "gpudeck.agents.workers.sim_engine", "--port", "0", *sim_args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    line = proc.stdout.readline().decode()
    m = re.search(r"listening on (http://\S+)", line)
    if not m:
        raise SystemExit(f"sim-engine did not start: {line}")
    return proc, m.group(1)


def start_llama(work: str) -> tuple[subprocess.Popen, str]:
    import socket
    import urllib.request
    if not LLAMA.exists():
        raise SystemExit(f"llama-server is not built ({LLAMA} is missing): tests/tools/llama_server.sh build")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(work, "llama.log"), "wb")
    proc = subprocess.Popen(["bash", str(ROOT / "tests" / "tools" / "llama_server.sh"), "run", str(port)],
                            stdout=log, stderr=log, env={**os.environ, "PY": sys.executable}, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited {proc.returncode}; see {work}/llama.log")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit("llama-server did not come up in 180 s")


def plan(prompts: str, out: str, url: str, pilot: int, levels: str, max_tokens: int, extra: list[str]) -> dict:
    """The plan of ``gpudeck plan generate`` with these options (``extra``: more of them)."""
    from gpudeck.agents.workers.plan import generate_plan
    p = argparse.ArgumentParser(conflict_handler="resolve")
    generate_plan.add_arguments(p)
    args = p.parse_args(["--prompts", prompts, "--out", out, "--server", url, "--pilot", str(pilot),
                         "--concurrency", levels, "--max-tokens", str(max_tokens), "--price-per-hour", "3.5",
                         *extra])
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


def full_run(prompts: str, out: str, url: str, concurrency: int, max_tokens: int,
             model: str | None) -> tuple[float, int, int]:
    from gpudeck.agents.workers.generate.generator import Generator
    from gpudeck.agents.workers.generate.options import Options
    opts = Options(prompts=prompts, out=out, servers=[url], concurrency=concurrency, max_tokens=max_tokens)
    if model:
        opts.model_name = model
    gen = Generator(opts)
    gen.prepare()
    before = len(gen.done)
    t0 = time.monotonic()
    rc = asyncio.run(gen.run())
    return time.monotonic() - t0, len(gen.done) - before, rc


def bench(engine: str, a: argparse.Namespace) -> str:
    e = ENGINES[engine]
    n, pilot = a.prompts or e["prompts"], a.pilot or e["pilot"]
    work = os.path.join(a.keep, engine) if a.keep else tempfile.mkdtemp(prefix=f"gpudeck-plan-bench-{engine}-")
    os.makedirs(work, exist_ok=True)
    prompts, out = os.path.join(work, "prompts.jsonl"), os.path.join(work, "out")
    write_prompts(prompts, n, chat=engine == "llama")
    server, url = start_llama(work) if engine == "llama" else start_sim(e["sim"])
    model = "smollm2" if engine == "llama" else None
    load = [os.getloadavg()[0]]
    try:
        extra = (["--model", model] if model else []) + (["--hold", str(a.hold)] if a.hold is not None else [])
        p = plan(prompts, out, url, pilot, e["levels"], e["max_tokens"], extra)
        load.append(os.getloadavg()[0])
        wall, made, rc = full_run(prompts, out, url, p["best_concurrency"], e["max_tokens"], model)
        load.append(os.getloadavg()[0])
        tokens, size = output_figures(out)
    finally:
        server.terminate()
        server.wait(15)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    inside = p["projected_wall_s_low"] <= wall <= p["projected_wall_s_high"]
    err = (p["projected_wall_s"] - wall) / wall
    levels = ", ".join(f"{r['concurrency']}: {r['completions_per_s']}/s"
                       + (f" over {r['steady_s']:.0f}s held full" if r["steady_s"] else "") for r in p["levels"])
    return "\n".join([
        f"[{engine}] {'llama-server SmolLM2-135M' if engine == 'llama' else 'sim-engine ' + ' '.join(e['sim'])}",
        f"pilot {p['pilot_done']} at {e['levels']} ({levels}); best concurrency {p['best_concurrency']}; "
        f"{p['remaining']} prompts left; full run: {made} completions, exit {rc}, {made / wall:.1f}/s",
        f"output tokens: projected {p['projected_output_tokens']:,}, actual {tokens:,} "
        f"({(p['projected_output_tokens'] - tokens) / tokens:+.1%}); shard bytes: projected "
        f"{p['projected_bytes']:,}, actual {size:,} ({(p['projected_bytes'] - size) / size:+.1%})",
        f"projected {p['projected_wall_s']:.1f} s (90% interval {p['projected_wall_s_low']:.1f}-"
        f"{p['projected_wall_s_high']:.1f} s, {'actual inside' if inside else 'actual OUTSIDE'}), "
        f"actual {wall:.1f} s, error {err:+.1%}",
        *[f"the plan's caution: {c}" for c in p.get("cautions") or []],
        f"load average (1 min) on {os.cpu_count()} cores: {load[0]:.1f} before the pilot, {load[1]:.1f} after it, "
        f"{load[2]:.1f} after the run (other work on the machine moves the pilot and the run apart)"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=[*ENGINES, "all"], default="all")
    ap.add_argument("--prompts", type=int, help="prompts in the dataset (default: the engine's)")
    ap.add_argument("--pilot", type=int, help="prompts in the pilot (default: the engine's)")
    ap.add_argument("--hold", type=float, help="the plan's --hold: seconds each level is held full (default: its own)")
    ap.add_argument("--keep", help="work in this directory and keep it")
    a = ap.parse_args()
    reports = [bench(name, a) for name in (ENGINES if a.engine == "all" else [a.engine])]
    print("\n\n" + "\n\n".join(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
