"""The engine environments of a node's jobs, built by `gpudeck deploy` (agents/contract/envs.py
says where and how they are kept).

A script runs on the node with its python, under deploy's lock (two deploys to one node take
turns). For each env it prints JSON lines as it goes, which the console turns into the node's
progress (packages, and bytes where pip gives them) and a line per env: ``unchanged`` (its
build for this table is there: nothing is done), ``built`` (a new build, beside the old one,
and the link swapped to it), or ``failed`` (pip's own error line and the package it names; the
link, and so the env jobs start with, stays the old build's). A build uses the node's own
package index settings (pip.conf, ``PIP_*``): offline from a wheelhouse where the node has one.
The builds of a name beyond the last two are removed, except one a live process runs in."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..agents.contract.envs import ENV_DOC, ENVS_DIR, EnvSpec
from ..agents.contract.units import human_bytes

KEEP = 2  # builds of a name kept: the current one and the one before

# argv[1]: the node's home; argv[2]: the envs as JSON. Prints one JSON object a line.
_BUILD = r'''
import json, os, re, shutil, subprocess, sys, time
home, envs = sys.argv[1], json.loads(sys.argv[2])
root = os.path.join(home, "%(envs_dir)s")
os.makedirs(root, exist_ok=True)
DOC = "%(doc)s"

def say(**kw):
    print(json.dumps(kw), flush=True)

def in_use(build):
    """A live process of this user runs in the build (its VIRTUAL_ENV, as the agent sets it)."""
    want = ("VIRTUAL_ENV=" + build).encode()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%%s/environ" %% pid, "rb") as f:
                    if want in f.read().split(b"\0"):
                        return True
            except OSError:
                pass
    return False

def size(text):
    m = re.search(r"\(([\d.]+) (kB|MB|GB)\)", text)
    return float(m.group(1)) * {"kB": 1e3, "MB": 1e6, "GB": 1e9}[m.group(2)] if m else 0.0

def pip_error(lines):
    errors = [l.strip() for l in lines if l.strip().startswith("ERROR:")]
    line = errors[-1] if errors else (lines[-1].strip() if lines else "pip said nothing")
    m = (re.search(r"(?:requirement|found for|building wheel for|Failed to build) ([^\s;,()]+)", line)
         or re.search(r"(?:requirement|found for|building wheel for|Failed to build) ([^\s;,()]+)", " ".join(errors)))
    return line, (m.group(1) if m else None)

def build(env):
    name, key = env["name"], env["key"]
    link = os.path.join(root, name)
    target = os.path.join(root, name + "-" + key)
    if os.path.exists(os.path.join(target, DOC)) and os.path.exists(os.path.join(target, "bin", "python")):
        if os.path.realpath(link) != os.path.realpath(target):
            swap(link, target)
        say(env=name, event="unchanged", key=key, build=target)
        return
    if os.path.lexists(target):  # a build that failed or was cut short: never used, made again
        shutil.rmtree(target, ignore_errors=True)
    t0 = time.time()
    base = env.get("python") or sys.executable
    r = subprocess.run([base, "-m", "venv", target], capture_output=True, text=True)
    if r.returncode != 0:  # no ensurepip (a Debian python without python3-venv): a venv without pip
        shutil.rmtree(target, ignore_errors=True)
        r = subprocess.run([base, "-m", "venv", "--without-pip", target], capture_output=True, text=True)
        if r.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            tail = (r.stderr or r.stdout).strip().splitlines()
            say(env=name, event="failed", key=key, line=base + " -m venv: " + (tail[-1] if tail else "exit %%d" %% r.returncode))
            return
    vpy = os.path.join(target, "bin", "python")
    if subprocess.run([vpy, "-m", "pip", "--version"], capture_output=True).returncode == 0:
        pip = [vpy, "-m", "pip"]
    else:  # the venv has no pip: the base python's pip installs into it
        pip = [base, "-m", "pip", "--python", vpy]
    cmd = pip + ["install", "--disable-pip-version-check", "--progress-bar", "off"] + env["pip_args"] + env["packages"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    seen, count, got = [], 0, 0.0
    for line in proc.stdout:
        seen = (seen + [line])[-40:]
        s = line.strip()
        if s.startswith(("Collecting ", "Processing ")):
            count += 1
            got += size(s)
            say(env=name, event="progress", packages=count, bytes=got, what=s.split()[1])
        elif s.startswith(("Downloading ", "Using cached ")):
            got += size(s)
            say(env=name, event="progress", packages=count, bytes=got, what=s.split()[1])
        elif s.startswith("Installing collected packages:"):
            say(env=name, event="installing", packages=len(s.split(":", 1)[1].split(",")), bytes=got)
    if proc.wait() != 0:
        line, package = pip_error(seen)
        shutil.rmtree(target, ignore_errors=True)
        say(env=name, event="failed", key=key, line=line, package=package)
        return
    venv_env = dict(os.environ, VIRTUAL_ENV=target, PATH=os.path.join(target, "bin") + os.pathsep + os.environ.get("PATH", ""))
    for command in env["setup"]:
        say(env=name, event="setup", what=command)
        r = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=venv_env, cwd=target)
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()
            shutil.rmtree(target, ignore_errors=True)
            say(env=name, event="failed", key=key, line="setup %%r exited %%d: %%s" %% (command, r.returncode, tail[-1] if tail else ""))
            return
    doc = dict(env, built_at=time.time(), seconds=round(time.time() - t0, 1))
    with open(os.path.join(target, DOC + ".tmp"), "w") as f:
        json.dump(doc, f)
    os.replace(os.path.join(target, DOC + ".tmp"), os.path.join(target, DOC))
    swap(link, target)
    say(env=name, event="built", key=key, build=target, seconds=doc["seconds"], packages=count, bytes=got)

def swap(link, target):
    tmp = link + ".swap"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.basename(target), tmp)
    os.replace(tmp, link)

def prune(name):
    link = os.path.realpath(os.path.join(root, name))
    builds = []
    for entry in os.listdir(root):
        path = os.path.join(root, entry)
        if entry.startswith(name + "-") and re.fullmatch(r"[0-9a-f]{12}", entry[len(name) + 1:]) and os.path.isdir(path) \
                and not os.path.islink(path):
            builds.append((os.path.getmtime(path), path))
    builds.sort(reverse=True)
    kept = [p for _, p in builds if p == link] + [p for _, p in builds if p != link]
    for path in kept[%(keep)d:]:
        if in_use(path):
            say(env=name, event="kept", build=path, why="a live process runs in it")
            continue
        shutil.rmtree(path, ignore_errors=True)
        say(env=name, event="removed", build=path)

for env in envs:
    build(env)
    prune(env["name"])
''' % {"envs_dir": ENVS_DIR, "doc": ENV_DOC, "keep": KEEP}


@dataclass(frozen=True)
class EnvResult:
    env: str
    event: str  # unchanged | built | failed
    line: str  # the sentence for the operator


def build_command(python: str, home: str, envs: list[EnvSpec]) -> str:
    return f"{python} -c {shlex.quote(_BUILD)} {shlex.quote(home)} {shlex.quote(json.dumps([e.to_dict() for e in envs]))}"


def progress_text(ev: dict[str, Any]) -> Optional[str]:
    """The node's progress line for one event of the build, or None."""
    name = ev.get("env")
    if ev.get("event") == "progress":
        got = f", {human_bytes(ev['bytes'])}" if ev.get("bytes") else ""
        return f"env {name}: {ev.get('packages')} package(s) collected{got} ({ev.get('what')})"
    if ev.get("event") == "installing":
        return f"env {name}: installing {ev.get('packages')} package(s)"
    if ev.get("event") == "setup":
        return f"env {name}: setup: {ev.get('what')}"
    if ev.get("event") == "removed":
        return f"env {name}: removed an old build, {ev.get('build')}"
    return None


