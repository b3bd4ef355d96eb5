"""What a newcomer's first real node found (issue 19): a string command means what a shell
means, relaunch after an edit says what changed, an engine's interpreter is checked before
the launch, and two fleet files on one home keep their own jobs."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from support.cli import gpudeck
from support.wait import wait_for

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("reap_jobs")]


# ---------------------------------------------------------------- a command string (item 4)


def _ended(a, name):
    return a.wait_snapshot(lambda s: a.job(s, name)["state"] in ("exited", "failed"), what=f"{name} ended")


def test_a_command_string_runs_with_sh_c_and_a_list_runs_as_it_is(start_agent, home, tmp_path):
    a = start_agent()
    out = tmp_path / "out.txt"
    a.ok("configure", jobs=[
        {"name": "exits-3", "command": "sleep 0.1; exit 3"},
        {"name": "shell", "command": f"cd {tmp_path} && echo \"$GPUDECK_JOB:$((2 + 3))\" | tr a-z A-Z > out.txt"},
        {"name": "plain", "command": "echo plain words"},
        {"name": "listed", "command": ["echo", "a;", "$HOME"]},  # a list: no shell, every word as it is
    ])
    for name in ("exits-3", "shell", "plain", "listed"):
        a.ok("launch", job=name)
    assert a.job(_ended(a, "exits-3"), "exits-3")["exit_code"] == 3  # not `sleep '0.1;' exit 3`
    assert a.job(_ended(a, "shell"), "shell")["exit_code"] == 0
    assert out.read_text() == "SHELL:5\n"  # cd, &&, a pipe, a redirection, $VARS and arithmetic
    assert a.job(_ended(a, "plain"), "plain")["exit_code"] == 0
    assert "plain words" in a.ok("logs", job="plain", lines=5)["text"]
    a.job(_ended(a, "listed"), "listed")
    assert "a; $HOME" in a.ok("logs", job="listed", lines=5)["text"]


def test_the_log_header_shows_the_command_that_really_ran(start_agent, home):
    a = start_agent()
    a.ok("configure", jobs=[{"name": "gen", "kind": "generate", "python": sys.executable,
                             "options": {"prompts": "/nonexistent/p.jsonl", "out": "/nonexistent/out",
                                         "servers": ["http://127.0.0.1:9"]}}])
    r = a.ok("launch", job="gen")
    header = wait_for(lambda: (home / "jobs/gen/job.log").read_text().splitlines()[0], what="the header")
    assert r["argv"][0] == sys.executable and header.endswith(" ".join(r["argv"][:3]) + " --prompts "
                                                               "/nonexistent/p.jsonl --out /nonexistent/out "
                                                               "--server http://127.0.0.1:9")
    assert "python3 -m" not in header


# ---------------------------------------------------------------- the engine's interpreter (item 1)


def test_an_engine_kind_is_checked_for_its_engine_before_anything_starts(start_agent, home, tmp_path):
    a = start_agent()
    bare = tmp_path / "bare-python"  # an interpreter with no sglang: a python that sees only the stdlib
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    bare.chmod(0o755)
    a.ok("configure", jobs=[{"name": "sglang-0", "kind": "sglang-server", "model": "/models/m", "port": 30999,
                             "python": str(bare)},
                            {"name": "router", "kind": "router", "port": 30998, "python": str(bare),
                             "options": {"workers": ["http://127.0.0.1:30999"]}},
                            {"name": "gen", "kind": "generate", "python": str(bare),
                             "options": {"prompts": "/p.jsonl", "out": "/o", "servers": ["http://127.0.0.1:9"],
                                         "s3": "s3://b/p"}}])
    r = a.request("launch", job="sglang-0")
    assert not r["ok"]
    msg = r["error"]
    assert "\n" not in msg and str(bare) in msg and "cannot import sglang" in msg and 'set python = "' in msg
    assert not (home / "jobs/sglang-0/job.log").exists()  # nothing started, nothing failed after 1 s
    r = a.request("launch", job="router")
    assert not r["ok"] and "cannot import sglang_router" in r["error"] and "pip install sglang-router" in r["error"]
    r = a.request("launch", job="gen")  # a gpudeck worker: its dependencies, and the line that installs them
    assert not r["ok"] and "cannot import aiohttp" in r["error"] and "gpudeck deploy" in r["error"]
    snap = a.ok("status")
    assert all(j["state"] == "pending" for j in snap["jobs"])


def test_a_worker_missing_a_dependency_says_the_line_that_installs_it(tmp_path):
    """Run by hand with a python that lacks aiohttp: one line naming the fix, no traceback."""
    import subprocess

    from support import env_with_repo

    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(textwrap.dedent('''
        import sys
        class _Hide:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "aiohttp":
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        sys.meta_path.insert(0, _Hide())
    '''))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    env = env_with_repo({})
    env["PYTHONPATH"] = f"{hide}:{env.get('PYTHONPATH', '')}"
    r = subprocess.run([sys.executable, "-m", "gpudeck.agents.workers.generate", "--prompts", str(prompts),
                        "--out", str(tmp_path / "out"), "--server", "http://127.0.0.1:9"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert "cannot import aiohttp" in r.stderr and "gpudeck deploy" in r.stderr


# ---------------------------------------------------------------- relaunch after an edit (item 3)


def test_relaunch_after_an_edit_runs_the_files_version_and_prints_the_difference(tmp_path, home):
    fleet = tmp_path / "fleet.toml"

    def write(command: str) -> None:
        fleet.write_text(textwrap.dedent(f'''
            [defaults]
            home = "{home}"
            nvml = false

            [[jobs]]
            name = "job"
            command = "{command}"
        '''))

    write("echo first; exit 3")
    gpudeck("launch", "job", "-f", str(fleet))
    wait_for(lambda: json.loads(gpudeck("status", "--json", "-f", str(fleet)).stdout)["jobs"][0]["state"] == "failed",
             60, what="the job failed")
    write("echo fixed")
    doc = json.loads(gpudeck("status", "--json", "-f", str(fleet)).stdout)
    assert doc["jobs"][0]["spec_changes"] == ["command: 'echo first; exit 3' -> 'echo fixed'"]
    r = gpudeck("relaunch", "job", "-f", str(fleet))
    assert "with the fleet file's version" in r.stdout
    assert "command: 'echo first; exit 3' -> 'echo fixed'" in r.stdout
    wait_for(lambda: "fixed" in (home / "jobs/job/job.log").read_text(), 60, what="the fixed command ran")


def test_relaunch_shows_the_part_of_a_long_command_that_changed(tmp_path, home):
    """Two long commands that share their first 60 characters: what relaunch prints (and
    status --json's spec_changes) is the flag that changed, cut the same way on both sides."""
    fleet = tmp_path / "fleet.toml"
    prefix = "echo python -m sglang.launch_server --model-path /models/Qwen3-8B --host 127.0.0.1 --port 30000"

    def write(fraction: str) -> None:
        fleet.write_text(textwrap.dedent(f'''
            [defaults]
            home = "{home}"
            nvml = false

            [[jobs]]
            name = "job"
            command = "{prefix} --mem-fraction-static {fraction} --context-length 8192; exit 3"
        '''))

    write("0.80")
    gpudeck("launch", "job", "-f", str(fleet))
    wait_for(lambda: json.loads(gpudeck("status", "--json", "-f", str(fleet)).stdout)["jobs"][0]["state"] == "failed",
             60, what="the job failed")
    write("0.90")
    change = "command: …--mem-fraction-static 0.80… -> …--mem-fraction-static 0.90…"
    doc = json.loads(gpudeck("status", "--json", "-f", str(fleet)).stdout)
    assert doc["jobs"][0]["spec_changes"] == [change]
    r = gpudeck("relaunch", "job", "-f", str(fleet))
    assert change in r.stdout, r.stdout


# ---------------------------------------------------------------- two fleet files, one home (item 7)


def _fleet(path, home, *jobs: str):
    path.write_text(f'[defaults]\nhome = "{home}"\nnvml = false\n' + "".join(
        f'\n[[jobs]]\nname = "{j}"\ncommand = "exec sleep 60"\n' for j in jobs))
    return path


def test_two_fleet_files_on_one_home_keep_their_own_jobs(tmp_path, home):
    a = _fleet(tmp_path / "a.toml", home, "shared", "a-only")
    b = _fleet(tmp_path / "b.toml", home, "b-only")
    gpudeck("launch", "shared", "-f", str(a))

    def names(path) -> set[str]:
        return {j["name"] for j in json.loads(gpudeck("status", "--json", "-f", str(path)).stdout)["jobs"]}

    assert names(b) == {"b-only"}  # not a's jobs, launched or only declared
    assert names(a) == {"shared", "a-only"}  # b's configure did not replace a's declarations
    # b declares a job a owns: a look shows it, naming a's file (exit 7); a change is refused
    # (exit 7) until b takes it over
    b2 = _fleet(tmp_path / "b.toml", home, "b-only", "shared")
    r = gpudeck("status", "-f", str(b2), check=False)
    assert r.returncode == 7
    assert "shared" in r.stdout and str(a) in r.stdout and "--take-over" in r.stdout
    r = gpudeck("launch", "shared", "-f", str(b2), check=False)
    assert r.returncode == 7 and str(a) in r.stderr
    assert names(a) == {"shared", "a-only"}  # the refusal changed nothing
    r = gpudeck("kill", "shared", "--take-over", "-f", str(b2))
    assert "took job 'shared' on node local from fleet file" in r.stdout and str(a) in r.stdout
    assert names(b2) == {"b-only", "shared"}
    r = gpudeck("status", "-f", str(a), check=False)  # now a is the one told, naming b's file
    assert r.returncode != 0 and str(b2) in r.stdout + r.stderr
