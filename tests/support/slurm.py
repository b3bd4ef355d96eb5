"""A real single-node Slurm cluster for the tests: munged, slurmctld and slurmd as root, with
everything (config, munge key, state, logs, job output) under one directory.

Adapted from /work/shared/recipes/slurm_single_node.sh (its notes: slurm-notes.md). What this
version adds so that several clusters share one machine without touching each other (our own
tests run two at once; other developers' runs share the machine):

- nothing under /etc/slurm: clients find the cluster through ``SLURM_CONF`` (``cluster.env``);
- free TCP ports for slurmctld and slurmd, per cluster;
- a unique node name per cluster (``gd<pid>x<hex>``, slurmd started with ``-N``), with
  ``NodeHostname=<this host> NodeAddr=127.0.0.1``, so proctrack/cgroup's dirs
  (``/sys/fs/cgroup/*/slurm_<node>``) belong to this cluster alone;
- its own munge key and socket (``AuthInfo=socket=...``);
- the unix sockets (munge, slurmstepd's) in a short directory of their own under /tmp, since a
  socket path is limited to 108 bytes and pytest's directories are long.

The daemons run in the foreground (``-D`` / ``-F``) as children of the test process, in a
session of their own (a Ctrl-C of pytest reaches them only through ``down()``). Their pids, with
their start times, are also written to ``base/pids`` (``<comm> <pid> <starttime>``). ``down()``
stops only those, and kills only this cluster's job processes: those in its own cgroups, and
those whose environment names its slurm.conf and a Slurm job (proctrack/linuxproc keeps no
cgroup). A run killed before its finalizers leaves its cluster behind; the next ``up()`` in any
run removes clusters whose test process is gone (``remove_leftovers``).

Fake GPUs are GRES on character devices ``base/dev/nvidiaN`` (c 195 N), as in the recipe:
a job with ``--gres=gpu:K`` gets ``CUDA_VISIBLE_DEVICES`` and ``GRES=gpu:K(IDX:...)``.
``cpus`` is declared, not detected (``SlurmdParameters=config_overrides``): 16 tasks run at
once on a 2-core machine.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

from support.core import free_port
from support.wait import wait_for

# what a cluster needs, and where Debian puts it
DAEMONS = ("slurmctld", "slurmd", "munged")
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo", "munge", "unmunge")
PACKAGES = "slurmctld slurmd slurm-client munge"
# in a daemon's environment (and so in slurmstepd's): which cluster, which test process
OWNER_VAR = "GPUDECK_SLURM_OWNER"
NODE_RE = re.compile(r"gd(\d+)x[0-9a-f]+$")
PROCTRACKS = ("cgroup", "linuxproc")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def which(cmd: str) -> Optional[str]:
    return shutil.which(cmd) or next((p for p in (f"/usr/sbin/{cmd}", f"/sbin/{cmd}") if os.access(p, os.X_OK)),
                                     None)


def slurm_missing() -> Optional[str]:
    """Why no cluster can be started here, or None when one can."""
    missing = [c for c in DAEMONS + CLIENTS if which(c) is None]
    if missing:
        return (f"Slurm is not installed here: missing {', '.join(missing)} "
                f"(`make test` installs the packages {PACKAGES})")
    if os.geteuid() != 0:
        return f"a Slurm cluster runs its daemons as root (SlurmUser=root); the tests run as uid {os.geteuid()}"
    return None


# ---------------------------------------------------------------- processes, by pid and start time


def _stat(pid: int) -> Optional[list[str]]:
    """The fields of /proc/PID/stat after "(comm) ": [0] state, [19] start time in ticks."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def start_time(pid: int) -> Optional[str]:
    """The start time of a live process (a zombie is no longer one), or None: with the pid, it
    names a process for good (a pid alone is reused)."""
    f = _stat(pid)
    return f[19] if f and f[0] != "Z" else None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def same_proc(comm: str, pid: int, started: str) -> bool:
    """Is ``pid`` still that live (not zombie) process: same name, same start time?"""
    return start_time(pid) == started and _comm(pid) == comm


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def _pids() -> Iterator[int]:
    for d in os.listdir("/proc"):
        if d.isdigit():
            yield int(d)