def result_of(ev: dict[str, Any]) -> Optional[EnvResult]:
    name, event = str(ev.get("env")), ev.get("event")
    if event == "unchanged":
        return EnvResult(name, "unchanged", f"env {name}: unchanged ({ev.get('key')}): not rebuilt")
    if event == "built":
        return EnvResult(name, "built", f"env {name}: built {ev.get('build')} in {ev.get('seconds')} s "
                                        f"({ev.get('packages')} package(s)); jobs launched from now on use it")
    if event == "failed":
        pkg = f" {ev['package']}" if ev.get("package") else ""
        return EnvResult(name, "failed", f"env {name}: the build failed, installing{pkg or ' its packages'}: "
                                         f"{ev.get('line')}; the old build stays in use (if any)")
    return None


async def build_envs(conn: Any, locked: Callable[[str], str], python: str, home: str, envs: list[EnvSpec],
                     node: str, step: Callable[[str, str], None], timeout: float) -> list[EnvResult]:
    """Build ``envs`` on the node of ``conn`` (``locked`` wraps a command in deploy's lock);
    each event streamed to ``step``; one result per env."""
    import asyncio

    results: list[EnvResult] = []
    step(node, f"building {len(envs)} env(s): {', '.join(e.name for e in envs)} (pip; the node's own index)")
    proc = await conn.create_process(locked(build_command(python, home, envs)))
    tail: list[str] = []
    try:
        async def read() -> None:
            async for line in proc.stdout:
                try:
                    ev = json.loads(line)
                except ValueError:
                    tail.append(line.strip())
                    continue
                text = progress_text(ev)
                if text:
                    step(node, text)
                r = result_of(ev)
                if r is not None:
                    results.append(r)
                    step(node, r.line)
        await asyncio.wait_for(read(), timeout)
        await asyncio.wait_for(proc.wait(), 30)
    except asyncio.TimeoutError:
        proc.kill()
        results += [EnvResult(e.name, "failed", f"env {e.name}: no end of its build within {timeout:g} s")
                    for e in envs if not any(r.env == e.name for r in results)]
    stderr = (await proc.stderr.read()) if proc.exit_status not in (0, None) else ""
    for e in envs:
        if not any(r.env == e.name for r in results):
            why = (str(stderr).strip().splitlines() or tail or ["no word from the build"])[-1]
            results.append(EnvResult(e.name, "failed", f"env {e.name}: the build stopped: {why}"))
    return results
