"""The README's quickstart, followed word for word on two real sshd nodes set up from nothing.

Each node is a real sshd on loopback whose sessions get a home of their own and a bare
``python3`` (a fresh venv: nothing installed) through ``SetEnv``, and whose package index is
a local wheelhouse (``make test`` downloads it; PIP_NO_INDEX + PIP_FIND_LINKS), as a real
node has its index. The laptop side has its own HOME with ``~/.ssh/config`` naming the nodes
``gpu1`` and ``gpu2``. The fleet file is the README's, with only the placeholders the README
says are yours replaced: the python that has SGLang (here a stand-in ``sglang`` module that
serves gpudeck's simulated engine), the model, the port and the prompts.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import textwrap

import pytest

from support import ROOT
from support.core import free_port
from support.nodes import WHEELHOUSE, Laptop
from support.tmux import Tmux
from support.wait import wait_for

pytestmark = [pytest.mark.system,
              pytest.mark.skipif(not (WHEELHOUSE / ".done").exists(),
                                 reason=f"no wheelhouse at {WHEELHOUSE}: `make test` downloads it")]


def quickstart() -> tuple[str, list[str]]:
    """The README's quickstart: its fleet.toml and the commands it says to run, in order."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Quickstart"):]
    section = section[:section.index("\n## ", 1)]
    toml = textwrap.dedent(re.search(r"```toml\n(.*?)```", section, re.S).group(1))
    commands = re.findall(r"`(gpudeck [^`]*-f fleet\.toml[^`]*)`", section)
    return toml, commands


STANDIN = '''
"""A stand-in for SGLang's launch_server: gpudeck's simulated engine on the same flags, run by
the python gpudeck's deploy made on the node (the env itself holds only this stand-in)."""
import argparse, os, sys
p = argparse.ArgumentParser()
p.add_argument("--model-path"); p.add_argument("--host"); p.add_argument("--port")
p.add_argument("--enable-metrics", action="store_true")
a, _ = p.parse_known_args()
assert os.path.isfile(os.path.join(a.model_path, "config.json")), "the staged model is not there"
os.execv(GPUDECK_PYTHON, [GPUDECK_PYTHON, "-m", "gpudeck.console", "sim-engine", "--port", a.port])
'''


def standin_wheel(tmp_path, gpudeck_python: str) -> str:
    """A wheel of a package named sglang holding the stand-in: the light env the quickstart's
    `[[envs]]` table builds here instead of SGLang, from a local file (the nodes are offline)."""
    import subprocess

    project = tmp_path / "standin"
    (project / "sglang").mkdir(parents=True)
    (project / "sglang" / "__init__.py").write_text("")
    (project / "sglang" / "launch_server.py").write_text(f"GPUDECK_PYTHON = {gpudeck_python!r}\n" + STANDIN)
    (project / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.0.1"\n'
                                            '[build-system]\nrequires = ["setuptools"]\n'
                                            'build-backend = "setuptools.build_meta"\n')
    out = tmp_path / "standin-wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
                    str(out), str(project)], check=True, capture_output=True, timeout=120)
    return str(next(out.glob("sglang-*.whl")))


@pytest.fixture
def two_nodes(tmp_path):
    laptop = Laptop(tmp_path, {"gpu1": tmp_path / "gpu1-home", "gpu2": tmp_path / "gpu2-home"})
    yield laptop
    laptop.gpudeck("gpudeck kill gen -f fleet.toml --grace 1", check=False, timeout=60)
    laptop.gpudeck("gpudeck kill sglang-0 -f fleet.toml --grace 1", check=False, timeout=60)
    laptop.stop()


def _job(laptop: Laptop, name: str) -> dict:
    doc = json.loads(laptop.gpudeck("gpudeck status --json -f fleet.toml").stdout)
    return next(j for j in doc["jobs"] if j["name"] == name)


