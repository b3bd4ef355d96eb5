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
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shlex
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import asyncssh

from gpudeck.agents import __version__
from gpudeck.remote.fleet import Node
from gpudeck.remote.link import AgentError
from gpudeck.remote.ssh import SshTransport, _shell_path

# the distributions the agent imports on a node (the rest of the wheel's requirements serve
# the console); their version bounds are read from the wheel's own metadata
NODE_DISTRIBUTIONS = ("psutil", "httpx", "prometheus-client", "nvidia-ml-py")
NODE_IMPORTS = ("psutil", "httpx", "prometheus_client", "pynvml")
PROJECT_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = ("agents", "remote", "console")  # pyproject's [tool.setuptools.packages.find]


class DeployError(AgentError):
    """A deploy step that failed on a node (or, for node ``local``, building the wheel)."""

    def __init__(self, node: str, step: str, message: str) -> None:
        self.step = step
        super().__init__(node, f"deploy failed at {step}: {message}")


@dataclasses.dataclass(frozen=True)
class Deployed:
    node: str
    version: str
    venv: str  # absolute, on the node
    python: str  # the agent's python from now on
    deps: str  # "present" (installed --no-deps --no-index) or "installed" (from the node's index)
    seconds: float

    def describe(self) -> str:
        how = ("dependencies already there: pip --no-deps --no-index" if self.deps == "present"
               else "dependencies installed from the node's package index")
        return f"{self.node}: gpudeck {self.version} in {self.venv} ({how}) in {self.seconds:.1f} s"


# ---------------------------------------------------------------- the wheel


