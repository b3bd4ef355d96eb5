"""A real engine driven end to end through gpudeck's own CLI and agent, as an operator would:
a fleet file with a ``llama-server`` job (llama.cpp's server) and a ``generate`` job against it,
on this machine as a local node. On the lent H200 (bench/device_engine.sh) the server is the CUDA
build; here it is the CPU build of `make test` (a rehearsal at small sizes).

1. ``gpudeck doctor``: the engine's program and model, NVML.
2. ``gpudeck watch start`` (the node's agent, whose snapshots ``status --json`` reads), then
   ``gpudeck launch llama``: the time to ready (its /health), and the GPU memory it holds, read
   from NVML by the agent (``--min-gib``: the KV cache, context x slots, is sized so that the
   engine holds at least that much).
3. A probe of ``2 x slots`` requests straight to the server sizes the dataset so that the rest
   of the run after the pilot takes about ``--run-s`` seconds (it only picks the file's length).
4. ``gpudeck plan generate`` with a pilot at ``--levels``: the plan's best concurrency and its
   projection of the rest of the run, with its 90% interval.
5. The fleet file's ``generate`` job set to that concurrency, ``gpudeck launch gen``: the rest
   of the run; meanwhile ``status --json`` every 2 s: the engine's tokens/s, requests running,
   KV use (from its /metrics and /slots), the GPU's use and memory (NVML), the job's progress.
6. ``gpudeck kill llama --json``: the verdict, with the GiB freed, against the GPU memory the
   agent read before the kill.
7. ``gpudeck relaunch llama``: ready again; then killed again (a second verdict).

Prints each step as it goes, and last: the engine's tokens/s at the best concurrency with the
GPU's use, the kill verdict with the GiB freed, and the plan's error against the actual rest.
``--json FILE`` keeps every figure.

    python bench/engine_e2e.py --binary PATH --model GGUF [--slots 64] [--context 16384] [--gpu-layers all]
        [--gpus 0] [--no-nvml] [--min-gib 20] [--pilot 200] [--levels 8,32,64] [--hold 20] [--max-tokens 512]
        [--run-s 150] [--work DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

TOPICS = ["a lighthouse keeper", "a lost robot", "the first snow", "a river town", "a chess club", "an old map",
          "a night train", "a beekeeper", "a comet", "a bakery at dawn", "a mountain pass", "a library cat"]
ASKS = ["Write a short story about {}.", "Describe {} in a few paragraphs.", "Write a poem about {}.",
        "Explain, step by step, how to draw {}.", "List ten facts about {}.", "Answer in one sentence: who is {}?"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def gpudeck(fleet: Optional[Path], *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "gpudeck.console", *args, *(("-f", str(fleet)) if fleet else ())],
                       capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise SystemExit(f"gpudeck {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def status(fleet: Path) -> dict:
    return json.loads(gpudeck(fleet, "status", "--json").stdout)


def job_of(snap: dict, name: str) -> dict:
    return next(j for j in snap["jobs"] if j["name"] == name)


def wait(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def write_prompts(path: Path, n: int, start: int = 0, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(start, start + n):
            text = rng.choice(ASKS).format(rng.choice(TOPICS)) + f" (#{i})"
            f.write(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": text}]}) + "\n")


def fleet_text(a: argparse.Namespace, home: Path, prompts: Path, out: Path, concurrency: int) -> str:
    gpus = f"gpus = [{a.gpus}]\n" if a.gpus is not None else ""
    gl = f'gpu_layers = "{a.gpu_layers}"\n' if not str(a.gpu_layers).isdigit() else f"gpu_layers = {a.gpu_layers}\n"
    extra = json.dumps(a.llama_args.split()) if a.llama_args else "[]"
    return f'''
[defaults]
nvml = {"false" if a.no_nvml else "true"}
interval = 0.5

[[nodes]]
name = "gpu"
local = true
home = "{home}"

[[jobs]]
name = "llama"
node = "gpu"
kind = "llama-server"
binary = "{a.binary}"
model = "{a.model}"
port = {a.port}
slots = {a.slots}
context = {a.context}
{gl}{gpus}args = {extra}

[[jobs]]
name = "gen"
node = "gpu"
kind = "generate"
prompts = "{prompts}"
out = "{out}"
servers = ["llama"]
concurrency = {concurrency}
max_tokens = {a.max_tokens}
'''


def engine_gpu(snap: dict, job: str) -> tuple[Optional[float], Optional[float], Optional[float]]:
    """(the job's GPU memory in GiB as NVML lists its processes, the GPU's memory used in GiB, its use %)."""
    node = next(n for n in snap["nodes"] if n["name"] == "gpu")
    gpus = node.get("gpus") or []
    if not gpus:
        return None, None, None
    g = gpus[0]
    mine = sum(p["used_mib"] or 0 for p in g["processes"] if p.get("job") == job) / 1024
    return mine, (g["mem_used_mib"] or 0) / 1024, g["util_pct"]


async def probe(url: str, n: int, concurrency: int, max_tokens: int) -> float:
    """Completions a second at ``concurrency`` over ``n`` requests (sizes the dataset only)."""
    import httpx
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=600) as client:
        async def one(i: int) -> None:
            async with sem:
                r = await client.post(url + "/v1/chat/completions", json={
                    "max_tokens": max_tokens, "messages": [{"role": "user", "content": ASKS[i % len(ASKS)].format(
                        TOPICS[i % len(TOPICS)]) + f" (probe {i})"}]})
                r.raise_for_status()
        t0 = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(n)))
        return n / (time.monotonic() - t0)


def done_ids(out: Path) -> set[str]:
    try:
        return {ln.strip() for ln in open(out / "done.txt") if ln.strip()}
    except FileNotFoundError:
        return set()


def output_tokens(out: Path, skip: set[str]) -> int:
    """The completion tokens of the output's records whose id is not in ``skip``: the pilot's
    last shard is still open when the plan ends, and the run closes it with the pilot's records
    in it, so a count by shard would give the run the pilot's tokens too."""
    tokens = 0
    for shard in out.glob("shard-*.jsonl*"):
        with open(shard) as f:
            for line in f:
                if line.strip():
                    rec = json.loads(line)
                    if str(rec.get("id")) not in skip:
                        tokens += rec.get("completion_tokens") or 0
    return tokens


