"""`gpudeck move` across network-namespace nodes: a generate job writing to S3 (moto) on node1,
node1 cut off, the job moved to node2, node1 back: every prompt id is in S3 exactly once, and
node1's old worker stopped on its own, fenced.

The tests skip only where network namespaces cannot be created (the reason says why).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest

from support.generate import S3_ENV, SimEngineProc, write_prompts
from support.s3 import read_jsonl_strict
from support.ssh import PY, ROOT, NetnsFleet, netns_unavailable
from support.wait import wait_for

pytestmark = pytest.mark.system  # sshd, network namespaces, agents, workers, moto and a sim engine

BUCKET, PREFIX = "moves", "gen"
N_PROMPTS, SHARD = 400, 10


@pytest.fixture(scope="module")
def netns(tmp_path_factory):
    why = netns_unavailable()
    if why:
        pytest.skip(why)
    fleet = NetnsFleet(tmp_path_factory.mktemp("netns"), n=2)
    try:
        yield fleet
    finally:
        fleet.close()


@pytest.fixture(scope="module")
def bridge_s3(netns):
    """moto's S3 on the bridge's address: the nodes reach it, and a node cut off does not."""
    import logging

    from moto.server import ThreadedMotoServer
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address=f"{netns.subnet}.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def s3_client(endpoint: str):
    import boto3
    return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                 region_name="us-east-1").client("s3", endpoint_url=endpoint)


def audit_s3(client, bucket: str, prefix: str) -> tuple[dict[str, int], list[str]]:
    """The checker: every record id of every shard under the prefix, counted; and the shards."""
    counts: dict[str, int] = {}
    names = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/shard-"):
        for obj in page.get("Contents", ()):
            names.append(obj["Key"])
            data = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            for rec in read_jsonl_strict(data, obj["Key"]):
                counts[rec["id"]] = counts.get(rec["id"], 0) + 1
    return counts, names


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpudeck.console", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def job_state(home: Path, job: str) -> dict:
    try:
        return json.loads((home / "jobs" / job / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def alive(pid) -> bool:
    try:
        return bool(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def fleet_text(netns: NetnsFleet, prompts: Path, server: str, endpoint: str, extra_job: str = "",
               name: str = "gen", prefix: str = PREFIX) -> str:
    env = "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in S3_ENV.items()) + " }"
    job = f"""