def _kill(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _cgroup_dirs(node: str) -> list[Path]:
    return sorted(CGROUP_ROOT.glob(f"*/slurm_{node}"))


def _cgroup_procs(root: Path) -> set[int]:
    pids: set[int] = set()
    for f in root.rglob("cgroup.procs"):
        try:
            pids.update(int(p) for p in f.read_text().split())
        except (OSError, ValueError):
            pass
    return pids


def _clear_cgroups(node: str) -> set[int]:
    """Kill what is left in /sys/fs/cgroup/*/slurm_<node> (thawed first: a frozen process does
    not die), then remove the empty dirs. Returns the pids it killed."""
    killed: set[int] = set()
    for root in _cgroup_dirs(node):
        for state in root.rglob("freezer.state"):
            try:
                state.write_text("THAWED")
            except OSError:
                pass
        pids = _cgroup_procs(root)
        _kill(pids)
        killed |= pids
    for root in _cgroup_dirs(node):
        wait_for(lambda: not _cgroup_procs(root), timeout=10, what=f"the processes in {root} to die")
        for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [root]:
            try:
                d.rmdir()
            except OSError:
                pass
    return killed


def _owner_alive(owner: str) -> bool:
    pid, _, started = owner.partition(":")
    return pid.isdigit() and start_time(int(pid)) == started


def remove_leftovers() -> None:
    """Clusters of test processes that are gone (killed before their finalizers ran): their
    daemons and slurmstepds (marked with OWNER_VAR), their job processes (SLURM_CONF under a
    dead cluster's directory, in a Slurm job), their cgroups (``slurm_gd<pid>x...``), their
    socket dirs (``/tmp/gd<pid>x...-*``)."""
    me = os.getpid()
    dead_confs: set[str] = set()
    doomed: set[int] = set()
    envs = {pid: _environ(pid) for pid in _pids() if pid != me}
    for pid, env in envs.items():
        owner = env.get(OWNER_VAR)
        if owner and not _owner_alive(owner):
            doomed.add(pid)
            if env.get("SLURM_CONF"):
                dead_confs.add(env["SLURM_CONF"])
    for pid, env in envs.items():
        if env.get("SLURM_JOB_ID") and env.get("SLURM_CONF") in dead_confs:
            doomed.add(pid)
    _kill(doomed)
    for root in CGROUP_ROOT.glob("*/slurm_gd*"):
        m = NODE_RE.match(root.name[len("slurm_"):])
        if m and start_time(int(m.group(1))) is None:
            _clear_cgroups(root.name[len("slurm_"):])
    for rundir in Path("/tmp").glob("gd*x*-*"):  # sockets and spool (see up())
        m = NODE_RE.match(rundir.name.partition("-")[0])
        if m and rundir.is_dir() and start_time(int(m.group(1))) is None:
            shutil.rmtree(rundir, ignore_errors=True)


def squeue_calls(dir: Path) -> list[tuple[float, list[str]]]:
    """The calls a ``squeue_shim(dir)`` logged: (unix time, argv without "squeue"), in order."""
    log = Path(dir) / "squeue.log"
    if not log.exists():
        return []
    calls = []
    for line in log.read_text().splitlines():
        stamp, _, args = line.partition(" ")
        calls.append((float(stamp), shlex.split(args)))
    return calls


# ---------------------------------------------------------------- the cluster


class SlurmCluster:
    """One single-node Slurm cluster under ``base``; ``up()`` starts it, ``down()`` stops it."""

    _count = 0

    def __init__(self, base: Path, gpus: int = 4, cpus: int = 16, proctrack: str = "cgroup", min_job_age: int = 300,
                 kill_wait: int = 5, timeout: float = 60.0, debug: str = "info") -> None:
        if proctrack not in PROCTRACKS:
            raise ValueError(f"proctrack must be one of {PROCTRACKS}, not {proctrack!r}")
        self.base = Path(base).resolve()
        self.gpus, self.cpus, self.proctrack = gpus, cpus, proctrack
        self.min_job_age, self.kill_wait, self.timeout, self.debug = min_job_age, kill_wait, timeout, debug
        self.hostname = socket.gethostname().split(".")[0]
        self.node = f"gd{os.getpid()}x{secrets.token_hex(2)}"
        self.etc = self.base / "etc"
        self.conf = self.etc / "slurm.conf"
        self.logs = self.base / "log"
        self.work = self.base / "work"  # run()'s working directory: sbatch's default output lands here
        self.pids_file = self.base / "pids"
        self.env: dict[str, str] = {"SLURM_CONF": str(self.conf)}
        self.rundir: Optional[Path] = None
        self.ctld_port = self.slurmd_port = 0
        self.procs: list[tuple[str, subprocess.Popen[bytes], str]] = []  # (comm, process, start time)
        self.up_s: Optional[float] = None

    def __repr__(self) -> str:
        return f"SlurmCluster(node={self.node}, base={self.base}, ports={self.ctld_port}/{self.slurmd_port})"

    # ------------------------------------------------------------ commands

    def run(self, *argv: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
        """A Slurm command (or any command) with this cluster's environment, run in ``work``."""
        env = {**os.environ, **kw.pop("env", {}), **self.env}
        kw.setdefault("cwd", self.work)
        kw.setdefault("timeout", self.timeout)
        r = subprocess.run(argv, capture_output=True, text=True, env=env, **kw)
        if check and r.returncode != 0:
            raise AssertionError(f"{shlex.join(argv)} exited with {r.returncode} on {self.node}:\n"
                                 f"{r.stdout}{r.stderr}")
        return r

    def squeue_shim(self, dir: Path) -> Path:
        """An executable ``dir/squeue`` that appends ``<unix time> <argv, shell-quoted>`` to
        ``dir/squeue.log``, then execs the real squeue: put ``dir`` first on PATH and count the
        calls (``squeue_calls(dir)`` reads them back)."""
        real = which("squeue")
        assert real, "squeue is not installed"
        dir = Path(dir)
        dir.mkdir(parents=True, exist_ok=True)
        shim = dir / "squeue"
        shim.write_text(
            "#!/bin/bash\n"
            "# written by tests/support/slurm.py: log the call (one line, one write), then run the real squeue\n"
            'args=""; [ $# -eq 0 ] || printf -v args " %q" "$@"\n'
            f'printf "%s%s\\n" "${{EPOCHREALTIME:-$(date +%s.%N)}}" "$args" >> {shlex.quote(str(dir / "squeue.log"))}\n'
            f'exec {shlex.quote(real)} "$@"\n')
        shim.chmod(0o755)
        return shim

    def logs_tail(self, n: int = 15) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log", "slurmctld.out", "slurmd.out", "munged.out"):
            f = self.logs / name
            if f.exists() and f.stat().st_size:
                out.append(f"--- {f} (last {n} lines)\n" + "\n".join(f.read_text(errors="replace").splitlines()[-n:]))
        return "\n".join(out)

    # ------------------------------------------------------------ up

    def _write_config(self) -> None:
        assert self.rundir is not None
        for d in (self.etc, self.base / "state", self.logs, self.work, self.base / "munge"):
            d.mkdir(parents=True, exist_ok=True)
        (self.base / "munge").chmod(0o700)
        gres_types = gres_node = ""
        gres_lines = ["AutoDetect=off"]
        if self.gpus > 0:
            dev = self.base / "dev"
            dev.mkdir(exist_ok=True)
            for i in range(self.gpus):
                p = dev / f"nvidia{i}"
                if p.is_char_device():
                    continue
                p.unlink(missing_ok=True)
                try:
                    os.mknod(p, 0o666 | 0o020000, os.makedev(195, i))
                except OSError:
                    p.symlink_to("/dev/null")
            gres_types, gres_node = "GresTypes=gpu", f"Gres=gpu:{self.gpus}"
            gres_lines.append(f"NodeName={self.node} Name=gpu File={dev}/nvidia[0-{self.gpus - 1}]")
        (self.etc / "gres.conf").write_text("\n".join(gres_lines) + "\n")
        (self.etc / "cgroup.conf").write_text(
            "CgroupPlugin=autodetect\nCgroupAutomount=yes\n"
            "ConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n")
        self.conf.write_text(f"""\
# written by tests/support/slurm.py
ClusterName={self.node}
SlurmctldHost={self.hostname}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.rundir}/munge.socket
StateSaveLocation={self.base}/state
SlurmdSpoolDir={self.rundir}/spool
SlurmctldPidFile={self.rundir}/slurmctld.pid
SlurmdPidFile={self.rundir}/slurmd.pid
SlurmctldLogFile={self.logs}/slurmctld.log
SlurmdLogFile={self.logs}/slurmd.log
SlurmctldDebug={self.debug}
SlurmdDebug={self.debug}
MailProg=/bin/true
ProctrackType=proctrack/{self.proctrack}
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# the default batch_sched_delay=3 makes every sbatch job wait up to 3 s before it starts
SchedulerParameters=batch_sched_delay=0
# CPUs below is declared, not detected: slurmd takes it as it is
SlurmdParameters=config_overrides
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
KillWait={self.kill_wait}
InactiveLimit=0
MinJobAge={self.min_job_age}
SlurmdTimeout=60
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/filetxt
JobCompLoc={self.logs}/jobcomp.txt
{gres_types}
NodeName={self.node} NodeHostname={self.hostname} NodeAddr=127.0.0.1 CPUs={self.cpus} {gres_node} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")

    def _start(self, comm: str, argv: list[str]) -> subprocess.Popen[bytes]:
        env = {**os.environ, **self.env, OWNER_VAR: f"{os.getpid()}:{start_time(os.getpid())}"}
        out = open(self.logs / f"{comm}.out", "ab")
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=self.base, start_new_session=True)
        finally:
            out.close()
        started = wait_for(lambda: start_time(proc.pid), timeout=5, what=f"{comm}'s /proc entry")
        self.procs.append((comm, proc, started))
        with open(self.pids_file, "a") as f:
            f.write(f"{comm} {proc.pid} {started}\n")
        return proc

    def _check_alive(self) -> bool:
        """True, or RuntimeError with the logs when a daemon exited (for a wait's condition)."""
        for comm, proc, _ in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{comm} of {self.node} exited with {proc.returncode} while starting:\n"
                                   f"{self.logs_tail()}")
        return True

    def up(self) -> "SlurmCluster":
        """Start munged, slurmctld and slurmd; return once a probe ``srun true`` and a probe
        ``sbatch --wrap true`` have run. On failure the daemons started are stopped again."""
        why = slurm_missing()
        if why:
            raise RuntimeError(why)
        assert not self.procs, f"{self} is already up"
        t0 = time.monotonic()
        remove_leftovers()
        self.base.mkdir(parents=True, exist_ok=True)
        self.base.chmod(0o755)
        self.rundir = Path(tempfile.mkdtemp(prefix=f"{self.node}-", dir="/tmp"))  # short: a socket path has 108 bytes
        self.rundir.chmod(0o755)  # munged wants its socket's directory world-executable
        self.ctld_port = free_port()
        self.slurmd_port = wait_for(lambda: (p := free_port()) != self.ctld_port and p, timeout=5, what="a port")
        self.pids_file.unlink(missing_ok=True)
        try:
            self._write_config()
            self._start_daemons()
            self._probe()
        except BaseException:
            self.down(purge=False)
            raise
        self.up_s = time.monotonic() - t0
        return self

    def _start_daemons(self) -> None:
        assert self.rundir is not None
        key = self.base / "munge" / "munge.key"
        if not key.exists() or key.stat().st_size == 0:
            key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        sock = self.rundir / "munge.socket"
        self._start("munged", [str(which("munged")), "-F", f"--socket={sock}", f"--key-file={key}",
                               f"--pid-file={self.rundir}/munged.pid", f"--log-file={self.logs}/munged.log",
                               f"--seed-file={self.base}/munge/munged.seed"])
        wait_for(lambda: self._check_alive() and sock.exists(), timeout=10, what=f"munged's socket {sock}",
                 detail=self.logs_tail)
        self._start("slurmctld", [str(which("slurmctld")), "-D", "-f", str(self.conf)])
        self._start("slurmd", [str(which("slurmd")), "-D", "-f", str(self.conf), "-N", self.node])

        def node_ready() -> bool:
            self._check_alive()
            r = self.run("sinfo", "-h", "-n", self.node, "-o", "%T|%E", check=False)
            state, _, reason = r.stdout.strip().partition("|")
            if state in ("idle", "mixed", "allocated"):
                return True
            if state.startswith(("inval", "drain", "down")):
                if "reported lower" in reason or "Low " in reason:
                    raise RuntimeError(f"node {self.node} rejected: {reason}\n{self.logs_tail()}")
                self.run("scontrol", "update", f"nodename={self.node}", "state=resume", check=False)
            return False

        wait_for(node_ready, timeout=self.timeout, interval=0.1, what=f"node {self.node} to be idle",
                 detail=self.logs_tail)

    def _probe(self) -> None:
        """End to end: munge credentials and slurmstepd (srun), and the batch scheduler (sbatch)."""
        self.run("srun", "-J", "probe", "-N1", "-n1", "-t", "1", "--quiet", "true")
        job = self.run("sbatch", "--parsable", "-J", "probe", "-t", "1", "-o", "/dev/null", "--wrap", "true").stdout
        job = job.strip().split(";")[0]
        done = ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY")
        state = wait_for(lambda: (s := self.state(job)) in done and s, timeout=self.timeout, interval=0.1,
                         what=f"the probe batch job {job}", detail=self.logs_tail)
        if state != "COMPLETED":
            raise RuntimeError(f"probe batch job {job} ended {state}\n{self.logs_tail()}")

    def state(self, job: str) -> str:
        """A job's state in squeue (any state, finished ones for MinJobAge), or ''."""
        return str(self.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T", check=False).stdout).strip()

    def config(self) -> dict[str, str]:
        """``scontrol show config`` as a dict (ProctrackType, MinJobAge, KillWait, ...)."""
        out: dict[str, str] = {}
        for line in self.run("scontrol", "show", "config").stdout.splitlines():
            k, sep, v = line.partition("=")
            if sep:
                out[k.strip()] = v.strip()
        return out

    # ------------------------------------------------------------ down

    def _ctld_alive(self) -> bool:
        return any(comm == "slurmctld" and proc.poll() is None for comm, proc, _ in self.procs)

    def _active_jobs(self) -> str:
        return self.run("squeue", "-h", "-t", "PD,CF,R,CG,S,RQ,RS,SO,ST", "-o", "%i", check=False,
                        timeout=15).stdout.strip() if self._ctld_alive() else ""

    def job_processes(self, helpers: bool = False) -> set[int]:
        """This cluster's job processes: those in its cgroups, and (any proctrack) those with its
        SLURM_CONF and a SLURM_JOB_ID in their environment; and its slurmstepds. ``helpers``: also
        what its daemons started besides (slurmctld's slurmscriptd), for ``down()``'s sweep."""
        pids: set[int] = set()
        for root in _cgroup_dirs(self.node):
            pids |= _cgroup_procs(root)
        conf = str(self.conf)
        daemons = {proc.pid for _, proc, _ in self.procs}
        for pid in _pids():
            if pid in daemons or pid == os.getpid():
                continue
            env = _environ(pid)
            if env.get("SLURM_CONF") != conf:
                continue
            if env.get("SLURM_JOB_ID"):
                pids.add(pid)
            elif OWNER_VAR in env and (helpers or _comm(pid) == "slurmstepd"):
                pids.add(pid)
        return pids

    def down(self, purge: bool = False) -> None:
        """Cancel every job and wait for them; stop the daemons this object started (and only
        those); kill what is left of its jobs; remove ``base`` when ``purge``. Safe to call twice."""
        errors = []
        if self._ctld_alive():
            try:
                if self._active_jobs():
                    self.run("scancel", "--partition=debug", check=False, timeout=15)
                    wait_for(lambda: not self._active_jobs(), timeout=self.kill_wait + 30, interval=0.2,
                             what=f"the jobs of {self.node} to end")
            except Exception as e:  # the daemons are stopped and the jobs killed all the same
                errors.append(f"cancelling the jobs: {e}")
        for comm, proc, started in reversed(self.procs):  # slurmd, slurmctld, munged
            if proc.poll() is None and same_proc(comm, proc.pid, started):
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    errors.append(f"{comm} ({proc.pid}) ignored SIGTERM for 15 s; killed")
                    proc.kill()
                    proc.wait()
            else:
                proc.poll()
        self.procs.clear()
        self.pids_file.unlink(missing_ok=True)
        _kill(self.job_processes(helpers=True))
        _clear_cgroups(self.node)
        wait_for(lambda: not self.job_processes(helpers=True), timeout=10,
                 what=f"the job processes of {self.node} to die")
        if self.rundir is not None:
            shutil.rmtree(self.rundir, ignore_errors=True)
            self.rundir = None
        if purge:
            shutil.rmtree(self.base, ignore_errors=True)
        if errors:
            raise RuntimeError(f"{self}: " + "; ".join(errors))


# ---------------------------------------------------------------- fixtures (registered in tests/conftest.py)


def _skip_unless_slurm() -> None:
    why = slurm_missing()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """One cluster with the default knobs (4 fake GPUs, 16 CPUs, proctrack/cgroup) for a test module."""
    _skip_unless_slurm()
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster.up()
    finally:
        cluster.down()


@pytest.fixture
def make_slurm_cluster(tmp_path: Path) -> Iterator[Callable[..., SlurmCluster]]:
    """``make_slurm_cluster(**knobs)`` starts a cluster with other knobs (``proctrack="linuxproc"``,
    ``min_job_age=5``...) and returns it up; every one is brought down after the test."""
    _skip_unless_slurm()
    clusters: list[SlurmCluster] = []

    def make(**knobs: Any) -> SlurmCluster:
        cluster = SlurmCluster(tmp_path / f"slurm{len(clusters)}", **knobs)
        clusters.append(cluster)
        return cluster.up()

    yield make
    errors = []
    for cluster in reversed(clusters):
        try:
            cluster.down()
        except Exception as e:
            errors.append(str(e))
    assert not errors, "; ".join(errors)
