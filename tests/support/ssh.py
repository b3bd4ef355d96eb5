"""Real OpenSSH for the SSH tests: a loopback sshd, and "GPU nodes" as network namespaces.

Everything here is real: /usr/sbin/sshd with its own host keys and config, ``ip netns``,
veth pairs and a bridge, ``unshare`` for a per-node hostname, /etc/hosts and resolv.conf.
Names carry the pytest process's pid (``gdtest<pid>n1``, ``gdt<pid>br``), the subnet is
``10.251.X.0/24``: two test runs never collide, and what a killed run left behind is
removed by the next one. Traffic goes only to loopback and to these namespaces.

The namespaces share the file system and the pid space with the test: each node gets its
own directory, GPUDECK home and ``python`` (a wrapper that runs this working tree's code
with the repository venv's interpreter).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from support.core import PY, ROOT, free_port  # noqa: F401 (re-exported)

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def run(*argv: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True, **kw)



def wait_port(host: str, port: int, timeout: float = 10.0, proc: Optional[subprocess.Popen] = None,
              log: Optional[Path] = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"sshd for {host}:{port} exited with {proc.returncode}: "
                               f"{log.read_text()[-2000:] if log and log.exists() else ''}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:.0f} s")
        time.sleep(0.02)


def keygen(path: Path) -> Path:
    run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path))
    return path


def host_key_line(name: str, pubkey: Path) -> str:
    keytype, blob = pubkey.read_text().split()[:2]
    return f"{name} {keytype} {blob}\n"


def sshd_config(d: Path, listen: str, port: int, authorized_keys: Path, host_cert: Optional[Path] = None,
                extra: str = "") -> Path:
    cfg = d / "sshd_config"
    cert = f"HostCertificate {host_cert}\n" if host_cert else ""
    cfg.write_text(f"""\
