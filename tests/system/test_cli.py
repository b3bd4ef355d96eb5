"""The headless commands, run as a user would: the `gpudeck` program on a fleet file.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_cli.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from support import ROOT, env_with_repo, pid_alive
from support.cli import at_a_terminal, gpudeck, gpudeck_cmd, without
from support.wait import wait_for


@pytest.fixture
def fleet(tmp_path, home):
    path = tmp_path / "fleet.toml"
    path.write_text(textwrap.dedent(f'''
        [defaults]
        home = "{home}"
        nvml = false
        interval = 0.2

        [[jobs]]
        name = "counter"
        command = ["sh", "-c", "i=0; while true; do i=$((i+1)); echo step $i; printf '{{\\"done\\": %d, \\"total\\": 1000000, \\"tokens\\": %d}}' $i $((i*100)) > $GPUDECK_PROGRESS_FILE.tmp; mv $GPUDECK_PROGRESS_FILE.tmp $GPUDECK_PROGRESS_FILE; sleep 0.1; done"]
        gpus = [0]
    '''))
    return path


@pytest.mark.system
def test_status_json_with_no_fleet_file(home):
    r = gpudeck("status", "--json", env={"GPUDECK_HOME": str(home)})
    doc = json.loads(r.stdout)
    assert set(doc) == {"fleet", "nodes", "jobs", "alerts"}
    assert doc["fleet"] == {"spent": None, "to_finish": None, "nodes_priced": 0, "idle_per_hour": None,
                            "tokens_per_s": None, "burned": None, "s3_bytes": None, "s3_cost_per_month": None,
                            "s3_price_per_gb_month": 0.023}  # no prices: null, never 0; no job: no rate
    (node,) = doc["nodes"]
    assert node["name"] == "local" and node["reachable"] is True
    assert {"name", "reachable", "gpus", "host"} <= set(node)
    assert node["host"]["cpu_count"] >= 1 and doc["jobs"] == []


@pytest.mark.system
@pytest.mark.usefixtures("reap_jobs")
def test_launch_status_logs_kill_relaunch(fleet, home):
    f = ["-f", str(fleet)]
    r = gpudeck("launch", *f, "counter")
    assert "launched counter" in r.stdout and "attempt 1" in r.stdout
    leader = int(r.stdout.split("pid ")[1].split(",")[0])
    again = gpudeck("launch", *f, "counter", check=False)
    assert again.returncode == 1 and "already running" in again.stderr

    def job():
        doc = json.loads(gpudeck("status", *f, "--json").stdout)
        (j,) = doc["jobs"]
        return j
    j = wait_for(lambda: (j := job())["done"] and j, timeout=30, what="progress")
    assert {"name", "node", "kind", "state", "pids", "gpus", "attempt", "done", "total", "tokens_per_s",
            "eta_s"} <= set(j)
    assert j["state"] == "running" and j["node"] == "local" and j["gpus"] == [0] and j["total"] == 1000000
    assert leader in j["pids"] and pid_alive(leader)
    table = gpudeck("status", *f).stdout
    assert "counter" in table and "running" in table

    tail = wait_for(lambda: (out := gpudeck("logs", *f, "counter", "-n", "5").stdout).count("step ") == 5 and out,
                    what="five log lines")
    assert len(tail.splitlines()) == 5
    follow = subprocess.Popen([*gpudeck_cmd(), "logs", *f, "counter", "-n", "1", "--follow"],
                              stdout=subprocess.PIPE, text=True, env=env_with_repo(), cwd=ROOT)
    try:
        lines = [follow.stdout.readline() for _ in range(5)]
        steps = [int(l.split()[1]) for l in lines if l.startswith("step ")]
        assert len(steps) >= 4 and steps == sorted(steps)
    finally:
        follow.terminate()
        follow.wait(10)

    r = gpudeck("kill", *f, "counter", "--grace", "2")
    assert r.stdout.startswith("killed counter: stopped in")
    assert not pid_alive(leader)
    assert job()["state"] == "killed"
    r = gpudeck("relaunch", *f, "counter")
    assert "attempt 2" in r.stdout
    assert job()["attempt"] == 2
    r = gpudeck("kill", *f, "counter", "--json")
    assert json.loads(r.stdout)["ok"] is True


# a generation job that reports like the generate worker: 10 items (2,500 tokens) a second,
# 9 of 10 records useful; its plan.json promised three times that rate
FAKE_GENERATE = ("i=0; while true; do i=$((i+1)); "
                 "printf '{\"done\": %d, \"total\": 100000, \"tokens\": %d, \"tokens_per_s\": 2500, "
                 "\"rate_per_s\": 10, \"useful\": %d, \"useful_of\": %d}' $i $((i*250)) $((i*9/10)) $i "
                 "> $GPUDECK_PROGRESS_FILE.tmp; mv $GPUDECK_PROGRESS_FILE.tmp $GPUDECK_PROGRESS_FILE; sleep 0.1; done")


@pytest.mark.system
@pytest.mark.usefixtures("reap_jobs")
def test_status_shows_dollars_and_the_plan_against_the_projection(tmp_path, home):
    out = tmp_path / "out"
    out.mkdir()
    # a plan of 5m 33s: its warm-up (a tenth of it: 33 s) judges no drift (agents/watch/checks.py)
    (out / "plan.json").write_text(json.dumps({"projected_wall_s": 100_000 / 300, "written_at": 1.0}))
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(textwrap.dedent(f'''
        [defaults]
        home = "{home}"
        nvml = false
        interval = 0.2

        [[nodes]]
        name = "local"
        price_per_hour = 36

        [[jobs]]
        name = "gen"
        kind = "generate"
        out = "{out}"
        command = ["sh", "-c", {json.dumps(FAKE_GENERATE)}]
    '''))
    f = ["-f", str(fleet)]
    gpudeck("launch", *f, "gen")

    def status():
        doc = json.loads(gpudeck("status", *f, "--json").stdout)
        return doc if any(a["kind"] == "plan_drift" for a in doc["alerts"]) else None
    doc = wait_for(status, timeout=90, what="a plan_drift alert in `status --json`")
    (node,) = doc["nodes"]
    (job,) = doc["jobs"]
    assert node["price_per_hour"] == 36 and node["spent"] > 0 and node["to_finish"] > 0
    assert doc["fleet"]["nodes_priced"] == 1
    assert doc["fleet"]["spent"] == node["spent"] and doc["fleet"]["to_finish"] == node["to_finish"]
    # node price over the node's output tokens per hour; its share over useful completions per hour
    assert job["cost_per_m_tokens"] == pytest.approx(36e6 / (job["tokens_per_s"] * 3600), rel=1e-4)
    useful = job["useful"] / job["useful_of"]
    assert 0 < useful <= 0.9
    assert job["cost_per_useful_completion"] == pytest.approx(36 / (job["rate_per_s"] * 3600 * useful), rel=1e-4)
    assert job["planned_wall_s"] == pytest.approx(333.3, abs=0.1) and job["plan"] == str(out / "plan.json")
    assert job["projected_wall_s"] > 2 * job["planned_wall_s"] and job["drift_pct"] > 100 and job["plan_error"] is None
    assert job["first_started_at"] is not None
    (alert,) = [a for a in doc["alerts"] if a["kind"] == "plan_drift"]
    assert alert["job"] == "gen" and alert["message"].startswith("job gen: planned 5m 33s, now ")
    plain = gpudeck("status", *f).stdout
    assert ", $36/h: $" in plain and "  plan: planned 5m 33s, now " in plain
    assert "  cost: $" in plain and " per M output tokens, $" in plain and "fleet: $" in plain


@pytest.mark.system
def test_bad_input_from_the_command_line(tmp_path, fleet):
    broken = tmp_path / "broken.toml"
    broken.write_text('[[jobs]]\nname = "a"\ncommand = ["x"]\ngpus = "0"\n')
    r = gpudeck("status", "-f", str(broken), check=False)
    assert r.returncode == 2 and f"{broken}:4:" in r.stderr and "expected a list of integers" in r.stderr
    r = gpudeck("kill", "-f", str(fleet), "nosuchjob", check=False)
    assert r.returncode == 2 and "unknown job 'nosuchjob'" in r.stderr and "counter" in r.stderr
    r = gpudeck("status", "-f", str(tmp_path / "missing.toml"), check=False)
    assert r.returncode == 2 and "cannot read the fleet file" in r.stderr
    assert "Traceback" not in r.stderr
    for bad in ("nan", "-1", "inf", "soon"):
        r = gpudeck("kill", "-f", str(fleet), "counter", "--grace", bad, check=False)
        assert r.returncode == 2 and "--grace" in r.stderr and "Traceback" not in r.stderr, (bad, r.stderr)
    r = gpudeck("kill", "-f", str(fleet), "--pid", "123", check=False)
    assert r.returncode == 2 and "--node NODE --pid PID" in r.stderr
    r = gpudeck("kill", "-f", str(fleet), "--node", "nowhere", "--pid", "123", check=False)
    assert r.returncode == 2 and "unknown node 'nowhere'" in r.stderr
    r = gpudeck("logs", "-f", str(fleet), "counter", "-n", "-5", check=False)
    assert r.returncode == 2 and "--lines" in r.stderr


@pytest.mark.system
def test_consoles_starting_at_the_same_moment_share_one_agent(tmp_path):
    """Four `gpudeck status` at once on an idle node, eight times: every one reads the node
    (the losers of the start relay to the winner; none takes the node over from another)."""
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{tmp_path / "home"}"\nnvml = false\n')
    for round_ in range(8):
        procs = [subprocess.Popen([*gpudeck_cmd(), "status", "--json", "-f", str(fleet)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env_with_repo())
                 for _ in range(4)]
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, (round_, json.loads(out)["nodes"][0].get("error"), err)
            node = json.loads(out)["nodes"][0]
            assert node["reachable"] and node["error"] is None, (round_, node)


@pytest.mark.system
def test_an_agent_that_cannot_start_says_why(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{blocker / "home"}"\nnvml = false\n')
    r = gpudeck("status", "--json", "-f", str(fleet), check=False)
    node = json.loads(r.stdout)["nodes"][0]
    assert not node["reachable"]
    assert "Not a directory" in node["error"] and str(blocker / "home") in node["error"], node["error"]
    assert "exited with code 3" in node["error"]
    assert r.returncode == 3  # some node did not answer


@pytest.mark.system
def test_kill_by_pid_of_a_gpu_process_of_no_job_and_a_kept_verdict(tmp_path, home):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(textwrap.dedent(f'''
        [defaults]
        home = "{home}"

        [[nodes]]
        name = "local"
        simulate_gpus = "1xH200:141"

        [[jobs]]
        name = "holder"
        gpus = [0]
        command = ["{sys.executable}", "-m", "gpudeck.agents.simgpu", "{home}", "0", "4096", "--", "sleep", "600"]
    '''))
    stranger = subprocess.Popen([sys.executable, "-m", "gpudeck.agents.simgpu", str(home), "0", "2048", "--",
                                 "sleep", "600"], start_new_session=True)
    try:
        gpudeck("launch", "holder", "-f", str(fleet))
        wait_for(lambda: len(json.loads(gpudeck("status", "--json", "-f", str(fleet)).stdout)
                             ["nodes"][0]["gpus"][0]["processes"]) == 2, 60, what="both on GPU 0")
        r = gpudeck("kill", "-f", str(fleet), "--node", "local", "--pid", str(stranger.pid), "--grace", "2")
        assert f"pid {stranger.pid}: freed 2.0 GiB" in r.stdout, r.stdout
        assert stranger.wait(10) is not None
        idle = subprocess.Popen(["sleep", "600"], start_new_session=True)  # no GPU, and nothing of the node's
        try:
            r = gpudeck("kill", "-f", str(fleet), "--node", "local", "--pid", str(idle.pid), check=False)
        finally:
            idle.kill()
            idle.wait()
        assert r.returncode == 1 and "holds no GPU" in r.stderr
        r = gpudeck("kill", "-f", str(fleet), "--node", "local", "--pid", str(os.getpid()), check=False)
        assert r.returncode == 8 and "is an ancestor of the node's agent" in r.stderr  # agents/jobs/holds.py
        gpudeck("kill", "holder", "-f", str(fleet), "--grace", "2")
        doc = json.loads(gpudeck("status", "--json", "-f", str(fleet)).stdout)
        node = doc["nodes"][0]
        assert node["gpus_simulated"] is True and node["containment"] in ("cgroup", "token")
        job = next(j for j in doc["jobs"] if j["name"] == "holder")
        assert job["state"] == "killed" and job["tokens_per_s"] is None and job["eta_s"] is None
        assert job["last_kill"]["ok"] and job["last_kill"]["freed_gib"] == 4.0  # kept after the console left
        plain = gpudeck("status", "-f", str(fleet)).stdout
        assert "GPUs SIMULATED" in plain and "last kill at" in plain and "freed 4.0 GiB" in plain
    finally:
        if stranger.poll() is None:
            stranger.kill()


@pytest.mark.system
def test_a_one_shot_status_shows_the_engines(tmp_path, home):
    import httpx

    from support.generate import free_port
    port = free_port()
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(textwrap.dedent(f'''
        [defaults]
        home = "{home}"
        nvml = false

        [[jobs]]
        name = "engine"
        kind = "sglang-server"
        port = {port}
        command = ["{sys.executable}", "-m", "gpudeck.console", "sim-engine", "--port", "{port}"]
    '''))
    try:
        gpudeck("launch", "engine", "-f", str(fleet))
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
                 if _answers(port) else False, 60, what="the simulated server up")
        doc = json.loads(gpudeck("status", "--json", "-f", str(fleet)).stdout)
        job = next(j for j in doc["jobs"] if j["name"] == "engine")
        assert job["engine"] is not None and job["engine"]["state"] == "ready", job
        assert job["state"] == "running"
    finally:
        gpudeck("kill", "engine", "-f", str(fleet), "--grace", "2", check=False)


def _answers(port: int) -> bool:
    import socket
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.system
def test_extract_without_its_extra_names_the_pip_line(tmp_path):
    r = gpudeck("extract", "--model", str(tmp_path), "--data", "x.jsonl", "--out", str(tmp_path / "o"),
                "--layers", "1", check=False, env=without(tmp_path, "torch", "numpy"))
    assert r.returncode == 2, r.stderr
    assert "needs torch, numpy" in r.stderr and "pip install 'gpudeck[extract]'" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.system
def test_extract_with_a_model_path_that_does_not_exist_says_the_path(tmp_path):
    missing = tmp_path / "models" / "Qwen3-8B"
    r = gpudeck("extract", "--model", str(missing), "--data", "x.jsonl", "--out", str(tmp_path / "o"),
                "--layers", "1", check=False)
    assert r.returncode == 2, r.stderr
    assert f"--model {missing}: {missing} does not exist" in r.stderr and "Traceback" not in r.stderr
    (missing).mkdir(parents=True)
    r = gpudeck("extract", "--model", str(missing), "--data", "x.jsonl", "--out", str(tmp_path / "o"),
                "--layers", "1", check=False)
    assert r.returncode == 2 and "has no config.json" in r.stderr


@pytest.mark.system
def test_ctrl_c_exits_130(tmp_path):
    import signal
    proc = subprocess.Popen([*gpudeck_cmd(), "sim-engine", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env_with_repo(), preexec_fn=at_a_terminal)
    try:
        assert "listening on" in proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill() if proc.poll() is None else None
    # generate, stopped by ctrl-c while its servers are down
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"id": {i}, "messages": [{{"role": "user", "content": "q{i}"}}]}}\n'
                               for i in range(50)))
    proc = subprocess.Popen([*gpudeck_cmd(), "generate", "--prompts", str(prompts), "--out", str(tmp_path / "o"),
                             "--server", "http://127.0.0.1:9", "--max-attempts", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env_with_repo(),
                            preexec_fn=at_a_terminal)
    try:
        wait_for(lambda: (tmp_path / "o" / "progress.json").exists(), 60, what="generate running")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill() if proc.poll() is None else None
