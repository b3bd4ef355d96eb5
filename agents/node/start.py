"""How an agent process starts (``python -m gpudeck.agents``): one agent per node home. It
relays to the agent serving the home, or takes the node over from one that does not answer
(or is another version) before touching any job; ``--detached`` is the node's watcher and
``--ensure`` what the node's supervisor runs (agents/watch/)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from pathlib import Path
from typing import BinaryIO, Optional

from ..contract import VERSION, wire
from ..contract.cluster import ClusterSpec
from .agent import Agent, make_home
from ..sense.gpu import GpuSampler
from ..jobs.backend import GpuReader
from .consoles import Listener, StartLock, find_agent, relay
from .lock import AgentLock, AgentLockError
from ..jobs.supervisor import JobSupervisor

log = logging.getLogger("agents")


def default_home() -> Path:
    return Path(os.environ.get("GPUDECK_HOME") or Path.home() / ".gpudeck")


def home_mode_problem(home: Path) -> Optional[str]:
    """A home others may write to is refused: its job specs are commands this user runs."""
    try:
        mode = home.stat().st_mode & 0o777
    except FileNotFoundError:
        return None  # made 0700 by the agent
    except OSError as exc:
        return f"cannot use the state directory {home}: {exc.strerror or exc}"
    if mode & 0o022:
        who = "group and others" if mode & 0o022 == 0o022 else "its group" if mode & 0o020 else "others"
        return (f"the state directory {home} is writable by {who} (mode {mode:04o}): anyone who can write there "
                f"can make this user run a command; run `chmod 700 {home}`")
    return None


def _node_name(text: str) -> str:
    """--node: a name in every snapshot and event; a newline in it would be a line of its own."""
    from ..contract.names import name_problem

    problem = name_problem(text, "a node name")
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _interval(text: str) -> float:
    """--interval: a number of seconds from 0.01 to 3600 (0 made the agent busy-loop)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0.01 <= value <= 3600:  # NaN fails this too
        raise argparse.ArgumentTypeError(f"expected 0.01 to 3600 seconds, got {text!r}")
    return value


def gpu_reader(home: Path, nvml: bool = True, simulate_gpus: Optional[str] = None) -> GpuReader:
    """NVML's GPUs, or the stand-in ones of the demo and the tests (only ever by explicit request)."""
    if simulate_gpus:
        from ..simgpu import SimGpuSampler
        return SimGpuSampler(home, simulate_gpus)
    return GpuSampler(enabled=nvml)


def node_agent(home: Path, node: str, interval_s: float = 1.0, *, nvml: bool = True,
               simulate_gpus: Optional[str] = None, detached: bool = False, textfile_dir: Optional[str] = None,
               out: Optional[BinaryIO] = None) -> Agent:
    """The agent of a node: its jobs are this host's processes (agents/jobs/supervisor.py)."""
    home = make_home(home)
    gpu = gpu_reader(home, nvml, simulate_gpus)
    jobs = JobSupervisor(home, gpu, node=node, role="watcher" if detached else "agent")
    return Agent(home, node, jobs, gpu, interval_s, out=out, detached=detached, textfile_dir=textfile_dir)


def cluster_agent(home: Path, node: str, spec: ClusterSpec, interval_s: float = 1.0, *, nvml: bool = True,
                  simulate_gpus: Optional[str] = None, out: Optional[BinaryIO] = None) -> Agent:
    """The agent of a cluster's login node: Slurm runs its jobs (agents/cluster/)."""
    from ..cluster.backend import ClusterJobs

    home = make_home(home)
    gpu = gpu_reader(home, nvml, simulate_gpus)
    return Agent(home, node, ClusterJobs(home, node, spec, gpu), gpu, interval_s, out=out)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m gpudeck.agents", description="gpudeck node agent")
    ap.add_argument("--home", type=Path, default=None, help="state directory (default ~/.gpudeck or $GPUDECK_HOME)")
    ap.add_argument("--node", default=None, type=_node_name,
                    help="node name shown in the console (default: hostname)")
    ap.add_argument("--interval", type=_interval, default=1.0, help="seconds between snapshots (0.01 to 3600)")
    ap.add_argument("--no-nvml", action="store_true", help="do not poll GPUs")
    ap.add_argument("--simulate-gpus", metavar="SPEC", default=None,
                    help="stand-in GPUs for the demo and tests (COUNTxNAME:GIB, e.g. 4xRTX PRO 6000:96); "
                         "never on a real node")
    ap.add_argument("--textfile-dir", metavar="DIR", default=None,
                    help="write DIR/gpudeck.prom each tick for node_exporter's textfile collector "
                         "(docs/prometheus.md)")
    ap.add_argument("--once", action="store_true", help="print one snapshot and exit")
    ap.add_argument("--no-history", action="store_true",
                    help="keep no history database (<home>/history.db): the last hour in memory only")
    ap.add_argument("--takeover-grace", type=float, default=10.0,
                    help="seconds an older agent on this node gets to exit before SIGKILL")
    ap.add_argument("--detached", action="store_true",
                    help="run as the node's watcher, with no console (`gpudeck watch start` sets it up)")
    ap.add_argument("--ensure", action="store_true",
                    help="start the node's watcher if the home is watched and no agent serves it, then exit "
                         "(what cron runs; agents/watch/supervise.py)")
    ap.add_argument("--cluster", metavar="JSON", default=None,
                    help="run as a cluster's agent on its login node: the fleet file's [[clusters]] table as JSON "
                         "(the console passes it)")
    ap.add_argument("--observe", action="store_true",
                    help="report this node's GPUs and host as snapshots on stdout until stdin closes; launch "
                         "nothing (a cluster agent runs it beside a task, with srun --overlap)")
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m gpudeck.agents``: one mode each run (--observe, --ensure, --once, the agent
    of a node or of a cluster); the agent's own arguments are kept for the watcher it may start."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=wire.STDERR_FORMAT)
    import getpass
    home = Path(str(args.home or default_home()).replace("{user}", getpass.getuser())).expanduser()
    if args.observe:
        from ..cluster.observe import observe
        return observe(args.node or socket.gethostname(), home, args.interval, args.simulate_gpus,
                       nvml=not args.no_nvml)
    cluster = None
    if args.cluster:
        try:
            import json
            cluster = ClusterSpec.from_dict(json.loads(args.cluster))
        except (ValueError, TypeError) as exc:
            log.error("--cluster: %s", exc)
            return 2
    problem = home_mode_problem(home)
    if problem:
        log.error("%s", problem)
        return 3
    own_argv = list(sys.argv[1:] if argv is None else argv)
    if args.ensure:
        try:
            return ensure(home, own_argv)
        except OSError as exc:
            log.error("cannot use the state directory %s: %s", home, exc.strerror or exc)
            return 3
    return serve(args, home, cluster, own_argv)


