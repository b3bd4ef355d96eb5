"""Engine environments on a node set up from nothing: a real sshd whose sessions get a home of
their own, a bare ``python3`` and a local wheelhouse as their only package index (offline, as
deploy is). `gpudeck deploy` builds the fleet's ``[[envs]]`` table into its own venv; a job with
``python_env`` runs in it; a second deploy with the table unchanged does not build it again; a
changed table is built beside the old build and swapped in; a build that fails names the package
and pip's line and leaves the old build in use; `gpudeck doctor` gives the env's versions."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from gpudeck.agents.contract.envs import EnvSpec
from support.nodes import WHEELHOUSE, Laptop
from support.wait import wait_for

pytestmark = [pytest.mark.system,
              pytest.mark.skipif(not (WHEELHOUSE / ".done").exists(),
                                 reason=f"no wheelhouse at {WHEELHOUSE}: `make test` downloads it")]


def _idna() -> str:
    """The idna of the wheelhouse (httpx's dependency, downloaded at its newest by `make test`)."""
    wheels = sorted(WHEELHOUSE.glob("idna-*.whl"),
                    key=lambda w: [int(x) for x in w.name.split("-")[1].split(".") if x.isdigit()])
    return wheels[-1].name.split("-")[1] if wheels else "0"


IDNA = _idna()
PROBE = "python -c 'import idna, sys; print(\"in env\", sys.prefix, idna.__version__)'"


def fleet(packages: list[str]) -> str:
    return textwrap.dedent(f'''
        [defaults]
        host_keys = "accept-new"

        [[nodes]]
        name = "gpu1"

        [[envs]]
        name = "light"
        packages = {json.dumps(packages)}
        setup = ["python -c 'import idna' && echo set up > $VIRTUAL_ENV/setup-ran"]

        [[jobs]]
        name = "probe"
        node = "gpu1"
        python_env = "light"
        command = "{PROBE.replace('"', chr(92) + '"')}"
    ''')


@pytest.fixture
def node(tmp_path):
    laptop = Laptop(tmp_path, {"gpu1": tmp_path / "gpu1-home"})
    yield laptop
    laptop.stop()


def _job(laptop: Laptop, name: str) -> dict:
    doc = json.loads(laptop.gpudeck("gpudeck status --json -f fleet.toml").stdout)
    return next(j for j in doc["jobs"] if j["name"] == name)


def test_deploy_builds_an_env_offline_and_a_job_runs_in_it(node, tmp_path):
    laptop = node
    envs = tmp_path / "gpu1-home" / ".gpudeck" / "envs"
    (laptop.dir / "fleet.toml").write_text(fleet([f"idna=={IDNA}"]))
    first = EnvSpec("light", [f"idna=={IDNA}"], setup=["python -c 'import idna' && echo set up > $VIRTUAL_ENV/setup-ran"])

    r = laptop.gpudeck("gpudeck deploy -f fleet.toml")
    assert f"gpu1: env light: built {envs / first.build_name}" in r.stdout, r.stdout + r.stderr
    assert "env light: 1 package(s) collected" in r.stdout  # its progress, as pip went
    assert os.path.realpath(envs / "light") == str(envs / first.build_name)
    assert (envs / first.build_name / "setup-ran").read_text() == "set up\n"  # in the venv, after the install

    laptop.gpudeck("gpudeck launch probe -f fleet.toml")
    job = wait_for(lambda: (j := _job(laptop, "probe"))["state"] in ("exited", "failed") and j, 60,
                   what="the probe job ended")
    log = (tmp_path / "gpu1-home" / ".gpudeck" / "jobs" / "probe" / "job.log").read_text()
    assert job["state"] == "exited" and f"in env {envs / first.build_name} {IDNA}" in log, log

    # unchanged: not built again, and the same gpudeck wheel not installed again
    stamp = (envs / first.build_name / ".gpudeck-env.json").stat().st_mtime_ns
    r = laptop.gpudeck("gpudeck deploy -f fleet.toml")
    assert f"env light: unchanged ({first.key}): not rebuilt" in r.stdout and "built" not in r.stdout.replace(
        "not rebuilt", ""), r.stdout
    assert "this same wheel was installed there already: not reinstalled" in r.stdout, r.stdout
    assert (envs / first.build_name / ".gpudeck-env.json").stat().st_mtime_ns == stamp

    # changed: built beside the old one, then swapped in; doctor gives the versions
    (laptop.dir / "fleet.toml").write_text(fleet([f"idna=={IDNA}", "certifi"]).replace(
        'setup = ["python -c \'import idna\' && echo set up > $VIRTUAL_ENV/setup-ran"]', ""))
    second = EnvSpec("light", [f"idna=={IDNA}", "certifi"])
    r = laptop.gpudeck("gpudeck deploy -f fleet.toml")
    assert f"env light: built {envs / second.build_name}" in r.stdout, r.stdout + r.stderr
    assert (envs / first.build_name).is_dir() and os.path.realpath(envs / "light") == str(envs / second.build_name)
    report = json.loads(laptop.gpudeck("gpudeck doctor -f fleet.toml --json", check=False).stdout)
    [env] = [c for n in report["nodes"] for c in n["checks"] if c["name"] == "env"]
    assert env["verdict"] == "ok" and f"idna {IDNA}" in env["detail"] and "certifi 20" in env["detail"], env

    # a build that fails names the package and pip's line; the old build stays in use
    (laptop.dir / "fleet.toml").write_text(fleet([f"idna=={IDNA}", "no-such-package-gpudeck==1.0"]))
    r = laptop.gpudeck("gpudeck deploy -f fleet.toml", check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(ln for ln in r.stderr.splitlines() if "env light" in ln)
    assert "no-such-package-gpudeck==1.0" in line and "ERROR:" in line and "old build stays in use" in line, line
    assert os.path.realpath(envs / "light") == str(envs / second.build_name)
    assert sorted(p.name for p in envs.iterdir() if not p.is_symlink()) == sorted([first.build_name,
                                                                                  second.build_name])


def test_deploy_connects_before_it_builds_anything(tmp_path):
    """A wrong port is said at once: no wheel is built for a node that cannot be reached."""
    from support.cli import gpudeck
    from support.core import free_port

    fleet_path = tmp_path / "fleet.toml"
    fleet_path.write_text(f'[[nodes]]\nname = "gpu1"\nhost = "127.0.0.1"\nport = {free_port()}\n'
                          f'connect_timeout = 3\n')
    r = gpudeck("deploy", "-f", str(fleet_path), check=False)
    assert r.returncode == 1 and "FAILED" in r.stderr and "refused" in r.stderr.lower(), r.stdout + r.stderr
    assert "building the gpudeck wheel" not in r.stdout, r.stdout
