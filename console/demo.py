"""The demo fleet: two simulated GPU nodes on this machine, shaped like a real fleet.

``build_demo(root)`` writes ``root/fleet.toml`` and what the jobs read; its two nodes say
``local = true`` (agents on this machine, each with its own home, no SSH), so the file works
with every command (`gpudeck status|events|watch -f root/fleet.toml`). Everything lives under ``root`` (default
``~/.cache/gpudeck-demo/<checkout>-<hash>``, ``demo_dir``: one per checkout), each node's agent
home included, so the demo never sees or touches the operator's own jobs, nor another checkout's demo.

- ``b200``: 7 simulated B200 (183 GiB). One simulated SGLang server per GPU
  (``agents.workers.sim_engine``: real HTTP, SGLang's routes and metric names), each holding
  160 GiB of its GPU; SGLang's router in front of them when ``sglang-router`` is installed;
  the ``generate`` job against them (resumable: a relaunch skips what it finished).
- ``pro6000``: 4 simulated RTX PRO 6000 (96 GiB). ``extract-sim``, a stand-in for the
  extraction worker (which needs torch) that holds memory on GPUs 0-1 and reports progress;
  ``train-a`` and ``eval-b``, both declared on GPU 2 (the shared-GPU alert); and a stranger
  process, of no job, holding memory on GPU 3 (the unowned-memory alert).

GPUs are the stand-in of ``agents/simgpu.py``: a process holds memory with
``python -m gpudeck.agents.simgpu HOME GPU MIB [UTIL] -- CMD``, and frees it when it dies, so a
kill's verification ("freed 160.0 GiB") reads the same as on NVML. Every snapshot of these
nodes says ``gpus_simulated``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, Union

from ..agents.contract.jobs import JobKind

if TYPE_CHECKING:
    from ..remote.fleet import Fleet

B200, PRO6000 = "b200", "pro6000"
NODES = {B200: "7xB200:183", PRO6000: "4xRTX PRO 6000:96"}
PRICES = {B200: 36.0, PRO6000: 7.2}  # dollars per node-hour, for the cost columns and header
PLANNED_S = 3 * 3600.0  # the generate job's plan.json: what a pilot promised (the demo runs slower)
SERVERS = tuple(f"sglang-{i}" for i in range(7))
ROUTER = "router"
GENERATE = "generate"
EXTRACT = "extract-sim"
SHARED = ("train-a", "eval-b")
MODEL = "Qwen3-8B (simulated)"
PROMPTS = 100_000
TOK_S = 40.0  # per request: a server answers many requests at once
CONCURRENCY = 48
OUT_TOKENS = "64-512"
SERVER_GIB = 160
STRANGER_GIB = 30


def demo_dir() -> Path:
    """$GPUDECK_DEMO_DIR, else a folder of this copy of gpudeck's own under
    ``~/.cache/gpudeck-demo/``: the checkout's name (or ``gpudeck``, installed) and a hash of its
    path. Two checkouts on one machine then run two demos with two sets of agent homes, and one
    demo's ``q`` stops its own jobs only (a shared folder let it stop the other's engines)."""
    if os.environ.get("GPUDECK_DEMO_DIR"):
        return Path(os.environ["GPUDECK_DEMO_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    copy = Path(__file__).resolve().parent.parent  # the checkout (pip install -e) or the installed gpudeck/
    return Path(cache) / "gpudeck-demo" / f"{copy.name}-{hashlib.sha256(str(copy).encode()).hexdigest()[:8]}"


def has_router(python: str = sys.executable) -> bool:
    """Whether SGLang's router can run here (``pip install sglang-router``)."""
    if python == sys.executable:
        return importlib.util.find_spec("sglang_router") is not None
    return subprocess.run([python, "-c", "import sglang_router"], capture_output=True).returncode == 0


def demo_jobs(router: bool) -> tuple[str, ...]:
    """The demo's job names, in the order they start."""
    return SERVERS + ((ROUTER,) if router else ()) + (GENERATE, EXTRACT) + SHARED


def build_demo(root: Path, *, python: str = sys.executable, reset: bool = False, prompts: int = PROMPTS,
               interval_s: float = 1.0, router: bool | None = None) -> Path:
    """Write the demo fleet file and its data under ``root``; return the fleet file's path."""
    root = Path(root).expanduser().resolve()
    if reset and root.exists():
        stop_stranger(root)
        shutil.rmtree(root)
    for d in ("out", "extract", *(f"home-{n}" for n in NODES)):
        (root / d).mkdir(parents=True, exist_ok=True)
    prompts_path = root / "prompts.jsonl"
    if not prompts_path.exists():
        _write_prompts(prompts_path, prompts)
    plan = root / "out" / "plan.json"  # as `gpudeck plan generate` leaves it: the jobs view sets the run against it
    if not plan.exists():
        plan.write_text(json.dumps({"prompts": prompts, "projected_wall_s": PLANNED_S, "written_at": time.time(),
                                    "verdict": "go (demo plan)"}))
    ports = _ports(root, len(SERVERS) + 2)
    router = has_router(python) if router is None else router
    text = _header(root, interval_s) + _b200_jobs(root, python, ports, router, prompts_path) \
        + _pro6000_jobs(root, python)
    path = root / "fleet.toml"
    path.write_text(text)
    return path