ListenAddress {listen}
Port {port}
HostKey {d / 'host_ed25519'}
{cert}PidFile {d / 'sshd.pid'}
AuthorizedKeysFile {authorized_keys}
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
UseDNS no
MaxStartups 200
MaxSessions 100
LogLevel ERROR
Subsystem sftp internal-sftp
{extra}""")
    return cfg


def node_python(path: Path, pythonpath: Path = ROOT) -> Path:
    """A node's ``python``: the repository venv's interpreter running this working tree."""
    path.write_text(f'#!/bin/sh\nPYTHONPATH={pythonpath} exec {PY} "$@"\n')
    path.chmod(0o755)
    return path


def old_version_python(d: Path, version: str = "0.0.1") -> Path:
    """A node whose installed gpudeck is another version: a copy of agents/ that says so."""
    pkg = d / "old" / "gpudeck" / "agents"  # a regular gpudeck package first on the path wins
    shutil.copytree(ROOT / "agents", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg.parent / "__init__.py").write_text("")
    init = pkg / "contract" / "__init__.py"
    text = init.read_text()
    assert re.search(r'VERSION = "[^"]*"', text), f"{init}: no VERSION to change"
    init.write_text(re.sub(r'VERSION = "[^"]*"', f'VERSION = "{version}"', text))
    return node_python(d / "python-old", d / "old")


class Sshd:
    """A real sshd on 127.0.0.1 with its own host key and config; a Popen child of the test."""

    def __init__(self, d: Path, authorized_keys: Path, ca: Optional[Path] = None, principals: str = "127.0.0.1",
                 validity: str = "-5m:+1h", extra_config: str = "") -> None:
        """``ca``: sign the host key with this CA key (``ssh-keygen -s``) and serve the certificate;
        ``extra_config``: more sshd_config lines (``SetEnv HOME=...``: a node of its own)."""
        self.dir = d
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o700)
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(exist_ok=True)  # Debian's privilege-separation dir
        self.host_key = keygen(d / "host_ed25519")
        cert = None
        if ca is not None:
            run("ssh-keygen", "-q", "-s", str(ca), "-I", f"{d.name}-host", "-h", "-n", principals, "-V", validity,
                str(d / "host_ed25519.pub"))
            cert = d / "host_ed25519-cert.pub"
        self.port = free_port()
        self.config = sshd_config(d, "127.0.0.1", self.port, authorized_keys, cert, extra_config)
        self.known_hosts = d / "known_hosts"
        self.known_hosts.write_text(host_key_line(f"[127.0.0.1]:{self.port}", d / "host_ed25519.pub"))
        self.log = d / "sshd.log"
        run(SSHD, "-t", "-f", str(self.config))
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)],
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        wait_port("127.0.0.1", self.port, proc=self.proc, log=self.log)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------- network namespaces


def netns_unavailable() -> Optional[str]:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); the tests run as uid %d" % os.geteuid()
    if not shutil.which("ip"):
        return "network namespaces need iproute2's `ip`, which is not installed"
    probe = f"gdtest{os.getpid()}probe"
    r = run("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace here (ip netns add: {r.stderr.strip()})"
    run("ip", "netns", "del", probe, check=False)
    r = run("ip", "link", "add", f"gdt{os.getpid()}pb", "type", "bridge", check=False)
    if r.returncode != 0:
        return f"cannot create a bridge here (ip link add type bridge: {r.stderr.strip()})"
    run("ip", "link", "del", f"gdt{os.getpid()}pb", check=False)
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill_netns(ns: str) -> None:
    pids = run("ip", "netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    run("ip", "netns", "del", ns, check=False)


def remove_leftovers() -> None:
    """Namespaces and links of earlier runs whose pytest is gone (killed before its finalizers)."""
    for line in run("ip", "netns", "list", check=False).stdout.splitlines():
        m = re.match(r"(gdtest(\d+)n\d+)\b", line)
        if m and not _pid_alive(int(m.group(2))):
            _kill_netns(m.group(1))
    for line in run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        m = re.match(r"\d+:\s+(gdt(\d+)(?:br|jb|v\d+|pb))[@:]", line)
        if m and not _pid_alive(int(m.group(2))):
            run("ip", "link", "del", m.group(1), check=False)


def _free_subnet(prefix: str = "10.251") -> str:
    used = run("ip", "-4", "addr", "show", check=False).stdout + run("ip", "-4", "route", "show", check=False).stdout
    for k in range(256):
        x = (os.getpid() + k) % 250 + 1
        if f"{prefix}.{x}." not in used:
            return f"{prefix}.{x}"
    raise RuntimeError(f"no free {prefix}.X.0/24 subnet")


class NetnsNode:
    def __init__(self, fleet: "NetnsFleet", i: int) -> None:
        self.index = i
        self.name = f"node{i}"  # the fleet's name for it
        self.hostname = f"gdn{i}"  # what the node itself says (own UTS namespace)
        self.ns = f"gdtest{fleet.tag}n{i}"
        self.veth = f"gdt{fleet.tag}v{i}"  # the root side: set it down to cut the node off
        self.ip = f"{fleet.subnet}.{10 + i}"
        self.dir = fleet.dir / self.name
        self.home = self.dir / "home"
        self.python = self.dir / "python"
        self.proc: Optional[subprocess.Popen] = None

    def link(self, up: bool) -> None:
        run("ip", "link", "set", self.veth, "up" if up else "down")


class NetnsFleet:
    """A bridge and N namespaces, each a node with its own address, hostname and sshd."""

    def __init__(self, d: Path, n: int = 3, first: int = 1, bridge: str = "br") -> None:
        self.dir = d
        self.tag = str(os.getpid())
        self.bridge = f"gdt{self.tag}{bridge}"
        self.nodes: list[NetnsNode] = []
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o700)
        Path("/run/sshd").mkdir(exist_ok=True)
        self.client_key = keygen(d / "client_ed25519")
        self.authorized_keys = d / "authorized_keys"
        shutil.copy(d / "client_ed25519.pub", self.authorized_keys)
        self.known_hosts = d / "known_hosts"
        self.known_hosts.write_text("")
        remove_leftovers()
        self.subnet = _free_subnet()
        try:
            run("ip", "link", "add", self.bridge, "type", "bridge")
            run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
            run("ip", "link", "set", self.bridge, "up")
            for i in range(first, first + n):
                self.nodes.append(self._add(NetnsNode(self, i)))
            for node in self.nodes:
                wait_port(node.ip, 22, proc=node.proc, log=node.dir / "sshd.log")
        except BaseException:
            self.close()
            raise

    def _add(self, node: NetnsNode, behind: Optional[NetnsNode] = None) -> NetnsNode:
        """A node on the bridge; ``behind``: on the bastion's own bridge instead (see BastionFleet)."""
        d = node.dir
        d.mkdir()
        node.home.mkdir()
        node_python(node.python)
        run("ip", "netns", "add", node.ns)
        run("ip", "link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.ns)
        if behind is None:
            run("ip", "link", "set", node.veth, "master", self.bridge, "up")
        else:  # the other end in the bastion's namespace: only it can reach the node
            run("ip", "link", "set", node.veth, "netns", behind.ns)
            run("ip", "-n", behind.ns, "link", "set", node.veth, "master", "inner", "up")
        run("ip", "-n", node.ns, "addr", "add", f"{node.ip}/24", "dev", "eth0")
        run("ip", "-n", node.ns, "link", "set", "lo", "up")
        run("ip", "-n", node.ns, "link", "set", "eth0", "up")
        if behind is None:
            run("ip", "-n", node.ns, "route", "add", "default", "via", f"{self.subnet}.1")
        keygen(d / "host_ed25519")
        with open(self.known_hosts, "a") as f:
            f.write(host_key_line(node.ip, d / "host_ed25519.pub"))
        cfg = sshd_config(d, "0.0.0.0", 22, self.authorized_keys)
        (d / "hosts").write_text(f"127.0.0.1 localhost\n{node.ip} {node.hostname}\n")
        # fail fast instead of waiting ~10 s on a DNS server nobody can reach
        (d / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        inner = (f"mount --bind {d / 'hosts'} /etc/hosts && mount --bind {d / 'resolv.conf'} /etc/resolv.conf"
                 f" && hostname {node.hostname} && exec {SSHD} -D -e -f {cfg}")
        node.proc = subprocess.Popen(["ip", "netns", "exec", node.ns, "unshare", "--uts", "--mount", "sh", "-c", inner],
                                     stdout=open(d / "sshd.log", "wb"), stderr=subprocess.STDOUT)
        return node

    def node(self, name: str) -> NetnsNode:
        return next(n for n in self.nodes if n.name == name)

    def pids_in(self, node: NetnsNode) -> list[int]:
        return [int(p) for p in run("ip", "netns", "pids", node.ns, check=False).stdout.split()]

    def fleet_toml(self, jobs: str = "", extra_nodes: str = "", interval: float = 0.5,
                   connect_timeout: float = 3.0) -> str:
        out = [f"""\
[defaults]
user = "root"
identity = "{self.client_key}"
known_hosts = "{self.known_hosts}"
interval = {interval}
connect_timeout = {connect_timeout}
nvml = false
"""]
        for node in self.nodes:
            out.append(f"""
[[nodes]]
name = "{node.name}"
host = "{node.ip}"
python = "{node.python}"
home = "{node.home}"
""")
        return "".join(out) + extra_nodes + jobs

    def close(self) -> None:
        for node in getattr(self, "inner", []):  # behind a bastion: first
            if node.proc is not None and node.proc.poll() is None:
                node.proc.terminate()
            _kill_netns(node.ns)
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.terminate()
        for node in self.nodes:
            _kill_netns(node.ns)  # sshd sessions, agents and jobs started in it
            if node.proc is not None:
                try:
                    node.proc.wait(5)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait()
            run("ip", "link", "del", node.veth, check=False)
        run("ip", "link", "del", self.bridge, check=False)
        for node in self.nodes:  # jobs that outlived their namespace's pid list (none should)
            for state in node.home.glob("jobs/*/state.json"):
                try:
                    import json
                    pgid = json.loads(state.read_text()).get("pgid")
                    if pgid:
                        os.killpg(pgid, signal.SIGKILL)
                except (ValueError, OSError):
                    pass


class BastionFleet(NetnsFleet):
    """A bastion namespace on the test's bridge, and nodes behind it on a second bridge that
    lives in the bastion's namespace: the test reaches them only through the bastion (the
    bastion does not forward IP; the root namespace routes their subnet onto its own bridge,
    where nobody answers for it, so a direct connect fails and no packet leaves the machine)."""

    def __init__(self, d: Path, inner: int = 2) -> None:
        self.inner: list[NetnsNode] = []
        super().__init__(d, n=1, first=21, bridge="jb")
        self.bastion = self.nodes[0]
        self.bastion.name = "bastion"
        try:
            self.inner_subnet = _free_subnet("10.252")
            b = self.bastion.ns
            run("ip", "-n", b, "link", "add", "inner", "type", "bridge")
            run("ip", "-n", b, "addr", "add", f"{self.inner_subnet}.1/24", "dev", "inner")
            run("ip", "-n", b, "link", "set", "inner", "up")
            run("ip", "route", "add", f"{self.inner_subnet}.0/24", "dev", self.bridge)
            for i in range(22, 22 + inner):
                node = NetnsNode(self, i)
                node.name, node.ip = f"inner{i - 21}", f"{self.inner_subnet}.{10 + i}"
                self.inner.append(self._add(node, behind=self.bastion))
            for node in self.inner:
                r = run("ip", "netns", "exec", b, "bash", "-c",
                        f"for i in $(seq 100); do (: </dev/tcp/{node.ip}/22) 2>/dev/null && exit 0; sleep 0.05; "
                        f"done; exit 1", check=False)
                if r.returncode != 0:
                    raise RuntimeError(f"sshd of {node.name} not answering in the bastion's namespace: "
                                       f"{(node.dir / 'sshd.log').read_text()[-2000:]}")
        except BaseException:
            self.close()
            raise

    def fleet_toml(self, jobs: str = "", extra_nodes: str = "", interval: float = 0.5,
                   connect_timeout: float = 3.0, jump: Optional[str] = "bastion") -> str:
        """The bastion as a node, and the inner nodes with ``jump`` (None: no jump key)."""
        out = [super().fleet_toml(interval=interval, connect_timeout=connect_timeout)]
        for node in self.inner:
            out.append(f"""
[[nodes]]
name = "{node.name}"
host = "{node.ip}"
python = "{node.python}"
home = "{node.home}"
""" + (f'jump = "{jump}"\n' if jump else ""))
        return "".join(out) + extra_nodes + jobs


def ssh_connections_to(ip: str, port: int = 22) -> int:
    """Established TCP connections of this (root) namespace to ip:port."""
    import psutil
    return sum(1 for c in psutil.net_connections("tcp")
               if c.raddr and (c.raddr.ip, c.raddr.port) == (ip, port) and c.status == psutil.CONN_ESTABLISHED)


# ---------------------------------------------------------------- waiting on the console


class Events:
    """Collects FleetClient.watch events; tests wait on conditions over them."""

    def __init__(self) -> None:
        self.items: list[tuple[float, str, Any]] = []
        self._changed = asyncio.Event()

    def __call__(self, node: str, event: Any) -> None:
        self.items.append((time.monotonic(), node, event))
        self._changed.set()

    def of(self, node: Optional[str] = None, kind: Optional[type] = None, after: float = 0.0) -> list[Any]:
        return [e for t, n, e in self.items
                if t >= after and (node is None or n == node) and (kind is None or isinstance(e, kind))]

    async def wait(self, cond: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = cond()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                tail = [(n, type(e).__name__, getattr(e, "reason", "")) for _, n, e in self.items[-8:]]
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last events: {tail}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 0.5))
            except asyncio.TimeoutError:
                pass


def lock_holder(home: Path) -> Optional[int]:
    """The pid of the agent holding ``<home>/agent.lock`` (the node's one agent), if alive."""
    import psutil
    try:
        pid = int((Path(home) / "agent.lock").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if psutil.pid_exists(pid) else None


def agents_of(home: Path) -> list[int]:
    """Live agent processes running with this GPUDECK home (found by their command line)."""
    import psutil
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        if p.info["status"] == psutil.STATUS_ZOMBIE or "gpudeck.agents" not in cmd or "--home" not in cmd:
            continue
        if cmd[cmd.index("--home") + 1:cmd.index("--home") + 2] == [str(home)]:
            out.append(p.pid)
    return out