[[jobs]]
name = "{name}"
node = "node1"
kind = "generate"
prompts = "{prompts}"
out = "out"
servers = ["{server}"]
concurrency = 4
max_tokens = 64
shard_size = {SHARD}
s3 = "s3://{BUCKET}/{prefix}"
s3_endpoint = "{endpoint}"
force = true
env = {env}
{extra_job}"""
    return netns.fleet_toml(jobs=job)


def test_move_off_a_cut_node_fences_the_old_attempt_and_every_id_lands_once(netns, bridge_s3, tmp_path):
    node1, node2 = netns.node("node1"), netns.node("node2")
    s3 = s3_client(bridge_s3)
    s3.create_bucket(Bucket=BUCKET)
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, N_PROMPTS)
    sim = SimEngineProc("--host", f"{netns.subnet}.1", "--latency-ms", "150", "--out-tokens", "4-16",
                        log_dir=tmp_path)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(fleet_text(netns, prompts, sim.url, bridge_s3))
    try:
        r = cli("launch", "gen", "-f", str(fleet))
        assert r.returncode == 0, r.stderr
        old_pid = wait_for(lambda: job_state(node1.home, "gen").get("pid"), what="the job's pid on node1")
        # some shards in S3 from node1, and far from all: then cut node1 off
        wait_for(lambda: len(audit_s3(s3, BUCKET, PREFIX)[1]) >= 2, timeout=120, what="node1's first shards in S3")
        node1.link(False)
        before = audit_s3(s3, BUCKET, PREFIX)[0]
        assert len(before) < N_PROMPTS, "node1 finished before it was cut: the test proves nothing"

        r = cli("move", "gen", "--to", "node2", "-f", str(fleet))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "node node1 unreachable: fenced by attempt id" in r.stdout, r.stdout
        assert "launched gen on node2" in r.stdout, r.stdout
        def fence():
            return s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/_attempt")["Body"].read().decode().strip()

        # the new worker claims the output with the move's id before it restores anything
        attempt = wait_for(lambda: (a := fence()).split("-")[1] == "node2" and a, timeout=120,
                           what="node2's attempt id in S3", detail=fence)
        assert attempt in r.stdout, (attempt, r.stdout)

        # the console remembers where it runs: status shows it on node2
        r = cli("status", "-f", str(fleet), "--json")
        jobs = {j["name"]: j for j in json.loads(r.stdout)["jobs"]}
        assert jobs["gen"]["node"] == "node2", jobs["gen"]

        def node2_done():
            code = node2.home / "jobs" / "gen" / "exit_code"
            return code.exists() and code.read_text().strip()

        code = wait_for(node2_done, timeout=300, what="the moved job to finish on node2",
                        detail=lambda: (node2.home / "jobs" / "gen" / "job.log").read_text()[-3000:])
        assert code == "0", (node2.home / "jobs" / "gen" / "job.log").read_text()[-3000:]

        node1.link(True)
        log1 = node1.home / "jobs" / "gen" / "job.log"
        wait_for(lambda: not alive(old_pid), timeout=180, what="node1's old worker to stop on its own",
                 detail=lambda: log1.read_text()[-3000:])
        assert "fenced:" in log1.read_text() and attempt in log1.read_text(), log1.read_text()[-3000:]

        counts, shards = audit_s3(s3, BUCKET, PREFIX)
        dup = {i: c for i, c in counts.items() if c > 1}
        assert not dup, f"{len(dup)} ids in S3 more than once, e.g. {list(dup.items())[:5]}"
        assert set(counts) == set(ids), (f"missing {sorted(set(ids) - set(counts))[:5]}, "
                                         f"extra {sorted(set(counts) - set(ids))[:5]}")
        # the old attempt's id never came back over the new one's
        assert fence() == attempt
    finally:
        node1.link(True)
        sim.stop()


def test_a_move_is_final_the_old_nodes_watcher_never_takes_the_job_back(netns, bridge_s3, tmp_path):
    """The old node's watcher stays alive through the move, with a restart policy: its attempt,
    fenced once the link is back, is final (state ``fenced``, saying where the job went), never
    restarted; a relaunch there from a fleet file that still names it is refused with exit 1;
    the job runs on the spare only, and S3's ``_attempt`` keeps the move's id."""
    from support.watch import stop_watch

    node1, node2 = netns.node("node1"), netns.node("node2")
    s3 = s3_client(bridge_s3)
    s3.create_bucket(Bucket=BUCKET)
    prefix = job = "final"  # a job of its own: the module's nodes hold the other tests' jobs, owned by their files
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, N_PROMPTS)
    sim = SimEngineProc("--host", f"{netns.subnet}.1", "--latency-ms", "150", "--out-tokens", "4-16",
                        log_dir=tmp_path)
    text = fleet_text(netns, prompts, sim.url, bridge_s3, 'restart = "on-failure"\nrestart_backoff_s = 1\n',
                      name=job, prefix=prefix)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(text)
    stale = tmp_path / "teammate.toml"  # a fleet file that still names node1 (no placement of its own)
    stale.write_text(text)

    def fence():
        return s3.get_object(Bucket=BUCKET, Key=f"{prefix}/_attempt")["Body"].read().decode().strip()

    try:
        r = cli("watch", "start", "--supervise", "none", "-f", str(fleet))
        assert r.returncode == 0, r.stdout + r.stderr
        r = cli("launch", job, "-f", str(fleet))
        assert r.returncode == 0, r.stderr
        first = wait_for(lambda: (s := job_state(node1.home, job)).get("pid") and s, what="the job on node1")
        wait_for(lambda: len(audit_s3(s3, BUCKET, prefix)[1]) >= 2, timeout=120, what="node1's first shards in S3")
        node1.link(False)
        assert len(audit_s3(s3, BUCKET, prefix)[0]) < N_PROMPTS, "node1 finished before it was cut"
        r = cli("move", job, "--to", "node2", "-f", str(fleet))
        assert r.returncode == 0, r.stdout + r.stderr
        attempt = wait_for(lambda: (a := fence()).split("-")[1] == "node2" and a, timeout=120,
                           what="the move's attempt id in S3", detail=fence)
        node1.link(True)
        # node1's watcher (alive all along) sees its attempt stop, fenced: final, where the job went
        st = wait_for(lambda: (s := job_state(node1.home, job)).get("state") in ("fenced", "failed") and s,
                      timeout=180, what="node1's attempt to stop", detail=lambda: job_state(node1.home, job))
        assert st["state"] == "fenced", st
        assert st["exit_code"] == 5 and "moved to node node2" in st["fenced"], st
        # a relaunch there, from a file that still names node1, is refused before anything starts
        r = cli("relaunch", job, "--take-over", "-f", str(stale))
        assert r.returncode == 1, r.stdout + r.stderr
        assert "moved to node node2" in r.stderr and f"gpudeck move {job} --to node1" in r.stderr, r.stderr
        code_file = node2.home / "jobs" / job / "exit_code"
        wait_for(lambda: code_file.exists() and code_file.read_text().strip(), timeout=300,
                 what="the moved job to finish on node2",
                 detail=lambda: (node2.home / "jobs" / job / "job.log").read_text()[-3000:])
        assert code_file.read_text().strip() == "0", (node2.home / "jobs" / job / "job.log").read_text()[-3000:]
        # node1 never started it again: one attempt there, its state still fenced; S3 holds the move's id
        after = job_state(node1.home, job)
        assert (after["attempt"], after["state"]) == (first["attempt"], "fenced"), after
        assert launches(node1.home, job) == 1, (node1.home / "audit.log").read_text()
        assert fence() == attempt
        counts, _ = audit_s3(s3, BUCKET, prefix)
        assert not {i: c for i, c in counts.items() if c > 1} and set(counts) == set(ids)
    finally:
        node1.link(True)
        for node in (node1, node2):
            stop_watch(node.home)
        sim.stop()


def test_move_to_an_unknown_node_or_its_own_node_is_refused_with_exit_2(tmp_path):
    fleet = tmp_path / "fleet.toml"  # refused before any connection: the hosts need not exist
    fleet.write_text('[[nodes]]\nname = "node1"\nhost = "192.0.2.1"\n[[nodes]]\nname = "node2"\nhost = "192.0.2.2"\n'
                     '[[jobs]]\nname = "gen"\nnode = "node1"\ncommand = "sleep 60"\n')
    r = cli("move", "gen", "--to", "node9", "-f", str(fleet))
    assert r.returncode == 2, r.stderr
    assert "unknown node 'node9'" in r.stderr and "node1, node2" in r.stderr, r.stderr
    r = cli("move", "gen", "--to", "node1", "-f", str(fleet))
    assert r.returncode == 2, r.stderr
    assert "job 'gen' is already on node 'node1'" in r.stderr, r.stderr
    r = cli("move", "nope", "--to", "node2", "-f", str(fleet))
    assert r.returncode == 2 and "unknown job 'nope'" in r.stderr, r.stderr


def test_watch_fleet_moves_a_lost_nodes_job_to_the_spare_after_node_lost_s(netns, bridge_s3, tmp_path):
    node1, node2 = netns.node("node1"), netns.node("node2")
    s3 = s3_client(bridge_s3)
    s3.create_bucket(Bucket=BUCKET)
    prefix = "auto"
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, N_PROMPTS)
    sim = SimEngineProc("--host", f"{netns.subnet}.1", "--latency-ms", "150", "--out-tokens", "4-16",
                        log_dir=tmp_path)
    text = fleet_text(netns, prompts, sim.url, bridge_s3, 'on_node_lost = "move"\n', name="auto", prefix=prefix)
    text = text.replace('name = "node2"\n', 'name = "node2"\nspare = true\n') + "\n[alerts]\nnode_lost_s = 5\n"
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(text)
    out = tmp_path / "watch.out"
    watch = None
    try:
        r = cli("launch", "auto", "-f", str(fleet))
        assert r.returncode == 0, r.stderr
        old_pid = wait_for(lambda: job_state(node1.home, "auto").get("pid"), what="the job's pid on node1")
        watch = subprocess.Popen([PY, "-m", "gpudeck.console", "watch", "fleet", "-f", str(fleet)], cwd=ROOT,
                                 stdout=open(out, "w"), stderr=subprocess.STDOUT)
        wait_for(lambda: len(audit_s3(s3, BUCKET, prefix)[1]) >= 2, timeout=120, what="node1's first shards in S3")
        node1.link(False)
        assert len(audit_s3(s3, BUCKET, prefix)[0]) < N_PROMPTS, "node1 finished before it was cut"
        wait_for(lambda: "launched auto on node2" in out.read_text(), timeout=180,
                 what="the fleet watch to move the job to the spare", detail=out.read_text)
        said = out.read_text()
        assert "node node1 lost" in said and "moving auto to spare node2" in said, said
        assert "node node1 unreachable: fenced by attempt id" in said, said

        code_file = node2.home / "jobs" / "auto" / "exit_code"
        wait_for(lambda: code_file.exists() and code_file.read_text().strip(), timeout=300,
                 what="the moved job to finish on node2",
                 detail=lambda: (node2.home / "jobs" / "auto" / "job.log").read_text()[-3000:])
        assert code_file.read_text().strip() == "0"
        node1.link(True)
        log1 = node1.home / "jobs" / "auto" / "job.log"
        wait_for(lambda: not alive(old_pid), timeout=180, what="node1's old worker to stop on its own",
                 detail=lambda: log1.read_text()[-3000:])
        assert "fenced:" in log1.read_text(), log1.read_text()[-3000:]
        counts, _ = audit_s3(s3, BUCKET, prefix)
        assert not {i: c for i, c in counts.items() if c > 1} and set(counts) == set(ids)
        assert "moving auto" not in out.read_text().split("launched auto on node2", 1)[1], out.read_text()
    finally:
        node1.link(True)
        if watch is not None:
            watch.terminate()
            watch.wait(30)
        sim.stop()


# ---------------------------------------------------------------- the console's own automatic move


def command_fleet(netns: NetnsFleet, tmp_path: Path, name: str) -> Path:
    """A counting command job on node1 that moves when node1 is lost; node2 a spare; lost after 5 s."""
    from support.tui import progress_script

    job = (f'\n[[jobs]]\nname = "{name}"\nnode = "node1"\nkind = "command"\n'
           f'command = {json.dumps(["sh", "-c", progress_script(step_s=0.2)])}\non_node_lost = "move"\n')
    text = netns.fleet_toml(jobs=job).replace('name = "node2"\n', 'name = "node2"\nspare = true\n')
    path = tmp_path / "fleet.toml"
    path.write_text(text + "\n[alerts]\nnode_lost_s = 5\n")
    return path


def stop_job(home: Path, name: str) -> None:
    import os
    import signal

    pgid = job_state(home, name).get("pgid")
    if pgid:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def launches(home: Path, job: str) -> int:
    """How many times the node's agent launched ``job`` (its audit log)."""
    try:
        lines = (home / "audit.log").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum(1 for ln in lines if (e := json.loads(ln)).get("action") == "launch" and e.get("job") == job)


