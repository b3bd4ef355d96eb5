"""What `gpudeck generate` costs as a client, whether it keeps servers busy, and how it
scales to a million prompts. Everything runs here, as real processes over loopback HTTP.

1. Client CPU per 1,000 completions against one zero-latency sim-engine, for gpudeck
   generate (aiohttp, 64 in flight) and for the common baseline: the `openai` client in a
   64-thread pool, as SpecForge's scripts/regenerate_train_data.py does (here with one shared
   client and no busy-wait loop, which makes the baseline cheaper than the original; the
   original's client per request is measured too), and httpx.AsyncClient, the other async
   client, to show why aiohttp was chosen. CPU is
   the client process's own user+sys time from wait4(); each client runs twice (N1 and N2
   prompts) and the difference is divided by N2-N1, so interpreter start-up and imports
   do not count.
2. Saturation: 4 sim-engines with 200 ms +- 100 ms latency, concurrency 64 each; achieved
   completions/s (counted by the engines, in a window after warm-up) over the ideal
   servers x concurrency / mean latency.
3. Resume: a 1,000,000-prompt file with a 1,000,000-id done-set; wall time from the process
   start to the first request at the engine (first start over that state, then the usual
   restart, which has the resume hint of the previous run).
4. Memory: peak RSS of those runs, and of a run over 1,000,000 prompts from scratch.

Prints the CPU ratio last, as `Nx`.   Usage: python bench/generate_client.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"]
                                                 if os.environ.get("PYTHONPATH") else "")}
ENV.pop("GPUDECK_PROGRESS_FILE", None)


# ---------------------------------------------------------------- processes

class Sim:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([PY, "-m", "gpudeck.agents.workers.sim_engine", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV, cwd=ROOT)
        line = self.proc.stdout.readline().decode()
        m = re.search(r"listening on (http://\S+)", line)
        if not m:
            raise SystemExit(f"sim-engine did not start: {line}")
        self.url = m.group(1)

    def requests(self) -> float:
        text = urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode()
        m = re.search(r"^sglang:num_requests_total\{[^}]*\} (\S+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _peak_rss_kib(pid: int) -> int:
    """VmHWM: the peak resident size of the process's own image (reset at exec, unlike
    ru_maxrss, which counts the parent's pages at fork)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measured(argv: list[str], log: Path, until=None) -> dict:
    """Run ``argv``; returns exit code, CPU seconds (user+sys, from wait4), peak RSS (MiB,
    VmHWM polled every 10 ms), wall seconds. ``until(proc, t0)``, if given, is polled and may
    return a dict of extra numbers and stop the process (SIGTERM) by returning
    ``{"stop": True, ...}``."""
    with open(log, "ab") as f:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, stdout=f, stderr=f, env=ENV, cwd=ROOT)
        extra: dict = {}
        peak = 0
        while True:
            _, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if _:
                break
            peak = max(peak, _peak_rss_kib(proc.pid))
            got = until(proc, t0) if until is not None and not extra else None
            if got:
                extra.update(got)
                if got.get("stop"):
                    proc.send_signal(signal.SIGTERM)
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
    return {"rc": proc.returncode, "cpu": ru.ru_utime + ru.ru_stime, "rss_mib": peak / 1024, "wall": wall, **extra}


def gpudeck_argv(prompts: Path, out: Path, urls: list[str], concurrency: int, *extra: str) -> list[str]:
    argv = [PY, "-m", "gpudeck.agents.workers.generate", "--prompts", str(prompts), "--out", str(out),
            "--concurrency", str(concurrency), "--max-tokens", "64"]
    for u in urls:
        argv += ["--server", u]
    return argv + list(extra)


def write_prompts(path: Path, n: int, start: int = 0) -> None:
    with open(path, "a") as f:
        for i in range(start, start + n):
            f.write(json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"Explain item {i} briefly."}]})
                    + "\n")


# ---------------------------------------------------------------- the baseline client

