"""Engine environments without a node (agents/contract/envs.py, remote/fleet_envs.py,
agents/jobs/envs.py): the `[[envs]]` table read and its mistakes said with file and line, its key
(unchanged table, same build; changed, another), a job's `python_env` resolved to the build
its name links to (and refused while it is not built), the deploy's lines from its build's
events. The real build runs in tests/e2e/test_envs.py."""

from __future__ import annotations

import os

import pytest

from gpudeck.agents.contract.envs import EnvSpec, package_names
from gpudeck.agents.contract.jobs import JobSpec
from gpudeck.agents.jobs.envs import EnvMissing, resolve
from gpudeck.remote.deploy_envs import progress_text, result_of
from gpudeck.remote.fleet import parse_fleet
from gpudeck.remote.fleet_check import FleetError

FLEET = '''
[[nodes]]
name = "gpu1"
host = "gpu1"

[[envs]]
name = "sglang"
packages = ["sglang[all]==0.5.9"]
pip_args = ["--prerelease=allow"]

[[jobs]]
name = "sg"
node = "gpu1"
kind = "sglang-server"
model = "/m"
port = 30000
python_env = "sglang"

[[jobs]]
name = "other"
node = "gpu1"
command = ["true"]
'''


def test_envs_are_read_and_each_node_builds_those_its_jobs_name():
    fleet = parse_fleet(FLEET, "fleet.toml")
    env = fleet.envs["sglang"]
    assert env.packages == ["sglang[all]==0.5.9"] and env.pip_args == ["--prerelease=allow"]
    assert fleet.envs_on("gpu1") == [env] and fleet.envs_on("local") == []
    assert fleet.job("sg").python_env == "sglang" and fleet.job("sg").python is None
    assert JobSpec.from_dict(fleet.job("sg").to_dict()) == fleet.job("sg")


def test_the_key_is_the_tables_and_only_the_tables():
    a = EnvSpec("sglang", ["sglang==0.5.9"], ["--prerelease=allow"])
    assert a.key == EnvSpec("sglang", ["sglang==0.5.9"], ["--prerelease=allow"]).key  # the name is not in it
    assert a.key == EnvSpec("renamed", ["sglang==0.5.9"], ["--prerelease=allow"]).key
    assert a.key != EnvSpec("sglang", ["sglang==0.5.10"], ["--prerelease=allow"]).key
    assert a.key != EnvSpec("sglang", ["sglang==0.5.9"]).key and a.key != EnvSpec("sglang", ["sglang==0.5.9"],
                                                                                  ["--prerelease=allow"],
                                                                                  setup=["true"]).key
    assert a.build_name == f"sglang-{a.key}" and len(a.key) == 12
    assert package_names(["sglang[all]==0.5.9", "torch>=2.8", "git+https://x/y.git", "./local.whl", "idna"]) == \
        ["sglang", "torch", "idna"]


@pytest.mark.parametrize("edit,line,said", [
    (('python_env = "sglang"', 'python_env = "sglan"'), 17, "no [[envs]] table named 'sglan' (did you mean 'sglang'?); declared: sglang"),
    (('python_env = "sglang"', 'python_env = "sglang"\npython = "/opt/py"'), 11,
     "'python' and 'python_env' both given"),
    (('packages = ["sglang[all]==0.5.9"]\n', ''), 6, "[[envs]] #1 ('sglang') needs 'packages'"),
    (('pip_args = ["--prerelease=allow"]', 'pip_args = "--prerelease=allow"'), 9,
     "[[envs]] #1 ('sglang') 'pip_args': expected a list of non-empty strings"),
    (('name = "sglang"\n', 'name = "sg lang"\n'), 7, "'name': 1 to 64 letters"),
    (('pip_args = ', 'pip = '), 9, "[[envs]] #1 ('sglang') has no key 'pip'"),
])
def test_a_wrong_env_or_python_env_is_refused_with_its_line(edit, line, said):
    text = FLEET.replace(*edit)
    with pytest.raises(FleetError) as exc:
        parse_fleet(text, "fleet.toml")
    assert str(exc.value).startswith(f"fleet.toml:{line}:") and said in str(exc.value), str(exc.value)


def test_a_job_runs_with_the_build_its_env_links_to(tmp_path):
    spec = JobSpec(name="sg", command=["python", "-c", "pass"], python_env="sglang")
    with pytest.raises(EnvMissing) as exc:
        resolve(spec, tmp_path, "/usr/bin/python3", "gpu1")
    assert "python_env 'sglang' is not built on node gpu1" in str(exc.value) and "gpudeck deploy" in str(exc.value)
    build = tmp_path / "envs" / "sglang-0123456789ab"
    (build / "bin").mkdir(parents=True)
    (build / "bin" / "python").symlink_to("/usr/bin/python3")
    (tmp_path / "envs" / "sglang").symlink_to(build.name)
    python, env = resolve(spec, tmp_path, "/usr/bin/python3")
    assert python == str(build / "bin" / "python") and env["VIRTUAL_ENV"] == str(build)
    assert env["PATH"].split(os.pathsep)[0] == str(build / "bin")
    assert resolve(JobSpec(name="x", command=["true"]), tmp_path, "/usr/bin/python3") == ("/usr/bin/python3", {})


def test_deploys_lines_from_the_builds_events():
    assert progress_text({"env": "sglang", "event": "progress", "packages": 3, "bytes": 2.1e9, "what": "torch"}) == \
        "env sglang: 3 package(s) collected, 2.1 GB (torch)"
    assert result_of({"env": "sglang", "event": "unchanged", "key": "abc"}).line == \
        "env sglang: unchanged (abc): not rebuilt"
    failed = result_of({"env": "sglang", "event": "failed", "package": "nosuch==1.0",
                        "line": "ERROR: No matching distribution found for nosuch==1.0"})
    assert failed.event == "failed" and failed.line == (
        "env sglang: the build failed, installing nosuch==1.0: ERROR: No matching distribution found for "
        "nosuch==1.0; the old build stays in use (if any)")


def test_a_cluster_job_is_refused_an_env_saying_why():
    text = FLEET + '''
[[clusters]]
name = "hpc"
shared_dir = "/shared/gd"

[[jobs]]
name = "task"
cluster = "hpc"
command = ["true"]
python_env = "sglang"
'''
    with pytest.raises(FleetError) as exc:
        parse_fleet(text, "fleet.toml")
    assert "'python_env' is for a node's job: deploy does not build envs in a cluster's shared_dir yet" in \
        str(exc.value), str(exc.value)
