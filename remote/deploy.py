"""Put this gpudeck version on a node: a wheel over SFTP, pip into a venv.

For each node, on the node's own SSH connection (the one the agent uses):

1. the wheel of this version (built once from this source tree with ``pip wheel --no-deps``,
   or given) is copied over SFTP to ``<home>/dist/``;
2. a venv is made at ``Node.agent_venv`` (default ``<home>/venv``, i.e. ``~/.gpudeck/venv``)
   with the node's ``python``, once; it sees the system's site-packages, and when that
   python is itself a venv, that venv's packages too (a ``.pth`` file);
3. the agent's dependencies (psutil, httpx, prometheus_client, nvidia-ml-py) are looked for
   in it. **Offline first**: when they import, the wheel alone is installed with
   ``pip install --no-deps --no-index``: nothing is downloaded. When some are missing they
   are installed from the node's package index (only the node-side ones, never textual or
   asyncssh); a node without an index then fails with what is missing and what to do;
4. the venv's python must then import ``agents`` at the console's version.

From then on the agent runs with that venv's python (see ``remote.ssh.agent_command``).
The wheel (building it, its version, digest and requirements) is deploy_wheel.py's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shlex
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import asyncssh

from ..agents.contract import VERSION as __version__
from ..agents.contract.envs import ENVS_DIR, EnvSpec
from ..agents.contract.jobs import JobSpec
from ..agents.contract.needs import BASE, broken_python_line, extras_for, fix_line, needed_modules
from .fleet import Fleet, Node
from .link import AgentError
from .deploy_envs import build_envs
from .deploy_wheel import (NODE_DISTRIBUTIONS, PACKAGE_DIRS, PROJECT_ROOT, DeployError, _tail, build_failure,
                           build_requirements, build_wheel, node_requirements, wheel_digest, wheel_from_installed,
                           wheel_version)
from .ssh import SshTransport, _shell_path

NODE_IMPORTS = BASE  # agents/needs.py: what the agent and the generate worker import


@dataclasses.dataclass(frozen=True)
class Deployed:
    node: str
    version: str
    venv: str  # absolute, on the node
    python: str  # the agent's python from now on
    deps: str  # "present" (installed --no-deps --no-index) or "installed" (from the node's index)
    seconds: float
    problems: tuple[str, ...] = ()  # jobs of the node that would fail at launch (agents/needs.py), one line each
    envs: tuple[str, ...] = ()  # each [[envs]] build: unchanged, built or failed, in a sentence (deploy_envs.py)

    def describe(self) -> str:
        how = ("dependencies already there: pip --no-deps --no-index" if self.deps == "present"
               else "this same wheel was installed there already: not reinstalled" if self.deps == "unchanged"
               else "dependencies installed from the node's package index")
        return f"{self.node}: gpudeck {self.version} in {self.venv} ({how}) in {self.seconds:.1f} s"


# ---------------------------------------------------------------- one node

# Makes the venv see the packages of the python it was made from when that python is
# itself a venv (--system-site-packages only reaches the base interpreter's).
_LAYER = """
import os, sys, sysconfig
venv = sys.argv[1]
if sys.prefix != sys.base_prefix:
    paths = sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")})
    target = sysconfig.get_paths(vars={"base": venv, "platbase": venv})["purelib"]
    with open(os.path.join(target, "_gpudeck_base.pth"), "w") as f:
        f.write("\\n".join(paths) + "\\n")
"""

_INSTALL = """
set -e
PY={python}; VENV={venv}; WHEEL={wheel}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv --system-site-packages --without-pip "$VENV"
  "$PY" -c {layer} "$VENV"
fi
VPY="$VENV/bin/python"
SUM={digest}
if [ "$(cat "$VENV/.gpudeck-wheel" 2>/dev/null)" = "$SUM" ] && "$VPY" -c {find} {modules} 2>/dev/null; then
  echo "deps=unchanged"
  "$VPY" -c 'import gpudeck.agents as a, sys; print("version=" + a.__version__); print("python=" + sys.executable)'
  exit 0
fi
rm -f "$VENV/.gpudeck-wheel"
"$VPY" -m pip --version >/dev/null 2>&1 || "$VPY" -m ensurepip --default-pip >/dev/null
if "$VPY" -c {find} {modules} 2>/dev/null; then
  "$VPY" -m pip install --quiet --disable-pip-version-check --no-deps --no-index --force-reinstall "$WHEEL"
  echo "deps=present"
else
  "$VPY" -m pip install --quiet --disable-pip-version-check {requirements} || {{
    echo "what the node's jobs need is missing from $VPY and pip could not install it" \
         "(no package index reachable from the node?): install {names} into $PY, then deploy again" >&2
    exit 3; }}
  "$VPY" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$WHEEL"
  echo "deps=installed"