def kill(fleet: Path, job: str, res: dict, key: str) -> dict:
    before = engine_gpu(status(fleet), job)
    r = gpudeck(fleet, "kill", job, "--json", check=False)
    verdict = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {"message": r.stdout + r.stderr}
    after = engine_gpu(status(fleet), job)
    res[key] = {"exit": r.returncode, "verdict": verdict, "job_gib_before": before[0], "gpu_used_gib_before": before[1],
                "gpu_used_gib_after": after[1]}
    log(f"kill {job}: exit {r.returncode}: {verdict.get('message')} (ok {verdict.get('ok')}); NVML before: the job "
        f"{before[0]} GiB, the GPU {before[1]} GiB used; after: the GPU {after[1]} GiB used")
    return res[key]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--port", type=int, default=18123)
    p.add_argument("--slots", type=int, default=64)
    p.add_argument("--context", type=int, default=16384)
    p.add_argument("--gpu-layers", default="all")
    p.add_argument("--gpus", type=int, default=None, help="the GPU index the engine job lists (gpus = [N])")
    p.add_argument("--llama-args", default="", help="more llama-server arguments (the job's args)")
    p.add_argument("--no-nvml", action="store_true")
    p.add_argument("--min-gib", type=float, default=0.0, help="fail unless the engine holds this much GPU memory")
    p.add_argument("--pilot", type=int, default=200)
    p.add_argument("--levels", default="8,32,64")
    p.add_argument("--hold", type=float, default=20.0)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--run-s", type=float, default=150.0, help="about how long the rest of the run should take")
    p.add_argument("--prompts", type=int, default=None, help="the dataset's length (default: sized by a probe)")
    p.add_argument("--work", default=None)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still writes what was measured

    work = Path(a.work or f"/tmp/gpudeck-engine-e2e-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    (work / "home").mkdir(parents=True)
    fleet, prompts, out = work / "fleet.toml", work / "prompts.jsonl", work / "out"
    url = f"http://127.0.0.1:{a.port}"
    levels = [int(x) for x in a.levels.split(",")]
    res: dict[str, Any] = {"args": vars(a)}
    fleet.write_text(fleet_text(a, work / "home", prompts, out, max(levels)))
    write_prompts(prompts, 10)  # doctor reads the fleet file; the dataset is written after the probe

    r = gpudeck(fleet, "doctor", "--json", check=False)
    checks = [c for n in json.loads(r.stdout)["nodes"] for c in n["checks"]]
    res["doctor"] = {c["name"]: [c["verdict"], c["detail"]] for c in checks}
    for name in ("engine", "nvml"):
        log(f"doctor {name}: {res['doctor'].get(name)}")

    gpudeck(fleet, "watch", "start")
    try:
        t0 = time.monotonic()
        log(gpudeck(fleet, "launch", "llama").stdout.strip())
        eng = wait(lambda: (e := job_of(status(fleet), "llama").get("engine") or {}).get("state") == "ready" and e,
                   600, "the engine ready")
        res["load_s"] = time.monotonic() - t0
        snap = status(fleet)
        mine, used, _ = engine_gpu(snap, "llama")
        res["engine_gib"], res["gpu_used_gib_ready"] = mine, used
        log(f"ready in {res['load_s']:.1f} s (its /health 200, seen in the agent's snapshot): {eng}; NVML: the engine "
            f"holds {mine} GiB, the GPU {used} GiB used")
        if a.min_gib and (mine or 0) < a.min_gib:
            raise SystemExit(f"the engine holds {mine} GiB, under --min-gib {a.min_gib}: raise --context or --slots")

        if a.prompts is None:
            rate = asyncio.run(probe(url, 2 * a.slots, a.slots, a.max_tokens))
            n = int(rate * (a.run_s + a.hold * (len(levels) + 1))) + a.pilot
            log(f"probe: {rate:.1f} completions/s at {a.slots} in flight -> a dataset of {n} prompts")
            res["probe_per_s"] = rate
        else:
            n = a.prompts
        write_prompts(prompts, n)
        res["prompts"] = n

        t0 = time.monotonic()
        r = gpudeck(None, "plan", "generate", "--prompts", str(prompts), "--out", str(out), "--server", url,
                    "--pilot", str(a.pilot), "--concurrency", a.levels, "--hold", str(a.hold), "--max-tokens",
                    str(a.max_tokens), check=False, timeout=1200)
        print(r.stdout[-4000:], r.stderr[-2000:], flush=True)
        plan = json.loads((out / "plan.json").read_text())
        res["plan"] = plan
        res["plan_s"] = time.monotonic() - t0
        best = plan["best_concurrency"]
        log(f"plan (exit {r.returncode}) in {res['plan_s']:.0f} s: best concurrency {best}; {plan['remaining']} "
            f"prompts left; projected {plan['projected_wall_s']:.1f} s ({plan['projected_wall_s_low']:.1f}-"
            f"{plan['projected_wall_s_high']:.1f} s)")

        pilot_ids = done_ids(out)  # the pilot's records: the run's own are the others
        fleet.write_text(fleet_text(a, work / "home", prompts, out, best))  # the operator's edit
        launched = time.time()
        log(gpudeck(fleet, "launch", "gen").stdout.strip())
        samples = []
        while True:
            snap = status(fleet)
            gen, llama = job_of(snap, "gen"), job_of(snap, "llama")
            mine, used, util = engine_gpu(snap, "llama")
            e = llama.get("engine") or {}
            samples.append({"t": time.time() - launched, "tokens_per_s": e.get("tokens_per_s"),
                            "running": e.get("running"), "queued": e.get("queued"), "kv_usage": e.get("kv_usage"),
                            "gpu_util_pct": util, "gpu_used_gib": used, "done": gen.get("done"),
                            "gen_state": gen["state"]})
            if len(samples) % 10 == 1:
                log(f"run: {samples[-1]}")
            if gen["state"] not in ("pending", "starting", "running"):
                break
            time.sleep(2)
        ended = gen.get("ended_at") or time.time()
        wall = ended - launched
        done_lines = sum(1 for _ in open(out / "done.txt")) if (out / "done.txt").exists() else 0
        tokens = output_tokens(out, skip=pilot_ids)
        steady = [s for s in samples if 0.1 * wall <= s["t"] <= 0.9 * wall]
        mean = lambda key: statistics.mean(v) if (v := [s[key] for s in steady if s[key] is not None]) else None  # noqa: E731
        res["run"] = {"state": gen["state"], "exit_code": gen.get("exit_code"), "wall_s": wall, "done": done_lines,
                      "made": done_lines - plan["pilot_done"], "output_tokens": tokens, "samples": samples,
                      "engine_tokens_per_s_mean": mean("tokens_per_s"), "gpu_util_pct_mean": mean("gpu_util_pct"),
                      "running_mean": mean("running"), "kv_usage_mean": mean("kv_usage")}
        full = [x["t"] for x in samples if (x["running"] or 0) >= best - 1]  # the engine's own gauge
        res["run"].update(full_after_s=round(full[0], 1) if full else None,
                          drain_s=round(wall - full[-1], 1) if full else None)
        proj = plan["projected_wall_s"]
        res["plan_error"] = (proj - wall) / wall
        res["inside_interval"] = plan["projected_wall_s_low"] <= wall <= plan["projected_wall_s_high"]
        log(f"run: {gen['state']} (exit {gen.get('exit_code')}) in {wall:.1f} s, {res['run']['made']} completions")

        kill(fleet, "llama", res, "kill")
        t0 = time.monotonic()
        log(gpudeck(fleet, "relaunch", "llama").stdout.strip())
        wait(lambda: (j := job_of(status(fleet), "llama"))["attempt"] == 2 and (j.get("engine") or {}).get("state")
             == "ready", 600, "the relaunched engine ready")
        res["relaunch_ready_s"] = time.monotonic() - t0
        res["relaunch_engine_gib"] = engine_gpu(status(fleet), "llama")[0]
        log(f"relaunched, ready in {res['relaunch_ready_s']:.1f} s; it holds {res['relaunch_engine_gib']} GiB")
        kill(fleet, "llama", res, "kill_after_relaunch")
    finally:
        gpudeck(fleet, "kill", "llama", check=False)
        gpudeck(fleet, "watch", "stop", check=False)
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1, default=str))

    run, k, plan = res["run"], res["kill"], res["plan"]
    print()
    print(f"engine: llama-server, {a.slots} slots x {a.context} tokens; ready in {res['load_s']:.1f} s holding "
          f"{res['engine_gib']} GiB (NVML)")
    print(f"tokens/s at the plan's best concurrency {plan['best_concurrency']}: the engine's own counter "
          f"{run['engine_tokens_per_s_mean']}, the run's own output {run['output_tokens'] / max(wall, 1e-9):.0f} "
          f"({run['output_tokens']} tokens in {wall:.1f} s); GPU use {run['gpu_util_pct_mean']}% (NVML, mean of the middle 80%)")
    print(f"kill: {k['verdict'].get('message')} (ok {k['verdict'].get('ok')}, freed {k['verdict'].get('freed_gib')} GiB; "
          f"NVML before {k['job_gib_before']} GiB held by the engine)")
    print(f"plan: projected {plan['projected_wall_s']:.1f} s (90% interval {plan['projected_wall_s_low']:.1f}-"
          f"{plan['projected_wall_s_high']:.1f} s; of it {plan.get('projected_start_s')} s of start and "
          f"{plan.get('projected_tail_s')} s of drain, measured on the pilot: {plan.get('tail_measured')}), "
          f"actual {wall:.1f} s: error {res['plan_error']:+.1%}, actual "
          f"{'inside' if res['inside_interval'] else 'OUTSIDE'} the interval")
    print(f"the run's edges, from the engine's gauge every ~3 s: full ({best} running) after "
          f"{run['full_after_s']} s, below it again for the last {run['drain_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