def test_the_readme_quickstart_word_for_word_on_freshly_deployed_nodes(two_nodes, tmp_path):
    laptop = two_nodes
    toml, commands = quickstart()
    assert commands[:3] == ["gpudeck deploy -f fleet.toml", "gpudeck status -f fleet.toml", "gpudeck up -f fleet.toml"]
    # the placeholders the README says are the user's own: the model (a small one, staged to a
    # folder of this test's instead of /dev/shm), SGLang (a light env: a stand-in, from a local
    # wheel), the port and the prompts
    home = tmp_path / "gpu1-home" / ".gpudeck"
    wheel = standin_wheel(tmp_path, str(home / "venv" / "bin" / "python"))
    model = tmp_path / "models" / "Qwen3-8B"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"num_hidden_layers": 2}')
    (model / "model.safetensors").write_bytes(os.urandom(2_000_000))
    fast = tmp_path / "fast" / "Qwen3-8B"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(6)))
    port = free_port()
    for placeholder, mine in (('packages = ["sglang[all]"]', f'packages = ["{wheel}"]'),
                              ("/dev/shm/Qwen3-8B", str(fast)), ("/models/Qwen3-8B", str(model)),
                              ("30000", str(port)), ("/data/prompts.jsonl", str(prompts)),
                              ("/data/gen", str(tmp_path / "gen-out"))):
        assert placeholder in toml
        toml = toml.replace(placeholder, mine)
    (laptop.dir / "fleet.toml").write_text(toml)

    # 3. deploy: from a bare python3, the node's index gives the agent and the generate worker
    # what they need; the engine's env is built; the engine job's python is checked
    r = laptop.gpudeck("gpudeck deploy -f fleet.toml")
    assert "deployed gpudeck to 2 of 2 node(s)" in r.stdout and "problem" not in r.stdout, r.stdout + r.stderr
    assert "dependencies installed from the node's package index" in r.stdout
    assert f"gpu1: env sglang: built {home / 'envs' / 'sglang-'}" in r.stdout, r.stdout
    assert "env sglang: unchanged" in laptop.gpudeck("gpudeck deploy -f fleet.toml gpu1").stdout
    # 4. status: both nodes, the jobs not started
    r = laptop.gpudeck("gpudeck status -f fleet.toml")
    for word in ("gpu1", "gpu2", "sglang-0", "gen", "not started"):
        assert word in r.stdout, r.stdout
    # 5. the console, in a real terminal: `2` for jobs, `L` to launch sglang-0 (it asks first)
    tmux = Tmux(f"gpudeck-quickstart-{os.getpid()}", "up")
    try:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in laptop.env().items() if k in ("HOME", "XDG_STATE_HOME",
                                                                                           "PATH"))
        tmux("new-session", "-d", "-s", "up", "-x", "120", "-y", "40", "-c", str(laptop.dir),
             f"env {env} {laptop.exe} up -f fleet.toml")
        tmux.wait(lambda s: "gpu1" in s and "gpu2" in s, "the console on both nodes", timeout=120)
        tmux.press_until("2", lambda s: re.search(r"^JOB\W", s, re.M), "the jobs view")
        # the filter: the cursor on sglang-0's row whatever the order
        tmux.press_until("/", lambda s: "Close filter" in s, "the filter bar open")
        # the rows filter as it is typed: Enter only once they have (on a busy machine the filter
        # can lag the keys, and an Enter before it would open the details of the row then first)
        tmux.keys("sglang")
        tmux.wait(lambda s: re.search(r"^sglang-0 ", s, re.M) and not re.search(r"^gen ", s, re.M),
                  "the jobs filtered to sglang-0")
        tmux.keys("Enter")  # the table takes the keys again once the footer no longer offers to close the bar
        tmux.wait(lambda s: "Close filter" not in s and re.search(r"^sglang-0 ", s, re.M)
                  and not re.search(r"^gen ", s, re.M), "the filter bar let go of the keys, on sglang-0")
        tmux.press_until("L", lambda s: "Launch job sglang-0" in s, "the launch question")
        tmux.press_until("y", lambda s: "Launch job sglang-0" not in s, "the question answered")
        tmux.wait(lambda s: re.search(r"^sglang-0 .*\b(ready|running|starting)\b", s, re.M), "sglang-0 launched",
                  timeout=120)
        tmux.keys("q")
    finally:
        tmux("kill-server")
    wait_for(lambda: (_job(laptop, "sglang-0").get("engine") or {}).get("state") == "ready", 120,
             what="the engine ready")
    log = (tmp_path / "gpu1-home" / ".gpudeck" / "jobs" / "sglang-0" / "job.log").read_text()
    assert re.search(re.escape(str(home / "envs")) + r"/sglang-[0-9a-f]{12}/bin/python -m sglang\.launch_server "
                     r"--model-path " + re.escape(str(fast)) + " ", log.splitlines()[0]), log  # what ran
    assert (fast / "model.safetensors").read_bytes() == (model / "model.safetensors").read_bytes()  # staged
    laptop.gpudeck("gpudeck launch gen -f fleet.toml")  # the README's shell form of the second launch
    gen = wait_for(lambda: (j := _job(laptop, "gen"))["state"] in ("exited", "failed") and j, 180,
                   what="the generate job ended")
    text = (tmp_path / "gpu1-home" / ".gpudeck" / "jobs" / "gen" / "job.log").read_text()
    assert gen["state"] == "exited" and gen["done"] == 6, text[-3000:]
    assert "/.gpudeck/venv/bin/python -m gpudeck.agents.workers.generate" in text.splitlines()[0]
    r = laptop.gpudeck("gpudeck kill sglang-0 -f fleet.toml --grace 2")
    assert "killed" in r.stdout.lower() or "ok" in r.stdout.lower(), r.stdout