def baseline_main(argv: list[str]) -> int:
    """The baseline: openai client, a pool of threads, results written as they complete."""
    p = argparse.ArgumentParser()
    p.add_argument("prompts")
    p.add_argument("out")
    p.add_argument("url")
    p.add_argument("--threads", type=int, default=64)
    p.add_argument("--client-per-request", action="store_true", help="as SpecForge does")
    p.add_argument("--httpx", action="store_true", help="httpx.AsyncClient with --threads tasks instead")
    a = p.parse_args(argv)
    if a.httpx:
        return _httpx_client(a)
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from openai import OpenAI

    shared = OpenAI(base_url=a.url + "/v1", api_key="None")
    with open(a.prompts) as f:
        data = [json.loads(line) for line in f]

    def call(d: dict) -> dict:
        client = OpenAI(base_url=a.url + "/v1", api_key="None") if a.client_per_request else shared
        resp = client.chat.completions.create(model="default", messages=d["messages"], max_tokens=64,
                                              temperature=0.7, stream=False,
                                              extra_body={"chat_template_kwargs": {"enable_thinking": True}})
        msg = resp.choices[0].message
        return {"id": d["id"], "messages": d["messages"], "answer": msg.content,
                "reasoning": getattr(msg, "reasoning_content", None) or (msg.model_extra or {}).get("reasoning_content"),
                "finish_reason": resp.choices[0].finish_reason, "usage": resp.usage.model_dump()}

    with open(a.out, "w") as out, ThreadPoolExecutor(max_workers=a.threads) as pool:
        for fut in as_completed([pool.submit(call, d) for d in data]):
            out.write(json.dumps(fut.result(), ensure_ascii=False) + "\n")
    return 0


def _httpx_client(a) -> int:
    """The other async candidate: httpx.AsyncClient, ``--threads`` tasks, same records."""
    import asyncio

    import httpx

    async def run() -> None:
        with open(a.prompts) as f:
            data = [json.loads(line) for line in f]
        it = iter(data)
        limits = httpx.Limits(max_connections=a.threads, max_keepalive_connections=a.threads)
        async with httpx.AsyncClient(base_url=a.url, timeout=600, limits=limits) as client:
            with open(a.out, "w") as out:
                async def worker() -> None:
                    for d in it:
                        r = await client.post("/v1/chat/completions", json={
                            "model": "default", "messages": d["messages"], "max_tokens": 64, "temperature": 0.7,
                            "chat_template_kwargs": {"enable_thinking": True}})
                        doc = r.json()
                        msg = doc["choices"][0]["message"]
                        out.write(json.dumps({"id": d["id"], "messages": d["messages"], "answer": msg["content"],
                                              "reasoning": msg.get("reasoning_content"),
                                              "finish_reason": doc["choices"][0]["finish_reason"],
                                              "usage": doc["usage"]}, ensure_ascii=False) + "\n")
                await asyncio.gather(*(worker() for _ in range(a.threads)))
    asyncio.run(run())
    return 0


# ---------------------------------------------------------------- the measurements