def row_on(app, job: str, node: str):
    return next((r for r in app.state.job_rows() if r.name == job and r.node == node), None)


async def test_the_console_moves_a_lost_nodes_job_to_the_spare_and_its_row_says_where_from(netns, tmp_path):
    from gpudeck.console.actions import JobOp
    from gpudeck.console.app import make_app
    from gpudeck.remote.fleet import load_fleet
    from support.tui import screen_text, wait_until

    node1, node2 = netns.node("node1"), netns.node("node2")
    name = "cmove"
    fleet = command_fleet(netns, tmp_path, name)
    app = make_app(load_fleet(str(fleet)), grace_s=2.0)
    app.animation_level = "none"
    try:
        async with app.run_test(size=(240, 50), notifications=True) as pilot:
            await wait_until(pilot, lambda: (r := row_on(app, name, "node1")) and r.state == "not_started", 120,
                             what="the job declared on node1")
            app.run_job_action(JobOp.LAUNCH, name, quiet=True)
            await wait_until(pilot, lambda: row_on(app, name, "node1").state == "running", 120,
                             what="the job running on node1")
            await wait_until(pilot, lambda: "node2" in app.mover.nodes.up, 120, what="the spare up")
            node1.link(False)
            verdict = await wait_until(pilot, lambda: next((v for j, op, v in app.verdicts
                                                            if j == name and op == "move"), None), 240,
                                       what="the console to move the job")
            assert "node node1 unreachable: fenced by attempt id" in verdict, verdict
            assert f"launched {name} on node2" in verdict, verdict
            said = " | ".join(app.move_news)
            assert "node node1 lost (" in said and f"moving {name} to spare node2" in said, said
            assert "node_lost_s 5" in said, said

            row = await wait_until(pilot, lambda: (r := row_on(app, name, "node2")) and r.state == "running" and r,
                                   120, what="the job running on node2")
            assert row.moved is not None and row.moved.startswith("moved from node1 "), row
            old = row_on(app, name, "node1")  # node1's last word, greyed
            assert old is not None and old.stale and old.moved == "moved to node2", old
            await pilot.press("2")
            await wait_until(pilot, lambda: any(ln.startswith(f"{name} ") and " node2 " in ln and row.moved in ln
                                                for ln in screen_text(app).splitlines()), what="the row drawn")
            # the laptop's other commands see it there, and say where it came from
            place = json.loads((tmp_path / "xdg-state" / "gpudeck" / "placements.json").read_text())
            assert place["fleets"][str(fleet)][name]["node"] == "node2"
            r = cli("status", "-f", str(fleet), "--json", "--timeout", "5")
            jobs = [j for j in json.loads(r.stdout)["jobs"] if j["name"] == name]
            assert [(j["node"], (j["moved_from"] or {}).get("node")) for j in jobs] == [("node2", "node1")], jobs
            assert launches(node2.home, name) == 1
    finally:
        node1.link(True)
        stop_job(node1.home, name)
        stop_job(node2.home, name)