fi
"$VPY" -c 'import gpudeck.agents as a, sys; print("version=" + a.__version__); print("python=" + sys.executable)'
printf '%s\n' "$SUM" > "$VENV/.gpudeck-wheel"
"""
# exit 1 when one of argv's modules cannot be found (find_spec: nothing is imported); prints them
_FIND = ("import importlib.util as u, sys\n"
         "gone = [m for m in sys.argv[1:] if u.find_spec(m) is None]\n"
         "print(' '.join(gone)); sys.exit(1 if gone else 0)")
# runs argv[2] with /bin/sh under an exclusive lock on argv[1]: two deploys never pip into one venv at once
_LOCKED = ("import fcntl, os, sys\n"
           "f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); os.set_inheritable(f.fileno(), True)\n"
           "os.execv('/bin/sh', ['/bin/sh', '-c', sys.argv[2]])")
# a probe file per node of this run (a shared home shows the others'), the marker of the node that
# last deployed there, and this machine
_PROBE = """
set -e
mkdir -p {home}
printf '%s\\n' {node} > {probe}
echo "machine=$(cat /etc/machine-id 2>/dev/null || hostname)"
echo "marker=$(cat {marker} 2>/dev/null | tr -d '\\n' || true)"
"""
MARKER = "node.json"  # in the home: {"node", "fleet", "machine"} of the node deployed there


Step = Callable[[str, str], None]  # (node, what it is doing now)


@dataclasses.dataclass
class _Session:
    """One node's part of a deploy: its connection and what the probe found."""

    node: Node
    conn: Any  # the node's asyncssh connection
    run: Callable[[str, str], Any]
    home: str
    venv: str
    probe: str
    machine: str
    marker: dict[str, Any]
    t0: float


async def _open(transport: SshTransport, node: Node, run_id: str, timeout: float, step: Step) -> _Session:
    t0 = time.monotonic()
    step(node.name, "connecting over SSH")
    conn = await transport.connection(node)  # typed SshError: host key, auth, unreachable

    async def run(what: str, command: str) -> str:
        try:
            r = await asyncio.wait_for(conn.run(command, check=False), timeout)
        except asyncio.TimeoutError:
            raise DeployError(node.name, what, f"no end within {timeout:g} s") from None
        except (asyncssh.Error, OSError) as exc:
            raise DeployError(node.name, what, f"SSH: {getattr(exc, 'reason', None) or exc}") from None
        if r.exit_status != 0:
            raise DeployError(node.name, what, f"exit {r.exit_status}: {_tail(r.stderr or r.stdout)}")
        return str(r.stdout or "")

    remote_home, _, remote_user = (await run("login", 'printf "%s\\n%s" "$HOME" "$(id -un)"')).strip().partition("\n")

    def absolute(path: str) -> str:  # ~ and a cluster's {user}, as the node's agent reads them
        path = path.replace("{user}", remote_user.strip())
        return remote_home + path[1:] if path == "~" or path.startswith("~/") else path

    home = absolute(node.home or "~/.gpudeck").rstrip("/")
    probe = f"{home}/.deploy-{run_id}-{node.name}"
    out = await run("probe", "/bin/sh -c " + shlex.quote(_PROBE.format(
        home=shlex.quote(home), node=shlex.quote(node.name), probe=shlex.quote(probe),
        marker=shlex.quote(f"{home}/{MARKER}"))))
    facts = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    try:
        marker = json.loads(facts.get("marker") or "{}")
    except ValueError:
        marker = {}
    return _Session(node, conn, run, home, absolute(node.agent_venv).rstrip("/"), probe, facts.get("machine", "?"),
                    marker if isinstance(marker, dict) else {}, t0)


async def _check_home(s: _Session, run_id: str, fleet_ids: tuple[str, ...], fleet_nodes: set[str]) -> None:
    """Refuse a home another node of the fleet uses: one seen in this run (its probe file is
    there), or the one deployed there last (the marker), while that node is still in the fleet."""
    pattern = shlex.quote(f"{s.home}/.deploy-{run_id}-") + "*"
    others = [ln.strip() for ln in (await s.run("probe", f"cat {pattern} 2>/dev/null || true")).splitlines()
              if ln.strip() and ln.strip() != s.node.name]
    owner = s.marker.get("node")
    # the marker of a deploy before this file took a [fleet] name names its host:/path
    if not others and owner not in (None, s.node.name) and s.marker.get("fleet") in fleet_ids \
            and owner in fleet_nodes:
        others = [str(owner)]
    if others:
        raise DeployError(s.node.name, "home", f"{s.home} is also the home of node {', '.join(sorted(others))} "
                                               f"(one NFS home, or two names for one host): give each node its "
                                               f"own `home` in the fleet file")


