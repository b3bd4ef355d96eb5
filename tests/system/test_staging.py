"""A job's `stage` as the operator drives it: a 50 MB model copied from a local directory into
/dev/shm before the job's command starts, its progress on the job's row, a relaunch that finds
it in place, a stage larger than the free space refused before anything is copied, a kill in the
middle that leaves no half file under a final name and a relaunch that resumes it, the copy
listed by `doctor` and removed by `unstage`; and a stage from s3:// (moto), found in place by
its ETag. Real agents (the node's watcher), real jobs, the real CLI."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Optional

import pytest

from support.cli import gpudeck
from support.wait import wait_for

pytestmark = pytest.mark.system  # the node's watcher, real jobs, moto's S3 server

MB = 10 ** 6


def _model(d: Path, files: int = 5, size: int = 10 * MB) -> Path:
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"num_hidden_layers": 2}')
    for i in range(files):
        (d / f"model-{i:05d}-of-{files:05d}.safetensors").write_bytes(os.urandom(size))
    return d


def _digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def _toml(v) -> str:
    """A value in TOML: tables inline, the rest as JSON spells it (the same for these)."""
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return json.dumps(v)


def fleet_file(tmp_path: Path, home: Path, jobs: list[dict]) -> Path:
    lines = [f'[defaults]\nhome = "{home}"\nnvml = false\ninterval = 0.3\n']
    for j in jobs:
        lines.append("[[jobs]]")
        lines += [f"{k} = {_toml(v)}" for k, v in j.items()]
        lines.append("")
    path = tmp_path / "fleet.toml"
    path.write_text("\n".join(lines))
    return path


def seeing_job(name: str, dest: Path, src: str, **keys) -> dict:
    """A job whose command says what it sees of the staged copy, then stays."""
    script = f'ls -R "{dest}" > "$GPUDECK_JOB_DIR/seen"; du -sb "{dest}" >> "$GPUDECK_JOB_DIR/seen"; exec sleep 600'
    return {"name": name, "command": ["sh", "-c", script], "stage": [{"from": src, "to": str(dest)}], **keys}


@pytest.fixture
def shm_dest():
    """A fresh place in /dev/shm (memory: its check counts the memory available), removed after."""
    d = Path("/dev/shm") / f"gpudeck-test-{uuid.uuid4().hex[:10]}"
    yield d / "model"
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def watched(home, reap_jobs):
    started: list[Path] = []

    def start(fleet: Path) -> Path:
        gpudeck("watch", "start", "-f", str(fleet))
        started.append(fleet)
        return fleet
    yield start
    for fleet in started:
        gpudeck("watch", "stop", "-f", str(fleet), check=False)


def job_doc(fleet: Path, name: str) -> dict:
    r = gpudeck("status", "--json", "-f", str(fleet), check=False)
    assert r.returncode == 0, r.stderr
    return next(j for j in json.loads(r.stdout)["jobs"] if j["name"] == name)


def staging_of(home: Path, job: str) -> Optional[dict]:
    try:
        return json.loads((home / "jobs" / job / "staging.json").read_text())
    except (OSError, ValueError):
        return None


def test_a_model_staged_from_a_local_directory(tmp_path, home, watched, shm_dest):
    src = _model(tmp_path / "models" / "sim-50mb")
    # ~17 s of copy: long enough for a status read part way on a loaded machine
    fleet = watched(fleet_file(tmp_path, home, [seeing_job("eng", shm_dest, str(src), stage_max_mb_s=3,
                                                           stage_reserve_gb=0)]))
    gpudeck("launch", "-f", str(fleet), "eng")

    # the row shows the copy as it goes: "staging 42% (21 of 50 MB, 3.0 MB/s)", the job starting
    def copying():
        j = job_doc(fleet, "eng")
        s = j["staging"]
        return s and s["state"] == "copying" and 0 < s["done_bytes"] < s["total_bytes"] and j
    j = wait_for(copying, timeout=60, what="the stage copying, part way")
    assert j["state"] == "starting" and j["staging"]["total_bytes"] == sum(
        p.stat().st_size for p in src.iterdir())
    text = gpudeck("status", "-f", str(fleet)).stdout
    assert "staging " in text and " MB" in text and "% (" in text, text

    # the job's own command sees the whole copy
    seen = wait_for(lambda: (p := home / "jobs" / "eng" / "seen").exists() and p.read_text(), timeout=60,
                    what="the job's command running on the staged copy")
    assert "model-00004-of-00005.safetensors" in seen
    assert _digest(shm_dest) == _digest(src)
    assert job_doc(fleet, "eng")["state"] == "running"
    inode = (shm_dest / "model-00000-of-00005.safetensors").stat().st_ino

    # a relaunch finds it in place: nothing copied, the same files
    gpudeck("relaunch", "-f", str(fleet), "eng")
    done = wait_for(lambda: (s := staging_of(home, "eng")) and s["state"] == "done" and s, timeout=60,
                    what="the relaunch's stage done")
    assert done["copied_bytes"] == 0 and done["done_bytes"] == done["total_bytes"]
    assert (shm_dest / "model-00000-of-00005.safetensors").stat().st_ino == inode
    assert "in place already" in gpudeck("logs", "-f", str(fleet), "eng").stdout

    # doctor lists the copy; unstage keeps it while the job runs, removes it once killed
    report = json.loads(gpudeck("doctor", "-f", str(fleet), "--json", check=False).stdout)
    [staged] = [c for n in report["nodes"] for c in n["checks"] if c["name"] == "staged"]
    assert str(shm_dest) in staged["detail"] and "in place" in staged["detail"] and "unstage" in staged["fix"]
    r = gpudeck("unstage", "-f", str(fleet), check=False)
    assert r.returncode == 1 and f"kept {shm_dest}: in use by job eng" in r.stdout, r.stdout + r.stderr
    assert shm_dest.exists()
    gpudeck("kill", "-f", str(fleet), "eng", "--grace", "2")
    r = gpudeck("unstage", "-f", str(fleet))
    assert f"removed {shm_dest}" in r.stdout and "freed" in r.stdout, r.stdout
    assert not shm_dest.exists()


def test_a_stage_larger_than_the_free_space_is_refused_before_anything_is_copied(tmp_path, home):
    src = tmp_path / "huge"
    src.mkdir()
    free = shutil.disk_usage(tmp_path).free
    with open(src / "weights.safetensors", "wb") as f:
        f.truncate(free + 10 ** 12)  # sparse: it takes no room, and says it is larger than the disk
    dest = tmp_path / "fast" / "huge"
    fleet = fleet_file(tmp_path, home, [seeing_job("big", dest, str(src))])
    r = gpudeck("launch", "-f", str(fleet), "big", check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"stage to {dest} does not fit:" in r.stderr and "to copy," in r.stderr and " free on " in r.stderr, \
        r.stderr
    assert "nothing was copied" in r.stderr and not dest.exists() and not (dest.parent.exists() and
                                                                         any(dest.parent.iterdir()))


def test_a_stage_into_memory_counts_what_the_job_needs_itself(tmp_path, home, shm_dest):
    src = _model(tmp_path / "m", files=1, size=MB)
    fleet = fleet_file(tmp_path, home, [seeing_job("eng", shm_dest, str(src), stage_reserve_gb=100_000)])
    r = gpudeck("launch", "-f", str(fleet), "eng", check=False)
    assert r.returncode == 1 and "stage into memory" in r.stderr and "stage_reserve_gb" in r.stderr, r.stderr
    assert "of memory available" in r.stderr and not shm_dest.exists()


def test_a_kill_during_the_stage_stops_the_copy_and_the_relaunch_resumes_it(tmp_path, home, watched):
    src = _model(tmp_path / "models" / "m", files=2, size=20 * MB)
    dest = tmp_path / "fast" / "m"
    job = seeing_job("eng", dest, str(src), stage_max_mb_s=4)
    fleet = watched(fleet_file(tmp_path, home, [job]))
    gpudeck("launch", "-f", str(fleet), "eng")
    wait_for(lambda: (s := staging_of(home, "eng")) and s["copied_bytes"] > 5 * MB, timeout=60,
             what="the copy part way into its first file")
    verdict = json.loads(gpudeck("kill", "-f", str(fleet), "eng", "--grace", "2", "--json").stdout)
    assert verdict["ok"], verdict
    left = {p.name: p.stat().st_size for p in dest.iterdir()} if dest.exists() else {}
    partials = [n for n in left if n.endswith(".partial")]
    assert partials, left  # what was copied is kept for the next launch ...
    for name, size in left.items():  # ... and no half file is under a final name
        if not name.endswith(".partial"):
            assert size == (src / name).stat().st_size, (name, size)
    # the kill stopped the copy: nothing grows any more (the job's processes are gone, verified)
    assert not (home / "jobs" / "eng" / "seen").exists()

    # relaunched without the speed limit: it resumes, copying less than the whole
    job.pop("stage_max_mb_s")
    fleet_file(tmp_path, home, [job])
    gpudeck("relaunch", "-f", str(fleet), "eng")
    done = wait_for(lambda: (s := staging_of(home, "eng")) and s["state"] == "done" and s, timeout=60,
                    what="the resumed stage done")
    assert 0 < done["copied_bytes"] < done["total_bytes"], done
    assert _digest(dest) == _digest(src)  # no partial left behind, every file whole


S3_FILES = {"config.json": b'{"num_hidden_layers": 2}', "model-00001.safetensors": os.urandom(3 * MB),
            "model-00002.safetensors": os.urandom(2 * MB)}


def test_a_model_staged_from_s3(tmp_path, home, watched, moto_s3):
    c = moto_s3.client()
    c.create_bucket(Bucket="models")
    for name, data in S3_FILES.items():
        c.put_object(Bucket="models", Key=f"sim/{name}", Body=data)
    dest = tmp_path / "nvme" / "sim"
    env = {"AWS_ENDPOINT_URL_S3": moto_s3.endpoint, **moto_s3.ENV}
    fleet = watched(fleet_file(tmp_path, home, [seeing_job("eng", dest, "s3://models/sim", env=env)]))
    gpudeck("launch", "-f", str(fleet), "eng")
    wait_for(lambda: (home / "jobs" / "eng" / "seen").exists(), timeout=60, what="the job running on the copy")
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == S3_FILES

    # in place by its ETag: a relaunch copies nothing; an object replaced (same size) is copied again
    gpudeck("relaunch", "-f", str(fleet), "eng")
    done = wait_for(lambda: (s := staging_of(home, "eng")) and s["state"] == "done" and s, timeout=60,
                    what="the relaunch's stage done")
    assert done["copied_bytes"] == 0
    newer = os.urandom(2 * MB)
    c.put_object(Bucket="models", Key="sim/model-00002.safetensors", Body=newer)
    gpudeck("relaunch", "-f", str(fleet), "eng")
    done = wait_for(lambda: (s := staging_of(home, "eng")) and s["state"] == "done" and s, timeout=60,
                    what="the stage after the object changed")
    assert done["copied_bytes"] == 2 * MB and (dest / "model-00002.safetensors").read_bytes() == newer


def test_a_stage_from_a_missing_s3_prefix_is_refused_at_launch(tmp_path, home, moto_s3):
    moto_s3.client().create_bucket(Bucket="models")
    env = {"AWS_ENDPOINT_URL_S3": moto_s3.endpoint, **moto_s3.ENV}
    fleet = fleet_file(tmp_path, home, [seeing_job("eng", tmp_path / "d", "s3://models/nothing", env=env)])
    r = gpudeck("launch", "-f", str(fleet), "eng", check=False)
    assert r.returncode == 1 and "'from' s3://models/nothing holds no object" in r.stderr, r.stderr


def test_two_jobs_staging_to_one_place_take_turns(tmp_path, home, watched):
    src = _model(tmp_path / "models" / "m", files=1, size=20 * MB)
    dest = tmp_path / "fast" / "m"
    # a 20 s copy: the second job meets it under way, even on a loaded machine
    first = seeing_job("first", dest, str(src), stage_max_mb_s=1)
    second = seeing_job("second", dest, str(src))
    fleet = watched(fleet_file(tmp_path, home, [first, second]))
    gpudeck("launch", "-f", str(fleet), "first")
    wait_for(lambda: (s := staging_of(home, "first")) and s["state"] == "copying" and s["copied_bytes"] > 0,
             timeout=60, what="the first job copying")
    gpudeck("launch", "-f", str(fleet), "second")
    waiting = wait_for(lambda: (j := job_doc(fleet, "second"))["staging"] and j["staging"]["state"] == "waiting"
                       and j, timeout=60, what="the second job waiting for the first one's copy")
    assert waiting["staging"]["waiting_for"] == str(dest) and waiting["state"] == "starting"
    assert "staging: waiting for another job's copy to" in gpudeck("status", "-f", str(fleet)).stdout
    done = wait_for(lambda: (s := staging_of(home, "second")) and s["state"] == "done" and s, timeout=60,
                    what="the second job's stage done after the first one's")
    assert done["copied_bytes"] == 0 and staging_of(home, "first")["copied_bytes"] == 20 * MB + len(
        '{"num_hidden_layers": 2}')