def demo_fleet(path: Path) -> Fleet:
    """The demo's fleet file, loaded, without the implicit third node ``local``: the demo
    shows its two nodes alone."""
    from ..remote.fleet import LOCAL, load_fleet

    fleet = load_fleet(path)
    return dataclasses.replace(fleet, nodes=[n for n in fleet.nodes if n.name != LOCAL])


def _header(root: Path, interval_s: float) -> str:
    nodes = "".join(f'\n[[nodes]]\nname = "{name}"\nlocal = true\nhome = {_toml(str(root / f"home-{name}"))}\n'
                    f'simulate_gpus = "{spec}"\nprice_per_hour = {PRICES[name]}\n' for name, spec in NODES.items())
    return (f"# The gpudeck demo: written by `gpudeck demo`, rewritten on every start. Both nodes run on\n"
            f"# this machine (local = true: no SSH); their GPUs are simulated (agents/simgpu.py).\n"
            f"[defaults]\ninterval = {interval_s}\n{nodes}")


def _hold(root: Path, node: str, gpu: int, gib: float, util: float, python: str) -> list[str]:
    return [python, "-m", "gpudeck.agents.simgpu", str(root / f"home-{node}"), str(gpu), f"{gib * 1024:g}",
            f"{util:g}", "--"]


def _b200_jobs(root: Path, python: str, ports: list[int], router: bool, prompts: Path) -> str:
    out = []
    urls = []
    for i, name in enumerate(SERVERS):
        port = ports[i]
        urls.append(f"http://127.0.0.1:{port}")
        cmd = _hold(root, B200, i, SERVER_GIB, 85 + i, python) + [
            python, "-m", "gpudeck.agents.workers.sim_engine", "--port", str(port), "--tok-s", f"{TOK_S:g}",
            "--out-tokens", OUT_TOKENS, "--model", MODEL, "--latency-ms", "150", "--jitter-ms", "100"]
        out.append(f'\n[[jobs]]\nname = "{name}"\nnode = "{B200}"\nkind = "{JobKind.SGLANG_SERVER.value}"\n'
                   f'gpus = [{i}]\ncommand = {_toml(cmd)}\nport = {port}\nmetrics_url = "{urls[-1]}/metrics"\n')
    targets = urls
    if router:
        port, metrics = ports[len(SERVERS)], ports[len(SERVERS) + 1]
        out.append(f'\n[[jobs]]\nname = "{ROUTER}"\nnode = "{B200}"\nkind = "{JobKind.ROUTER.value}"\n'
                   f'port = {port}\nmetrics_url = "http://127.0.0.1:{metrics}/metrics"\n'
                   f'workers = {_toml(urls)}\n')
        targets = [f"http://127.0.0.1:{port}"]
    out.append(f'\n[[jobs]]\nname = "{GENERATE}"\nnode = "{B200}"\nkind = "{JobKind.GENERATE.value}"\n'
               f'servers = {_toml(targets)}\nprompts = {_toml(str(prompts))}\nout = {_toml(str(root / "out"))}\n'
               f'concurrency = {CONCURRENCY}\nmax_tokens = 480\nmodel_name = "{MODEL}"\nstall_after_s = 60\n')
    return "".join(out)


def _pro6000_jobs(root: Path, python: str) -> str:
    progress = root / "extract" / "progress.json"
    extract = _hold(root, PRO6000, 0, 71.5, 92, python) + _hold(root, PRO6000, 1, 71.5, 90, python) + [
        python, "-m", "gpudeck.console.demo", "extract-sim", str(progress)]
    out = [f'\n[[jobs]]\nname = "{EXTRACT}"\nnode = "{PRO6000}"\ngpus = [0, 1]\ncommand = {_toml(extract)}\n'
           f'progress = {_toml(str(progress))}\n']
    for name, gib, util in zip(SHARED, (41.0, 18.5), (55, 20)):
        cmd = _hold(root, PRO6000, 2, gib, util, python) + ["sleep", "86400"]
        out.append(f'\n[[jobs]]\nname = "{name}"\nnode = "{PRO6000}"\ngpus = [2]\ncommand = {_toml(cmd)}\n')
    return "".join(out)