async def _install(s: _Session, wheel: Path, jobs: list[JobSpec], fleet_id: str, step: Step,
                   envs: Sequence[EnvSpec] = (), timeout: float = 600.0) -> Deployed:
    node, run = s.node, s.run
    dist = f"{s.home}/dist"
    target = f"{dist}/{wheel.name}"
    await run("mkdir", f"mkdir -p {shlex.quote(dist)}")
    step(node.name, f"copying {wheel.name} ({wheel.stat().st_size / 1e6:.1f} MB) to {dist}")
    try:
        async with s.conn.start_sftp_client() as sftp:
            # a temporary name, then a rename: a half-copied wheel never has the real name (and a
            # home shared with this machine never sees its own wheel truncated)
            partial = f"{dist}/.{wheel.name}.{node.name}.partial"
            await sftp.put(str(wheel), partial)
            try:
                await sftp.posix_rename(partial, target)
            except asyncssh.SFTPOpUnsupported:  # not OpenSSH's sftp-server: plain rename, no overwrite
                if await sftp.exists(target):
                    await sftp.remove(target)
                await sftp.rename(partial, target)
    except (asyncssh.Error, OSError) as exc:
        raise DeployError(node.name, "sftp", f"cannot copy {wheel.name} to {target}: "
                                             f"{getattr(exc, 'reason', None) or exc}") from None
    extras = extras_for(jobs)
    reqs = node_requirements(wheel, extras)
    modules = list(NODE_IMPORTS) + [n.module for j in jobs if not j.python
                                    for n in needed_modules(j) if not n.engine and n.module not in NODE_IMPORTS]
    script = _INSTALL.format(
        python=_shell_path(node.python or "python3"), venv=shlex.quote(s.venv), wheel=shlex.quote(target),
        digest=shlex.quote(wheel_digest(wheel)),
        layer=shlex.quote(_LAYER), find=shlex.quote(_FIND),
        modules=" ".join(sorted(set(modules))), requirements=" ".join(shlex.quote(r) for r in reqs),
        names=", ".join(list(NODE_DISTRIBUTIONS) + [f"gpudeck[{e}]" for e in extras]))
    with_extras = f" and the extras its jobs need ({', '.join(extras)})" if extras else ""
    step(node.name, f"installing into {s.venv}{with_extras} (pip; offline when the dependencies are there)")
    locked = f"{_shell_path(node.python or 'python3')} -c {shlex.quote(_LOCKED)} " \
             f"{shlex.quote(s.home + '/deploy.lock')} {shlex.quote(script)}"
    out = await run("pip install", locked)
    step(node.name, "handshake: the venv's python imports gpudeck.agents")
    facts = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if facts.get("version") != wheel_version(wheel):
        raise DeployError(node.name, "check", f"the venv's python imports agents {facts.get('version')}, "
                                              f"not {wheel_version(wheel)}")
    python = facts.get("python", f"{s.venv}/bin/python")
    marker = json.dumps({"node": node.name, "fleet": fleet_id, "machine": s.machine})
    await run("marker", f"printf '%s\\n' {shlex.quote(marker)} > {shlex.quote(s.home + '/' + MARKER)}")
    built: list[str] = []
    problems: list[str] = []
    if envs:  # the engine environments its jobs name, under the same lock (deploy_envs.py)
        def locked_env(command: str) -> str:
            return f"{_shell_path(node.python or 'python3')} -c {shlex.quote(_LOCKED)} " \
                   f"{shlex.quote(s.home + '/deploy.lock')} {shlex.quote(command)}"
        results = await build_envs(s.conn, locked_env, _shell_path(node.python or "python3"), s.home, list(envs),
                                   node.name, step, max(timeout, 3600.0))
        built = [r.line for r in results]
        problems += [r.line for r in results if r.event == "failed"]
    problems += await _check_jobs(run, jobs, python, s.home)
    return Deployed(node.name, facts["version"], s.venv, python, facts.get("deps", "?"),
                    time.monotonic() - s.t0, tuple(problems), tuple(built))


async def _check_jobs(run: Callable[[str, str], Any], jobs: list[JobSpec], venv_python: str,
                      home: str = "") -> list[str]:
    """Each job's interpreter finds what its kind needs (an engine kind its engine): one line
    per job that would fail at launch, naming the fix."""
    problems = []
    for job in jobs:
        needs = needed_modules(job)
        if not needs:
            continue
        python = f"{home}/{ENVS_DIR}/{job.python_env}/bin/python" if job.python_env else job.python or venv_python
        try:
            await run("check", f"{_shell_path(python)} -c {shlex.quote(_FIND)} "
                               + " ".join(n.module for n in needs))
        except DeployError as exc:
            gone = set(str(exc).split()) & {n.module for n in needs}
            if not gone and job.python_env:  # its env's build failed (said above) and there is no older one
                problems.append(f"job {job.name!r} (kind {job.kind.value}): its python_env {job.python_env!r} is "
                                f"not built on this node ({python} does not run): launch refuses it until a "
                                f"deploy builds the env")
            elif not gone:
                why = str(exc).rsplit(": ", 1)[-1]
                problems.append(broken_python_line(python, why, job.name, job.kind.value))
            problems += [fix_line(n, python, job.name, job.kind.value) for n in needs if n.module in gone]
    return problems


