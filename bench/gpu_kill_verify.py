"""On a GPU machine: the agent sees two jobs holding memory on GPU 0, flags them, kills one
and sees its memory come back. A process that no job owns is flagged, then killed by pid. A job
whose child escapes with a double fork and setsid (the kill that used to say ok while 6 GiB
stayed held) is killed whole and verified. Exits non-zero on failure.

    python bench/gpu_kill_verify.py [--gib 8]      (gpudeck installed, or on PYTHONPATH)
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
        env = dict(os.environ)
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


def escape_case(agent: Agent, gib: float) -> bool:
    """The issue's case: a child that leaves the group and the tree (double fork + setsid)
    holds 6 GiB while the job's own process holds 4; the kill must free both."""
    py = sys.executable
    script = (f"( setsid {py} -c '{HOLD.strip()}' {gib * 0.75} & ) ; exec {py} -c '{HOLD.strip()}' {gib / 2}")
    agent.req("configure", jobs=[{"name": "escaper", "command": ["sh", "-c", script], "gpus": [0]}])
    agent.req("launch", job="escaper")

    def both(m) -> bool:
        if m["type"] != "snapshot" or not m["gpus"]:
            return False
        held = sorted(p["used_mib"] for p in m["gpus"][0]["processes"])
        return len(held) == 2 and held[0] >= gib / 2 * 1024 * 0.9 and held[1] >= gib * 0.75 * 1024 * 0.9
    snap = agent.read(both)
    print(f"escape case ({snap['containment']} containment): the job and its escaped child on GPU 0:")
    show(snap)
    used_before = snap["gpus"][0]["mem_used_mib"]
    verdict = agent.req("kill", job="escaper", grace_s=5)
    print("escape kill verdict:", json.dumps(verdict))
    snap = agent.read(lambda m: m["type"] == "snapshot")
    used_after = snap["gpus"][0]["mem_used_mib"]
    print(f"GPU 0 memory: {used_before / 1024:.2f} GiB before, {used_after / 1024:.2f} GiB after "
          f"({(used_before - used_after) / 1024:.2f} GiB back)")
    ok = verdict["ok"] and verdict["freed_gib"] > gib * 1.25 * 0.9 and not snap["gpus"][0]["processes"]
    print("escape case:", "PASS" if ok else "FAIL")
    return ok


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

    def holding(m) -> bool:  # every holder listed AND its memory taken: NVML lists a pid at 0 GiB first
        if not {"holder-a", "holder-b", None} <= holders(m):
            return False
        return all(p["used_mib"] >= (args.gib / 2 if p["job"] is None else args.gib) * 1024 * 0.9
                   for p in m["gpus"][0]["processes"])

    t0 = time.monotonic()
    snap = agent.read(holding)
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
    verdict = agent.req("kill_pid", pid=stranger.pid, grace_s=5)
    print("kill of the stranger by pid:", verdict["message"])
    ok = ok and verdict["ok"] and verdict["freed_gib"] > args.gib / 2 * 0.9
    ok = escape_case(agent, args.gib) and ok
    if stranger.poll() is None:
        stranger.kill()
    stranger.wait()
    agent.proc.stdin.close()
    agent.proc.wait(30)
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