async def test_a_console_and_watch_fleet_move_a_lost_nodes_job_once(netns, tmp_path):
    """Two watchers of one fleet on one laptop: whichever moves the job first, the other says so
    and launches nothing (console/automove.py: the placements it takes, the job alive on the
    spare, the placements' lock)."""
    from gpudeck.console.app import make_app
    from gpudeck.remote.fleet import load_fleet
    from support.tui import wait_until

    node1, node2 = netns.node("node1"), netns.node("node2")
    name = "twice"
    fleet = command_fleet(netns, tmp_path, name)
    out = tmp_path / "watch.out"
    watch = None
    app = make_app(load_fleet(str(fleet)), grace_s=2.0)
    app.animation_level = "none"
    try:
        r = cli("launch", name, "-f", str(fleet))
        assert r.returncode == 0, r.stderr
        wait_for(lambda: job_state(node1.home, name).get("pid"), what="the job's pid on node1")
        # the same $XDG_STATE_HOME as the console (this test's): one laptop
        watch = subprocess.Popen([PY, "-m", "gpudeck.console", "watch", "fleet", "-f", str(fleet)], cwd=ROOT,
                                 stdout=open(out, "w"), stderr=subprocess.STDOUT)
        async with app.run_test(size=(160, 40), notifications=True) as pilot:
            await wait_until(pilot, lambda: {"node1", "node2"} <= app.mover.nodes.up, 120, what="both nodes up")
            await wait_until(pilot, lambda: "watching" in out.read_text(), 120, what="watch fleet started")
            node1.link(False)

            def told() -> str:
                return " | ".join([out.read_text(), *app.move_news, *(v for j, op, v in app.verdicts if j == name)])

            await wait_until(pilot, lambda: f"launched {name} on node2" in told(), 240, what="one of them to move it")
            # the other one: it took the placement, saw the job alive on node2, or was refused at its record
            await wait_until(pilot, lambda: "another gpudeck" in told(), 120, what="the other to say it was moved")
            assert told().count(f"launched {name} on node2") == 1, told()
            assert launches(node2.home, name) == 1, (node2.home / "audit.log").read_text()
            # the console runs it there, whoever moved it
            await wait_until(pilot, lambda: app.client.fleet.job(name).node == "node2", 60, what="the console's fleet")
            assert not any(op == "move" and "failed" in v for j, op, v in app.verdicts), app.verdicts
            assert "failed" not in out.read_text(), out.read_text()
    finally:
        node1.link(True)
        if watch is not None:
            watch.terminate()
            watch.wait(30)
        stop_job(node1.home, name)
        stop_job(node2.home, name)