def test_an_engine_python_without_its_engine_is_named_at_deploy_with_its_fix(two_nodes, tmp_path):
    laptop = two_nodes
    toml, _ = quickstart()
    bare = tmp_path / "node-python" / "bin" / "python3"  # runs, but has no router
    toml += f'\n[[jobs]]\nname = "router"\nnode = "gpu2"\nkind = "router"\nport = 30100\npython = "{bare}"\n' \
            f'workers = ["sglang-0"]\n'
    (laptop.dir / "fleet.toml").write_text(toml)  # sglang[all]: not in the nodes' (offline) index
    r = laptop.gpudeck("gpudeck deploy -f fleet.toml", check=False)
    assert r.returncode == 1 and "deployed gpudeck to 2 of 2 node(s)" in r.stdout, r.stdout + r.stderr
    line = next(ln for ln in r.stderr.splitlines() if "env sglang" in ln)  # pip's own line, the package named
    assert line.startswith("gpu1: env sglang: the build failed, installing sglang[all]: ERROR: "), r.stderr
    line = next(ln for ln in r.stderr.splitlines() if "'sglang-0'" in ln)
    assert "its python_env 'sglang' is not built on this node" in line, r.stderr
    line = next(ln for ln in r.stderr.splitlines() if "'router'" in ln)
    assert line.startswith("gpu2: ") and f"{bare} cannot import sglang_router" in line, r.stderr
    assert "pip install sglang-router" in line and "3 job problem(s)" in r.stdout
    r = laptop.gpudeck("gpudeck launch sglang-0 -f fleet.toml", check=False)
    assert r.returncode != 0 and "python_env 'sglang' is not built on node gpu1" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_two_nodes_that_share_a_home_are_refused_at_deploy(tmp_path):
    shared = tmp_path / "nfs-home"
    laptop = Laptop(tmp_path, {"gpu1": shared, "gpu2": shared})
    try:
        (laptop.dir / "fleet.toml").write_text(
            '[defaults]\nhost_keys = "accept-new"\n\n[[nodes]]\nname = "gpu1"\n\n[[nodes]]\nname = "gpu2"\n')
        r = laptop.gpudeck("gpudeck deploy -f fleet.toml", check=False)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "give each node its own `home`" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (shared / ".gpudeck" / "venv").exists()  # no pip ran into the shared venv
        # one at a time: the second is refused by the first one's marker
        laptop.gpudeck("gpudeck deploy -f fleet.toml gpu1")
        r = laptop.gpudeck("gpudeck deploy -f fleet.toml gpu2", check=False)
        assert r.returncode == 1 and "also the home of node gpu1" in r.stderr, r.stdout + r.stderr
    finally:
        laptop.stop()