async def build_wheel(out_dir: Path, source: Path = PROJECT_ROOT) -> Path:
    """``pip wheel --no-deps`` of this source tree, with the build backend already installed
    here (no build isolation: nothing is downloaded)."""
    if not (source / "pyproject.toml").is_file():  # an installed copy (pip, pipx): its own files
        return wheel_from_installed(out_dir)
    # build from a copy: an in-tree build would leave build/ and egg-info in the working tree
    tree = out_dir / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    tree.mkdir()
    for entry in source.iterdir():
        if entry.name in PACKAGE_DIRS and entry.is_dir():
            shutil.copytree(entry, tree / entry.name, ignore=ignore)
        elif entry.name in ("pyproject.toml", "README.md", "LICENSE", "setup.cfg", "MANIFEST.in"):
            shutil.copy2(entry, tree / entry.name)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
        "--wheel-dir", str(out_dir), str(tree),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    wheels = sorted(out_dir.glob(f"gpudeck-{__version__}-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise DeployError("local", "build", f"pip wheel exited with {proc.returncode}: {_tail(out)}")
    return wheels[-1]


def wheel_from_installed(out_dir: Path, dist_name: str = "gpudeck") -> Path:
    """The wheel this installed copy came from, rebuilt from its files (RECORD lists them):
    the packages and the dist-info, less what pip itself wrote (RECORD, INSTALLER, direct_url)."""
    import base64
    import hashlib
    from importlib import metadata

    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise DeployError("local", "build", f"no installed {dist_name} and no source tree: pass --wheel with a "
                                            f"gpudeck {__version__} wheel") from None
    skip = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    files = [f for f in dist.files or [] if f.parts and (f.parts[0] == "gpudeck" or (
        f.parts[0].endswith(".dist-info") and f.name not in skip)) and "__pycache__" not in f.parts]
    if not any(f.parts[0] == "gpudeck" for f in files):
        raise DeployError("local", "build", f"the installed {dist_name} has no package files (an editable "
                                            f"install whose source tree moved?): pass --wheel")
    info = f"gpudeck-{dist.version}.dist-info"
    wheel = out_dir / f"gpudeck-{dist.version}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            data = Path(dist.locate_file(f)).read_bytes()
            name = "/".join((info, *f.parts[1:]) if f.parts[0].endswith(".dist-info") else f.parts)
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def wheel_version(wheel: Path) -> str:
    m = re.match(r"gpudeck-([^-]+)-", wheel.name)
    if not m:
        raise DeployError("local", "wheel", f"{wheel.name} is not a gpudeck wheel")
    return m.group(1)


def node_requirements(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist lines for the distributions a node needs."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    reqs = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            req = line.split(":", 1)[1].strip()
            name = re.split(r"[\s<>=!~;\[(]", req, 1)[0].lower().replace("_", "-")
            if name in NODE_DISTRIBUTIONS and "extra ==" not in req:
                reqs.append(req)
    return reqs


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
"$VPY" -m pip --version >/dev/null 2>&1 || "$VPY" -m ensurepip --default-pip >/dev/null
if "$VPY" -c {check} 2>/dev/null; then
  "$VPY" -m pip install --quiet --disable-pip-version-check --no-deps --no-index --force-reinstall "$WHEEL"
  echo "deps=present"
else
  "$VPY" -m pip install --quiet --disable-pip-version-check {requirements} || {{
    echo "the agent's dependencies are missing from $VPY and pip could not install them" \
         "(no package index reachable from the node?): install {names} into $PY, then deploy again" >&2
    exit 3; }}
  "$VPY" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$WHEEL"
  echo "deps=installed"
fi
"$VPY" -c 'import gpudeck.agents as a, sys; print("version=" + a.__version__); print("python=" + sys.executable)'
"""


Step = Callable[[str, str], None]  # (node, what it is doing now)


async def deploy_node(transport: SshTransport, node: Node, wheel: Path,
                      timeout: float = 600.0, on_step: Optional[Step] = None) -> Deployed:
    t0 = time.monotonic()
    step = on_step or (lambda _node, _what: None)
    step(node.name, "connecting over SSH")
    conn = await transport.connection(node)  # typed SshError: host key, auth, unreachable

    async def run(step: str, command: str) -> str:
        try:
            r = await asyncio.wait_for(conn.run(command, check=False), timeout)
        except asyncio.TimeoutError:
            raise DeployError(node.name, step, f"no end within {timeout:g} s") from None
        except (asyncssh.Error, OSError) as exc:
            raise DeployError(node.name, step, f"SSH: {getattr(exc, 'reason', None) or exc}") from None
        if r.exit_status != 0:
            raise DeployError(node.name, step, f"exit {r.exit_status}: {_tail(r.stderr or r.stdout)}")
        return str(r.stdout or "")

    remote_home = (await run("login", 'printf "%s" "$HOME"')).strip()

    def absolute(path: str) -> str:
        return remote_home + path[1:] if path == "~" or path.startswith("~/") else path

    home = absolute(node.home or "~/.gpudeck").rstrip("/")
    venv = absolute(node.agent_venv).rstrip("/")
    dist = f"{home}/dist"
    target = f"{dist}/{wheel.name}"
    await run("mkdir", f"mkdir -p {shlex.quote(dist)}")
    step(node.name, f"copying {wheel.name} ({wheel.stat().st_size / 1e6:.1f} MB) to {dist}")
    try:
        async with conn.start_sftp_client() as sftp:
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
    reqs = node_requirements(wheel)
    script = _INSTALL.format(
        python=_shell_path(node.python or "python3"), venv=shlex.quote(venv), wheel=shlex.quote(target),
        layer=shlex.quote(_LAYER), check=shlex.quote("import " + ", ".join(NODE_IMPORTS)),
        requirements=" ".join(shlex.quote(r) for r in reqs), names=", ".join(NODE_DISTRIBUTIONS))
    step(node.name, f"installing into {venv} (pip; offline when the agent's dependencies are there)")
    out = await run("pip install", "/bin/sh -c " + shlex.quote(script))
    step(node.name, "handshake: the venv's python imports gpudeck.agents")
    facts = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if facts.get("version") != wheel_version(wheel):
        raise DeployError(node.name, "check", f"the venv's python imports agents {facts.get('version')}, "
                                              f"not {wheel_version(wheel)}")
    return Deployed(node.name, facts["version"], venv, facts.get("python", f"{venv}/bin/python"),
                    facts.get("deps", "?"), time.monotonic() - t0)


# ---------------------------------------------------------------- many nodes


async def deploy(nodes: Sequence[Node], transport: SshTransport, wheel: Optional[Path] = None,
                 timeout: float = 600.0,
                 on_result: Optional[Callable[[Union[Deployed, AgentError]], None]] = None,
                 on_step: Optional[Step] = None) -> list[Union[Deployed, AgentError]]:
    """Every node at once; one failure never stops the others. Returns, per node, what was
    installed or the typed error saying why not."""
    with tempfile.TemporaryDirectory(prefix="gpudeck-wheel-") as tmp:
        if wheel is None:
            if on_step is not None:
                on_step("local", "building the gpudeck wheel")
            wheel = await build_wheel(Path(tmp))
        elif wheel_version(wheel) != __version__:
            raise DeployError("local", "wheel", f"{wheel.name} is version {wheel_version(wheel)}; this console "
                                                f"is {__version__} and would refuse its agents")

        async def one(node: Node) -> Union[Deployed, AgentError]:
            try:
                result: Union[Deployed, AgentError] = await deploy_node(transport, node, wheel, timeout, on_step)
            except AgentError as exc:
                result = exc
            if on_result is not None:
                on_result(result)
            return result

        return list(await asyncio.gather(*(one(n) for n in nodes)))


def _tail(data: Union[str, bytes, None], lines: int = 6) -> str:
    if isinstance(data, bytes):
        data = data.decode(errors="replace")
    kept = [ln for ln in (data or "").strip().splitlines() if ln.strip()][-lines:]
    return " | ".join(kept) or "(no output)"