async def deploy_node(transport: SshTransport, node: Node, wheel: Path, timeout: float = 600.0,
                      on_step: Optional[Step] = None, jobs: Sequence[JobSpec] = ()) -> Deployed:
    """One node alone (no other node of a run to compare homes with)."""
    step = on_step or (lambda _node, _what: None)
    run_id = uuid.uuid4().hex[:12]
    s = await _open(transport, node, run_id, timeout, step)
    await _check_home(s, run_id, (), set())
    return await _install(s, wheel, list(jobs), "", step, timeout=timeout)


# ---------------------------------------------------------------- many nodes


async def deploy(nodes: Sequence[Node], transport: SshTransport, wheel: Optional[Path] = None,
                 timeout: float = 600.0,
                 on_result: Optional[Callable[[Union[Deployed, AgentError]], None]] = None,
                 on_step: Optional[Step] = None, fleet: Optional[Fleet] = None) -> list[Union[Deployed, AgentError]]:
    """Every node at once; one failure never stops the others. Three rounds: every node is
    probed, then every home is checked against the others (a shared home is refused), then
    each node installs. Returns, per node, what was installed or the typed error saying why not."""
    step = on_step or (lambda _node, _what: None)
    fleet_id = fleet.identity if fleet is not None else ""
    fleet_nodes = {n.name for n in fleet.nodes} if fleet is not None else {n.name for n in nodes}
    run_id = uuid.uuid4().hex[:12]
    results: dict[str, Union[Deployed, AgentError]] = {}

    def failed(node: Node, exc: AgentError) -> None:
        results[node.name] = exc
        if on_result is not None:
            on_result(exc)

    if wheel is not None and wheel_version(wheel) != __version__:
        raise DeployError("local", "wheel", f"{wheel.name} is version {wheel_version(wheel)}; this console "
                                            f"is {__version__} and would refuse its agents")
    with tempfile.TemporaryDirectory(prefix="gpudeck-wheel-") as tmp:
        sessions: list[_Session] = []

        async def probe(node: Node) -> None:
            try:
                sessions.append(await _open(transport, node, run_id, timeout, step))
            except AgentError as exc:
                failed(node, exc)

        async def check(s: _Session) -> None:
            try:
                await _check_home(s, run_id, (fleet_id, fleet.source if fleet is not None else ""), fleet_nodes)
            except AgentError as exc:
                failed(s.node, exc)

        async def install(s: _Session) -> None:
            assert wheel is not None  # built below once a node answered the probe, before any install
            jobs = fleet.jobs_on(s.node.name) if fleet is not None else []
            envs = fleet.envs_on(s.node.name) if fleet is not None else []
            try:
                result: Union[Deployed, AgentError] = await _install(s, wheel, jobs, fleet_id, step, envs, timeout)
            except AgentError as exc:
                failed(s.node, exc)
                return
            results[s.node.name] = result
            if on_result is not None:
                on_result(result)

        # connect first: a wrong port or a refused key is said at once, before the wheel is built
        await asyncio.gather(*(probe(n) for n in nodes))
        if wheel is None and sessions:
            step("local", "building the gpudeck wheel")
            wheel = await build_wheel(Path(tmp))
        await asyncio.gather(*(check(s) for s in sessions))
        await asyncio.gather(*(install(s) for s in sessions if s.node.name not in results))
        await asyncio.gather(*(_unprobe(s) for s in sessions))
    return [results[n.name] for n in nodes]


async def _unprobe(s: _Session) -> None:
    try:
        await s.run("probe", f"rm -f {shlex.quote(s.probe)}")
    except AgentError:
        pass  # the node went away: its probe file is a few bytes, named for this run only


# what this module named before deploy_wheel.py took the wheel (importers of deploy keep them)
__all__ = ["MARKER", "NODE_DISTRIBUTIONS", "NODE_IMPORTS", "PACKAGE_DIRS", "PROJECT_ROOT", "DeployError", "Deployed",
           "Step", "build_failure", "build_requirements", "build_wheel", "deploy", "deploy_node", "node_requirements",
           "wheel_digest", "wheel_from_installed", "wheel_version"]