async def test_m_moves_the_selected_job_to_the_spare_after_asking(netns, tmp_path):
    """The move key: the job on a healthy node1 is asked about, killed with proof, and runs on the
    spare node2; its row says where it came from."""
    from gpudeck.console.actions import JobOp
    from gpudeck.console.app import make_app
    from gpudeck.remote.fleet import load_fleet
    from support.tui import answer, confirm_dialog, screen_text, wait_until

    node1, node2 = netns.node("node1"), netns.node("node2")
    name = "mkey"
    fleet = command_fleet(netns, tmp_path, name)
    app = make_app(load_fleet(str(fleet)), grace_s=2.0)
    app.animation_level = "none"
    try:
        async with app.run_test(size=(240, 50), notifications=True) as pilot:
            await wait_until(pilot, lambda: (r := row_on(app, name, "node1")) and r.state == "not_started", 120,
                             what="the job declared on node1")
            app.run_job_action(JobOp.LAUNCH, name, quiet=True)
            await wait_until(pilot, lambda: row_on(app, name, "node1").state == "running", 120,
                             what="the job running on node1")
            old_pid = row_on(app, name, "node1").pid
            await pilot.press("2")  # the jobs view; the module's nodes may show other tests' jobs: select this one
            app.screen.focus_row("jobs", f"node1/{name}")
            await wait_until(pilot, lambda: app.screen.selected_job() == name, what=f"{name} selected")
            await wait_until(pilot, lambda: f"{name} " in screen_text(app), what="the jobs view")
            await pilot.press("m")
            await confirm_dialog(pilot, "the confirm dialog")
            assert "to spare node [b]node2[/b]" in app.screen.question, app.screen.question
            await answer(pilot, "y")
            verdict = await wait_until(pilot, lambda: next((v for j, op, v in app.verdicts
                                                            if j == name and op == "move"), None), 240,
                                       what="the move's verdict")
            assert f"launched {name} on node2" in verdict, verdict
            row = await wait_until(pilot, lambda: (r := row_on(app, name, "node2")) and r.state == "running" and r,
                                   120, what="the job running on node2")
            assert row.moved is not None and row.moved.startswith("moved from node1 "), row
            assert not alive(old_pid)  # the kill on node1 was verified before the launch
            assert launches(node2.home, name) == 1
    finally:
        stop_job(node1.home, name)
        stop_job(node2.home, name)