def ensure(home: Path, argv: list[str]) -> int:
    """``--ensure``, what the node's supervisor runs (cron's @reboot and every minute): start a
    detached watcher when ``home`` is watched and no agent serves it; otherwise nothing. An
    agent of a console that is connected is left alone: it hands over when its console leaves."""
    from ..watch.config import WatchConfig
    from ..watch.daemon import spawn_detached

    home = Path(home)
    if not WatchConfig.load(home).watching:
        return 0
    start = StartLock(home)  # the start of agents is one at a time: two ensures never both spawn
    try:
        found = find_agent(home, VERSION, wire.PROTOCOL)
        if found is not None:
            found[0].close()
            return 0
        proc = spawn_detached(home, [a for a in argv if a != "--ensure"], started_by="cron")
        log.info("%s is watched and no agent serves it: started the detached watcher (pid %d)", home, proc.pid)
        return 0
    finally:
        start.release()


def serve(args: argparse.Namespace, home: Path, cluster: Optional[ClusterSpec], argv: list[str]) -> int:
    """The agent of this home (a node's, or a cluster's), once (--once) or until its last
    console leaves; a second agent relays to the one serving the home instead."""
    lock: Optional[AgentLock] = None
    listener: Optional[Listener] = None
    if not args.once:
        code, lock, listener = take_home(home, args.detached, args.takeover_grace)
        if code is not None:
            return code
    try:
        if cluster is not None:
            agent = cluster_agent(home, args.node or cluster.name, cluster, args.interval, nvml=not args.no_nvml,
                                  simulate_gpus=args.simulate_gpus)
        else:
            agent = node_agent(home, args.node or socket.gethostname(), args.interval, nvml=not args.no_nvml,
                               simulate_gpus=args.simulate_gpus, detached=args.detached and not args.once,
                               textfile_dir=args.textfile_dir)
    except OSError as exc:  # an unwritable home, a full disk: say so, not a traceback
        log.error("cannot start the agent in %s: %s", home, exc)
        return 3
    agent.listener = listener
    agent.argv = agent.watch.agent_argv = argv
    if lock is not None:
        import signal
        signal.signal(signal.SIGTERM, agent.on_takeover)
    if args.once:
        agent.history.readonly = True  # one look is not history (it reads what the last agents kept)
    if args.no_history:
        agent.history.path = None
    if args.once:
        agent.send(agent.snapshot())
        return 0
    # what start-up made (modules, the fleet's specs, the history read back) lives as long as the
    # agent: out of the collector's sight, a full collection walks only what the ticks make
    import gc
    gc.freeze()
    try:
        asyncio.run(agent.run())
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    return 0


def take_home(home: Path, detached: bool, grace_s: float
              ) -> tuple[Optional[int], Optional[AgentLock], Optional[Listener]]:
    """One agent per node: relay to the one serving this home, or take the node over from an
    agent that does not answer (or is another version) before touching any job; agents starting
    together take turns until the winner's socket is bound. (an exit code to end with, or None
    with the lock and the listener of the agent that now serves the home)"""
    try:
        start = StartLock(home)
    except OSError as exc:
        log.error("cannot use the state directory %s: %s", home, exc.strerror or exc)
        return 3, None, None
    lock = listener = None
    try:
        found = find_agent(home, VERSION, wire.PROTOCOL)
        if detached:  # the watcher takes over from a console's agent, never from a watcher
            from ..watch.daemon import detached_may_start
            if not detached_may_start(home, found):
                return 0, None, None
            found = None
        if found is None:
            lock = AgentLock.take_over(home, grace_s=grace_s)
            try:
                listener = Listener(home)
            except OSError as exc:
                log.warning("cannot serve other consoles on %s: %s", home / "agent.sock", exc)
    except AgentLockError as exc:
        log.error("%s", exc)
        return 3, None, None
    finally:
        start.release()
    if found is not None:
        return relay(*found), None, None
    return None, lock, listener
