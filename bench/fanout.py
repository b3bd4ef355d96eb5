"""Fan-out: how fast the console gathers a whole fleet, and what it costs the console.

Real agents over real SSH: three nodes as network namespaces (each its own sshd; needs
root, skipped with the reason otherwise) and 64 agents over one loopback sshd (its
MaxStartups and MaxSessions raised), plus the same 64 over pipes for reference.

Baseline, measured in the same run: what a shell loop or a gpustat-web-style poller does,
one OpenSSH ``ssh NODE python -m gpudeck.agents --once`` per node per poll, all nodes at once.

Figures per fleet: time to connect every node (SSH, agent start, hello, configure), time
to a full fleet snapshot after connect (a ``status`` request to every agent at once, each
reply decoded into a typed Snapshot), console CPU per node for that sweep, and console CPU
per streamed snapshot (the agents push one per node per second). Goals: 64 nodes gathered
in under 1 s after connect; a sweep under 5 ms of console CPU per node. Ratios last.

    python bench/fanout.py [--nodes 64] [--sweeps 10] [--stream-s 5] [--no-netns] [--no-pipes]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from gpudeck.agents.contract import ops, wire  # noqa: E402
from gpudeck.agents.contract.wire import Snapshot  # noqa: E402
from gpudeck.remote.client import FleetClient  # noqa: E402
from gpudeck.remote.fleet import Fleet, Node  # noqa: E402
from gpudeck.remote.ssh import SshTransport  # noqa: E402
from support.ssh import NetnsFleet, Sshd, keygen, netns_unavailable, node_python  # noqa: E402


@dataclass
class Figures:
    label: str
    nodes: int
    connect_s: float = 0.0
    sweep_s: list[float] = field(default_factory=list)
    sweep_cpu_s: list[float] = field(default_factory=list)
    stream_cpu_per_snap_ms: Optional[float] = None
    stream_snaps: int = 0
    errors: list[str] = field(default_factory=list)

    def line(self) -> str:
        med = statistics.median(self.sweep_s)
        cpu = statistics.median(self.sweep_cpu_s) / self.nodes
        s = (f"{self.label}: connect {self.connect_s:.2f} s; full snapshot after connect {med * 1e3:.0f} ms "
             f"(median of {len(self.sweep_s)}, max {max(self.sweep_s) * 1e3:.0f} ms); "
             f"console CPU {cpu * 1e3:.2f} ms per node per sweep")
        if self.stream_cpu_per_snap_ms is not None:
            s += f"; streaming {self.stream_cpu_per_snap_ms:.2f} ms per snapshot ({self.stream_snaps} snapshots)"
        return s


async def measure(label: str, fleet: Fleet, transports: dict, sweeps: int, stream_s: float) -> Figures:
    fig = Figures(label, len(fleet.nodes))
    client = FleetClient(fleet, transports)
    try:
        t0 = time.monotonic()
        await client.connect_all(timeout=300)
        fig.connect_s = time.monotonic() - t0
        fig.errors = [e for e, _ in client.errors.values()]
        if fig.errors:
            raise RuntimeError(f"{label}: {len(fig.errors)} nodes failed to connect, first: {fig.errors[0]}")
        links = list(client.links.values())

        async def one(link) -> Snapshot:
            return await link.request(ops.Status(), timeout=60)

        for _ in range(sweeps):
            c0, t0 = time.process_time(), time.monotonic()
            snaps = await asyncio.gather(*(one(link) for link in links))
            fig.sweep_s.append(time.monotonic() - t0)
            fig.sweep_cpu_s.append(time.process_time() - c0)
            assert {s.node for s in snaps} == {n.name for n in fleet.nodes}
        if stream_s > 0:
            received = 0

            def count(node: str, msg) -> None:
                nonlocal received
                received += isinstance(msg, Snapshot)

            for link in links:
                link.subscribe(count)
            await asyncio.sleep(1.0)  # let the sweep's aftermath settle
            received, c0 = 0, time.process_time()
            await asyncio.sleep(stream_s)
            cpu = time.process_time() - c0
            fig.stream_snaps = received
            fig.stream_cpu_per_snap_ms = cpu / max(received, 1) * 1e3
    finally:
        await client.close()
    return fig


def baseline(label: str, targets: list[tuple[str, int, str]], key: Path, known_hosts: Path,
             python: Path, sweeps: int) -> tuple[list[float], list[float]]:
    """One OpenSSH client per node per poll, all at once: `ssh HOST python -m gpudeck.agents --once`."""
    walls, cpus = [], []
    for _ in range(sweeps):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        c0, t0 = time.process_time(), time.monotonic()
        procs = [subprocess.Popen(
            ["ssh", "-q", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
             "-o", f"UserKnownHostsFile={known_hosts}", "-i", str(key), "-p", str(port), f"root@{host}",
             f"{python} -m gpudeck.agents --once --no-nvml --node bench --home {home}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
            for host, port, home in targets]
        outs = [p.communicate() for p in procs]
        walls.append(time.monotonic() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(time.process_time() - c0 + (after.ru_utime - before.ru_utime)
                    + (after.ru_stime - before.ru_stime))
        bad = [(p.returncode, err[-300:]) for p, (out, err) in zip(procs, outs) if p.returncode != 0]
        if bad:
            raise RuntimeError(f"{label} baseline: {len(bad)} ssh polls failed, first: {bad[0]}")
        for out, _ in outs:
            wire.decode(out)  # the console would still have to parse what came back
    return walls, cpus


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=64, help="agents over loopback SSH")
    ap.add_argument("--sweeps", type=int, default=10)
    ap.add_argument("--baseline-sweeps", type=int, default=3)
    ap.add_argument("--stream-s", type=float, default=5.0, help="seconds of streamed snapshots to measure")
    ap.add_argument("--no-netns", action="store_true")
    ap.add_argument("--no-pipes", action="store_true")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]  # the machine as the bench found it (the agents add their own)

    work = Path(tempfile.mkdtemp(prefix="gpudeck-fanout-"))
    work.chmod(0o700)
    lines: list[str] = []
    results: dict[str, Figures] = {}
    base: dict[str, tuple[list[float], list[float]]] = {}
    netns = sshd = None
    try:
        # ---- 3 netns nodes
        why = "--no-netns" if args.no_netns else netns_unavailable()
        if why is None:
            netns = NetnsFleet(work / "netns", 3)
            python = node_python(work / "netns-python")
            targets = [(n.ip, 22, str(n.dir / "once")) for n in netns.nodes]
            base["3 netns nodes"] = baseline("netns", targets, netns.client_key, netns.known_hosts, python,
                                             args.baseline_sweeps)
            nodes = [Node(name=n.name, host=n.ip, user="root", identity=str(netns.client_key),
                          known_hosts=str(netns.known_hosts), python=str(n.python), home=str(n.home),
                          nvml=False, interval=1.0) for n in netns.nodes]
            results["3 netns nodes"] = asyncio.run(measure(
                "3 netns nodes over SSH", Fleet(None, nodes), {"ssh": SshTransport(config=None)},
                args.sweeps, args.stream_s))
        else:
            lines.append(f"3 netns nodes: skipped ({why})")

        # ---- N agents over one loopback sshd
        keydir = work / "loopback"
        keydir.mkdir()
        key = keygen(keydir / "client_ed25519")
        (keydir / "authorized_keys").write_text((keydir / "client_ed25519.pub").read_text())
        sshd = Sshd(keydir / "server", keydir / "authorized_keys")
        python = node_python(work / "lb-python")
        targets = [("127.0.0.1", sshd.port, str(work / f"once{i}")) for i in range(args.nodes)]
        base[f"{args.nodes} loopback nodes"] = baseline("loopback", targets, key, sshd.known_hosts, python,
                                                        args.baseline_sweeps)
        nodes = [Node(name=f"n{i:02d}", host="127.0.0.1", port=sshd.port, user="root", identity=str(key),
                      known_hosts=str(sshd.known_hosts), python=str(python), home=str(work / f"home{i}"),
                      nvml=False, interval=1.0) for i in range(args.nodes)]
        results[f"{args.nodes} loopback nodes"] = asyncio.run(measure(
            f"{args.nodes} agents over loopback SSH", Fleet(None, nodes), {"ssh": SshTransport(config=None)},
            args.sweeps, args.stream_s))
        if not args.no_pipes:
            nodes = [Node(name=f"p{i:02d}", home=str(work / f"pipe{i}"), nvml=False, interval=1.0)
                     for i in range(args.nodes)]
            results["pipes"] = asyncio.run(measure(f"{args.nodes} agents over pipes (no SSH)", Fleet(None, nodes),
                                                   {}, args.sweeps, args.stream_s))
    finally:
        if sshd is not None:
            sshd.stop()
        if netns is not None:
            netns.close()
        shutil.rmtree(work, ignore_errors=True)

    print(f"machine: {os.cpu_count()} cores, load {load_before:.1f} before the run; agents tick at 1 Hz, NVML off")
    for name, (walls, cpus) in base.items():
        n = int(name.split()[0])
        print(f"baseline, one `ssh HOST python -m gpudeck.agents --once` per node per poll, {name}: full sweep "
              f"{statistics.median(walls):.2f} s (median of {len(walls)}); console CPU "
              f"{statistics.median(cpus) / n * 1e3:.1f} ms per node (ssh clients included)")
    for line in lines:
        print(line)
    for fig in results.values():
        print(fig.line())
    for name, fig in results.items():
        if name not in base:
            continue
        walls, cpus = base[name]
        bw, bc = statistics.median(walls), statistics.median(cpus) / fig.nodes
        gw, gc = statistics.median(fig.sweep_s), statistics.median(fig.sweep_cpu_s) / fig.nodes
        goal = (f"; goals: gathered <1 s after connect {'met' if gw < 1 else 'MISSED'}, "
                f"<5 ms console CPU per node {'met' if gc < 5e-3 else 'MISSED'}") if fig.nodes >= 64 else ""
        print(f"ratio, {name} (baseline / gpudeck): full sweep {bw / gw:.0f}x faster, "
              f"console CPU per node {bc / gc:.0f}x less{goal}")


if __name__ == "__main__":
    main()