def start_stranger(root: Path, python: str = sys.executable) -> int:
    """A process of no job holding memory on pro6000's GPU 3 (the unowned-memory alert); one at
    a time: a live one from a kept demo is reused. Returns its pid."""
    pid_file = Path(root) / "stranger.pid"
    pid = _live_pid(pid_file)
    if pid:
        return pid
    cmd = _hold(Path(root), PRO6000, 3, STRANGER_GIB, 35, python) + ["sleep", "86400"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def stop_stranger(root: Path) -> bool:
    pid_file = Path(root) / "stranger.pid"
    pid = _live_pid(pid_file)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    pid_file.unlink(missing_ok=True)
    return bool(pid)


def _live_pid(pid_file: Path) -> int:
    """The pid in ``pid_file`` while that process still holds its claim on pro6000's GPU 3."""
    import psutil

    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return 0
    claim = pid_file.parent / f"home-{PRO6000}" / "simgpu" / f"{pid}-3.json"
    return pid if claim.exists() and psutil.pid_exists(pid) else 0


async def stop_demo_jobs(fleet: Fleet, jobs: Sequence[str]) -> list[str]:
    """Kill the demo's jobs (the demo should not leave work running on a laptop)."""
    from ..agents.contract.ops import Kill
    from ..remote.client import AgentError, FleetClient, RequestFailed

    client = FleetClient(fleet)
    said: list[str] = []
    try:
        for job in reversed(jobs):
            try:
                r = await client.request(Kill(job=job, grace_s=5.0))
                said.append(f"{job}: {r.message}")
            except (AgentError, RequestFailed, asyncio.TimeoutError, OSError) as exc:
                said.append(f"{job}: not stopped: {exc}")
    finally:
        await client.close()
    return said


def stop_demo(root: Path) -> list[str]:
    """Stop everything the demo under ``root`` started: its jobs, then the process of no job.
    What the console does when it ends, and ``python -m gpudeck.console.demo stop ROOT`` when
    the console cannot (its terminal closed)."""
    fleet = demo_fleet(Path(root) / "fleet.toml")
    declared = {j.name for j in fleet.jobs}
    said = asyncio.run(stop_demo_jobs(fleet, [j for j in demo_jobs(True) if j in declared]))
    stop_stranger(Path(root))
    return said


def start_stopper(root: Path, python: str = sys.executable) -> None:
    """``stop_demo(root)`` in a process of its own (its own session, no terminal), so that it
    finishes whatever happens to the console that started it."""
    subprocess.Popen([python, "-m", "gpudeck.console.demo", "stop", str(root)], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def extract_sim(progress: str, total: int = 250_000, per_s: float = 180.0) -> int:
    """The ``extract-sim`` job: counts samples up at ``per_s`` into ``progress.json`` as the
    extraction worker does, resuming from the count already there. No torch, no model."""
    path = Path(progress)
    try:
        done = int(json.loads(path.read_text()).get("done", 0))
    except (OSError, ValueError, AttributeError):
        done = 0
    print(f"extract-sim: a stand-in for the extraction worker; resuming at {done:,}/{total:,}", flush=True)
    start, base = time.monotonic(), done
    while done < total:
        time.sleep(1.0)
        done = min(total, base + int((time.monotonic() - start) * per_s))
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"done": done, "total": total, "updated_at": time.time()}))
        os.replace(tmp, path)
    print("extract-sim: done", flush=True)
    return 0


def _ports(root: Path, n: int) -> list[int]:
    """``n`` ports, kept in ``root/ports`` so that a restarted demo finds its servers again."""
    f = root / "ports"
    try:
        ports = [int(p) for p in f.read_text().split()]
    except (OSError, ValueError):
        ports = []
    if len(ports) != n:
        ports = _free_ports(n)
        f.write_text(" ".join(map(str, ports)) + "\n")
    return ports


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _write_prompts(path: Path, n: int) -> None:
    topics = ("a binary heap", "TCP slow start", "the KV cache", "speculative decoding", "a B-tree",
              "gradient checkpointing", "rotary embeddings", "a bloom filter", "NCCL all-reduce", "RAID 6")
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, "messages": [{"role": "user", "content":
                    f"Explain {topics[i % len(topics)]} to a new engineer, case {i}."}]}) + "\n")
    os.replace(tmp, path)


def _toml(v: Union[str, list[str]]) -> str:
    return json.dumps(v)  # a JSON string or list of strings is valid TOML


if __name__ == "__main__":
    if sys.argv[1:2] == ["extract-sim"] and len(sys.argv) == 3:
        try:
            raise SystemExit(extract_sim(sys.argv[2]))
        except KeyboardInterrupt:
            raise SystemExit(130) from None
    if sys.argv[1:2] == ["stop"] and len(sys.argv) == 3:
        stop_demo(Path(sys.argv[2]))
        raise SystemExit(0)
    print("usage: python -m gpudeck.console.demo extract-sim PROGRESS_JSON | stop DEMO_DIR", file=sys.stderr)
    raise SystemExit(2)
