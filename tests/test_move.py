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
