"""On a GPU machine: the agent sees two jobs holding memory on GPU 0, flags them, kills one
and sees its memory come back. Also a process that no job owns. Exits non-zero on failure.

    PYTHONPATH=. python bench/gpu_kill_verify.py [--gib 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HOLD = """
import sys, time, torch
x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda")
x.fill_(1); torch.cuda.synchronize()
print("holding", sys.argv[1], "GiB", flush=True)
time.sleep(3600)
"""


class Agent:
    def __init__(self, home: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen([sys.executable, "-m", "gpudeck.agents", "--home", str(home), "--node", "gpu",
                                      "--interval", "0.5"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, cwd=ROOT)
        self.ids = 0
        self.hello = self.read(lambda m: m["type"] == "hello")

    def read(self, pred, timeout: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit("agent exited")
            msg = json.loads(line)
            if pred(msg):
                return msg
        raise SystemExit("timed out")

    def req(self, op: str, **args) -> dict:
        self.ids += 1
        rid = self.ids
        self.proc.stdin.write((json.dumps({"type": "request", "id": rid, "op": op, "args": args}) + "\n").encode())
        self.proc.stdin.flush()
        r = self.read(lambda m: m["type"] == "reply" and m["id"] == rid, timeout=300)
        if not r["ok"]:
            raise SystemExit(f"{op} failed: {r['error']}")
        return r["result"]


def show(snap: dict) -> None:
    for g in snap["gpus"]:
        procs = ", ".join(f"pid {p['pid']} {p['used_mib'] / 1024:.1f} GiB -> {p['job'] or 'NO JOB'}"
                          for p in g["processes"])
        print(f"  GPU{g['index']} {g['name']}: {g['mem_used_mib'] / 1024:.1f}/{g['mem_total_mib'] / 1024:.1f} GiB "
              f"util {g['util_pct']}% {g['temp_c']}C {g['power_w']}W [{procs}]")
    for a in snap["alerts"]:
        print(f"  ALERT {a['kind']}: {a['message']}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=8.0)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="gpudeck-gpu-"))
    agent = Agent(home)
    print("hello:", agent.hello)
    hold = [sys.executable, "-c", HOLD, str(args.gib)]
    agent.req("configure", jobs=[{"name": "holder-a", "command": hold, "gpus": [0]},
                                 {"name": "holder-b", "command": hold, "gpus": [0]}])
    stranger = subprocess.Popen(hold[:-1] + [str(args.gib / 2)], env=dict(os.environ, CUDA_VISIBLE_DEVICES="0"))
    a = agent.req("launch", job="holder-a")
    b = agent.req("launch", job="holder-b")
    print("launched:", a, b)

    def holders(m) -> set:
        if m["type"] != "snapshot" or not m["gpus"]:
            return set()
        return {p["job"] for p in m["gpus"][0]["processes"]}

    t0 = time.monotonic()
    snap = agent.read(lambda m: {"holder-a", "holder-b", None} <= holders(m))
    print(f"both jobs and the stranger seen by NVML on GPU 0 after {time.monotonic() - t0:.1f} s:")
    show(snap)
    kinds = {al["kind"] for al in snap["alerts"]}
    ok = "shared_gpu" in kinds and "unowned_gpu_process" in kinds
    print("flags two jobs on one GPU:", "shared_gpu" in kinds, "| flags the stranger:", "unowned_gpu_process" in kinds)
    used_before = snap["gpus"][0]["mem_used_mib"]
    verdict = agent.req("kill", job="holder-a", grace_s=5)
    print("kill verdict:", json.dumps(verdict))
    snap = agent.read(lambda m: m["type"] == "snapshot")
    show(snap)
    used_after = snap["gpus"][0]["mem_used_mib"]
    print(f"GPU 0 memory: {used_before / 1024:.2f} GiB before, {used_after / 1024:.2f} GiB after the kill "
          f"({(used_before - used_after) / 1024:.2f} GiB back); verdict says {verdict['freed_gib']} GiB "
          f"in {verdict['seconds']} s")
    ok = ok and verdict["ok"] and verdict["freed_gib"] > args.gib * 0.9 and "holder-a" not in holders(snap)
    ok = ok and "holder-b" in holders(snap)
    print("kill b:", agent.req("kill", job="holder-b", grace_s=5)["message"])
    stranger.kill()
    stranger.wait()
    agent.proc.stdin.close()
    agent.proc.wait(30)
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
