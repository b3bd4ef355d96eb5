"""The wheel that ``gpudeck deploy`` puts on a node (deploy.py does the rest): built once from
this source tree with ``pip wheel --no-deps`` (no build isolation: nothing is downloaded), or
rebuilt from the files of an installed copy; its version, its digest (what a node's venv
remembers, so the same wheel is never installed twice) and the requirements a node needs of
it. Here too: ``DeployError``, what every deploy step raises, and ``_tail``, how a failed
command's output is said."""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Optional, Sequence, Union

from ..agents.contract import VERSION as __version__
from .link import AgentError

# the distributions the agent imports on a node (the rest of the wheel's requirements serve
# the console); their version bounds are read from the wheel's own metadata
NODE_DISTRIBUTIONS = ("psutil", "httpx", "prometheus-client", "nvidia-ml-py", "aiohttp")
PROJECT_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = ("agents", "remote", "console")  # pyproject's [tool.setuptools.packages.find]


class DeployError(AgentError):
    """A deploy step that failed on a node (or, for node ``local``, building the wheel)."""

    def __init__(self, node: str, step: str, message: str) -> None:
        self.step = step
        super().__init__(node, f"deploy failed at {step}: {message}")



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
        raise DeployError("local", "build", f"pip wheel exited with {proc.returncode}: {build_failure(out, source)}")
    return wheels[-1]


# pip's own words around a failed build, which say that it failed but never why
_PIP_GENERIC = ("subprocess-exited-with-error", "metadata-generation-failed", "Failed building wheel",
                "Failed to build", "Could not build wheels")


def build_failure(out: Union[str, bytes, None], source: Path = PROJECT_ROOT) -> str:
    """What a failed ``pip wheel`` of this tree says about why: the build backend's own error
    line (pip boxes the backend's output and ends with a generic "metadata-generation-failed"),
    then what the build needs that this python may lack. The build runs without isolation,
    so pyproject.toml's [build-system] requires must be installed here: Python 3.11's venv has
    setuptools 65 and no wheel, and fails with "invalid command 'bdist_wheel'"."""
    text = out.decode(errors="replace") if isinstance(out, bytes) else (out or "")
    lines = [ln.strip().lstrip("│╰─>×").strip() for ln in text.splitlines()]
    why = [ln for ln in lines if re.match(r"(error|ERROR|[A-Za-z_.]*Error)\b:?", ln)
           and not any(g in ln for g in _PIP_GENERIC)]
    said = why[0] if why else _tail(text)
    needs = build_requirements(source)
    if not needs:
        return said
    have = "; ".join(f"{name} {_installed(name) or 'not installed'}" for name in
                     (re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0] for r in needs))
    fix = " ".join(shlex.quote(r) for r in needs)
    return (f"{said} (the build runs without isolation and needs {', '.join(needs)} from pyproject.toml's "
            f"[build-system] beside {sys.executable}, which has {have}: {sys.executable} -m pip install {fix}, "
            f"or pass --wheel)")


def build_requirements(source: Path = PROJECT_ROOT) -> list[str]:
    """pyproject.toml's [build-system] requires, or nothing where the tree has none."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        doc = tomllib.loads((source / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return []
    return [str(r) for r in doc.get("build-system", {}).get("requires", [])]


def _installed(name: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


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
            data = Path(str(dist.locate_file(f))).read_bytes()
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


def wheel_digest(wheel: Path) -> str:
    """What the wheel holds, as a hash: its RECORD (every file's own sha256), which a rebuild of the
    same tree repeats (the zip's own bytes do not: its entries carry the build's time)."""
    import hashlib

    with zipfile.ZipFile(wheel) as z:
        record = next((n for n in z.namelist() if n.endswith(".dist-info/RECORD")), None)
        data = z.read(record) if record else wheel.read_bytes()
    return hashlib.sha256(data).hexdigest()


def node_requirements(wheel: Path, extras: Sequence[str] = ()) -> list[str]:
    """The wheel's Requires-Dist lines for the distributions a node needs: the agent's, and
    those of ``extras`` (the fleet's jobs on the node ask for them), without their markers."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    reqs = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            req = line.split(":", 1)[1].strip()
            name = re.split(r"[\s<>=!~;\[(]", req, 1)[0].lower().replace("_", "-")
            extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", req)
            if extra is None and name in NODE_DISTRIBUTIONS:
                reqs.append(req)
            elif extra is not None and extra.group(1) in extras:
                reqs.append(req.split(";", 1)[0].strip())
    return reqs


def _tail(data: Union[str, bytes, None], lines: int = 6) -> str:
    if isinstance(data, bytes):
        data = data.decode(errors="replace")
    kept = [ln for ln in (data or "").strip().splitlines() if ln.strip()][-lines:]
    return " | ".join(kept) or "(no output)"