def client_cpu(work: Path, n1: int, n2: int) -> tuple[float, float, float, float]:
    """CPU ms per completion: gpudeck, baseline (shared client), baseline (client per request),
    httpx.AsyncClient."""
    sim = Sim()
    try:
        files = {}
        for n in (n1, n2):
            files[n] = work / f"cpu-{n}.jsonl"
            write_prompts(files[n], n)
        log = work / "cpu.log"

        def per_request(make, sizes=(n1, n2), reps=2) -> float:
            n1_, n2_ = sizes
            cpu = {}
            for n in sizes:
                if n not in files:
                    files[n] = work / f"cpu-{n}.jsonl"
                    write_prompts(files[n], n)
                best = None
                for rep in range(reps):  # the lower of the runs: the machine is shared
                    r = measured(make(n, rep), log)
                    if r["rc"] != 0:
                        raise SystemExit(f"client run failed ({r}); see {log}")
                    best = r["cpu"] if best is None else min(best, r["cpu"])
                cpu[n] = best
            return (cpu[n2_] - cpu[n1_]) / (n2_ - n1_) * 1000

        ours = per_request(lambda n, rep: gpudeck_argv(files[n], work / f"cpu-out-{n}-{rep}", [sim.url], 64, "--thinking"))
        base = per_request(lambda n, rep: [PY, __file__, "--baseline", str(files[n]), str(work / f"base-{n}-{rep}.jsonl"),
                                           sim.url, "--threads", "64"])
        # about 15x dearer per request: smaller runs, once each
        spec = per_request(lambda n, rep: [PY, __file__, "--baseline", str(files[n]), str(work / f"spec-{n}-{rep}.jsonl"),
                                           sim.url, "--threads", "64", "--client-per-request"],
                           sizes=(max(100, n1 // 5), max(500, n2 // 5)), reps=1)
        hx = per_request(lambda n, rep: [PY, __file__, "--baseline", str(files[n]), str(work / f"httpx-{n}-{rep}.jsonl"),
                                         sim.url, "--threads", "64", "--httpx"],
                         sizes=(max(100, n1 // 5), max(500, n2 // 5)), reps=1)
        return ours, base, spec, hx
    finally:
        sim.stop()


def saturation(work: Path, n_prompts: int, warmup_s: float, window_s: float) -> tuple[float, float]:
    sims = [Sim("--latency-ms", "200", "--jitter-ms", "100") for _ in range(4)]
    try:
        prompts = work / "sat.jsonl"
        write_prompts(prompts, n_prompts)
        ideal = 4 * 64 / 0.200
        marks = {}

        def until(proc, t0):
            t = time.monotonic() - t0
            if "start" not in marks and t >= warmup_s:
                marks["start"] = (time.monotonic(), sum(s.requests() for s in sims))
            if "start" in marks and time.monotonic() - marks["start"][0] >= window_s:
                t1, n1 = time.monotonic(), sum(s.requests() for s in sims)
                rate = (n1 - marks["start"][1]) / (t1 - marks["start"][0])
                return {"stop": True, "rate": rate}
            return None
        r = measured(gpudeck_argv(prompts, work / "sat-out", [s.url for s in sims], 64), work / "sat.log", until)
        if "rate" not in r:
            raise SystemExit(f"the saturation run ended before its window ({r}); see {work / 'sat.log'}")
        return r["rate"], r["rate"] / ideal
    finally:
        for s in sims:
            s.stop()


def resume_and_memory(work: Path, n: int) -> dict:
    sim = Sim("--latency-ms", "50")
    try:
        prompts = work / "million.jsonl"
        t = time.monotonic()
        write_prompts(prompts, n + 5000)
        out = work / "million-out"
        out.mkdir()
        with open(out / "done.txt", "w") as f:  # a previous run did the first n
            for i in range(0, n, 10000):  # in pieces: this process stays small (children are forked from it)
                f.write("".join(f"p{j}\n" for j in range(i, min(n, i + 10000))))
        print(f"  ({n + 5000:,} prompts and a {n:,}-id done-set written in {time.monotonic() - t:.1f} s)", flush=True)
        results = {}

        def first_request(base):
            def until(proc, t0):
                if sim.requests() > base:
                    return {"first_request_s": time.monotonic() - t0, "stop": True}
                return None
            return until
        log = work / "million.log"
        # the first start over this state: no resume hint yet, every line is looked at; stopped
        # (SIGTERM) once it sends, as an operator's kill would
        results["cold"] = measured(gpudeck_argv(prompts, out, [sim.url], 64), log, first_request(sim.requests()))
        # the usual restart, with the resume hint the last run left
        results["done_ids"] = sum(1 for _ in open(out / "done.txt"))
        results["warm"] = measured(gpudeck_argv(prompts, out, [sim.url], 64), log, first_request(sim.requests()))
        results["warm_internal"] = _resume_line(log)
        # from scratch over 1,000,000 prompts: generate for a while, then SIGTERM
        fresh = work / "fresh-out"

        def after(proc, t0):
            return {"stop": True} if time.monotonic() - t0 > 20 else None
        results["fresh"] = measured(gpudeck_argv(prompts, fresh, [sim.url], 64), work / "fresh.log", after)
        try:
            results["fresh_done"] = json.loads((fresh / "progress.json").read_text())["done"]
        except (OSError, ValueError, KeyError):
            results["fresh_done"] = None
        return results
    finally:
        sim.stop()


def _resume_line(log: Path) -> float | None:
    """What the worker itself reports for reading its state (done-set, recovery, hint)."""
    found = re.findall(r"done-set and recovery took ([0-9.]+) s", log.read_text())
    return float(found[-1]) if found else None


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--baseline":
        return baseline_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke test, not the numbers)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpudeck-bench-"))
    n1, n2 = (300, 1200) if a.quick else (1000, 5000)
    million = 100_000 if a.quick else 1_000_000
    print(f"gpudeck generate client benchmark ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}); work dir {work}")

    print("\n1. client CPU per 1,000 completions (one sim-engine, zero latency, 64 in flight)", flush=True)
    ours, base, spec, hx = client_cpu(work, n1, n2)
    print(f"  gpudeck generate (aiohttp, 64 tasks):       {ours * 1000:7.0f} ms  ({ours:.3f} ms per completion)")
    print(f"  baseline: openai client, 64 threads:        {base * 1000:7.0f} ms  ({base:.3f} ms per completion)")
    print(f"  SpecForge's way (a new client per request): {spec * 1000:7.0f} ms  ({spec:.3f} ms per completion)")
    print(f"  httpx.AsyncClient, 64 tasks (not chosen):   {hx * 1000:7.0f} ms  ({hx:.3f} ms per completion)")
    print(f"  goal <= 1/3 of the baseline: {'met' if ours <= base / 3 else 'NOT met'}")

    print("\n2. saturation: 4 sim-engines, 200 ms +- 100 ms, concurrency 64 each (ideal 1,280 completions/s)",
          flush=True)
    rate, sat = saturation(work, 60_000 if not a.quick else 20_000, warmup_s=6.0, window_s=20.0 if not a.quick else 8.0)
    print(f"  achieved {rate:,.0f} completions/s; saturation {sat:.3f}  (goal >= 0.95: {'met' if sat >= 0.95 else 'NOT met'})")

    print(f"\n3./4. resume and memory with {million:,} prompts", flush=True)
    r = resume_and_memory(work, million)
    cold, warm, fresh = r["cold"], r["warm"], r["fresh"]
    print(f"  first start over a {million:,}-id done-set (no resume hint, every line read): first request "
          f"after {cold.get('first_request_s', float('nan')):.2f} s; peak RSS {cold['rss_mib']:.0f} MiB")
    print(f"  resume with a {r['done_ids']:,}-id done-set (the usual restart): first request after "
          f"{warm.get('first_request_s', float('nan')):.2f} s from the process start (goal <= 1 s: "
          f"{'met' if warm.get('first_request_s', 99) <= 1.0 else 'NOT met'}); of which reading the done-set, "
          f"recovery and the hint: {r['warm_internal']:.2f} s; peak RSS {warm['rss_mib']:.0f} MiB")
    print(f"  from scratch over {million:,} prompts for 20 s ({r['fresh_done']} done): peak RSS "
          f"{fresh['rss_mib']:.0f} MiB")
    peak = max(cold["rss_mib"], warm["rss_mib"], fresh["rss_mib"])
    print(f"  peak RSS {peak:.0f} MiB (goal <= 200 MB: {'met' if peak * 2**20 <= 200e6 else 'NOT met'})")
    if not a.keep:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nclient CPU, baseline / gpudeck generate:\n{base / ours:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
