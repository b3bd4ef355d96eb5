"""Model staging's rules without a process (agents/staging/, agents/contract/staging.py): the
fleet file's `stage` read and refused with its file and line, the plan of what is in place,
the fit against a file system's free space and the memory a job needs beside a copy in memory,
a copy that never leaves a half file under its final name and resumes its partial, the row's
text, and a staging job's GPUs kept out of the idle ones. The real thing runs in
tests/system/test_staging.py."""

from __future__ import annotations

import os

import pytest

from gpudeck.agents.contract.jobs import JobSpec, SpecError
from gpudeck.agents.contract.staging import Staging, StageItem, staging_text
from gpudeck.agents.contract.vocab import JobState
from gpudeck.agents.contract.wire import Gpu, JobStatus
from gpudeck.agents.staging.copy import copy_file
from gpudeck.agents.staging.plan import StageRefused, check_fit, partial_name, plan_stage
from gpudeck.agents.watch.checks import idle_gpus
from gpudeck.remote.fleet import parse_fleet
from gpudeck.remote.fleet_check import FleetError

GB = 10 ** 9


def test_a_stage_is_read_from_the_fleet_file_and_crosses_the_wire():
    fleet = parse_fleet('''
[[jobs]]
name = "sg"
command = ["true"]
stage = [{ from = "/shared/qwen", to = "/dev/shm/qwen" }, { from = "s3://models/draft", to = "/nvme/draft" }]
stage_reserve_gb = 24
''', "fleet.toml")
    spec = fleet.job("sg")
    assert spec.stage == [StageItem("/shared/qwen", "/dev/shm/qwen"), StageItem("s3://models/draft", "/nvme/draft")]
    assert spec.stage[1].from_s3 and spec.stage_reserve_gb == 24
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert spec.to_dict()["stage"][0] == {"from": "/shared/qwen", "to": "/dev/shm/qwen"}


@pytest.mark.parametrize("stage,said", [
    ('[{ from = "/m" }]', "'to' must be a path"),
    ('[{ from = "/m", to = "relative/m" }]', "'to' 'relative/m' must be an absolute path"),
    ('[{ from = "http://x/m", to = "/dev/shm/m" }]', "only a path on the node or an s3:// URL can be staged"),
    ('[{ from = "s3:///m", to = "/dev/shm/m" }]', "names no bucket"),
    ('[{ from = "/m", to = "/dev/shm/m", mode = "copy" }]', "unknown key(s) mode"),
    ('[{ from = "/a", to = "/dev/shm/m" }, { from = "/b", to = "/dev/shm/m/b" }]', "copies twice into /dev/shm/m"),
    ('{ from = "/m", to = "/dev/shm/m" }', "'stage': expected a list, got a table"),
])
def test_a_wrong_stage_is_refused_with_its_file_line_and_reason(stage, said):
    with pytest.raises(FleetError) as exc:
        parse_fleet(f'[[jobs]]\nname = "sg"\ncommand = ["true"]\nstage = {stage}\n', "fleet.toml")
    assert "fleet.toml:4: [[jobs]] #1 ('sg') 'stage'" in str(exc.value) and said in str(exc.value), str(exc.value)


def test_a_cluster_job_cannot_stage_yet():
    with pytest.raises(SpecError, match="'stage' is for a node's job: on a Slurm cluster"):
        JobSpec(name="x", command=["true"], cluster="c", stage=[{"from": "/m", "to": "/tmp/m"}])


def _tree(d, files: dict[str, bytes]):
    for rel, data in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    return d


def test_the_plan_says_what_is_in_place_and_resumes_a_partial(tmp_path):
    src = _tree(tmp_path / "src", {"a.bin": b"a" * 1000, "sub/b.bin": b"b" * 3000})
    home = tmp_path / "home"
    item = StageItem(str(src), str(tmp_path / "dest"))
    plan = plan_stage([item], home)
    [p] = plan.items
    assert plan.total_bytes == plan.missing_bytes == 4000 and not p.in_place
    copied: list[int] = []
    a = next(f for f in p.files if f.rel == "a.bin")
    copy_file(p, a, copied.append)
    assert sum(copied) == 1000 and (tmp_path / "dest" / "a.bin").read_bytes() == b"a" * 1000
    assert os.stat(tmp_path / "dest" / "a.bin").st_mtime_ns // 1000 == a.mtime_ns // 1000
    # half of b, as a copy that was killed leaves it: under its partial name only
    b = next(f for f in p.files if f.rel == "sub/b.bin")
    part = partial_name(p.target(b), b)
    os.makedirs(os.path.dirname(part))
    with open(part, "wb") as f:
        f.write(b"b" * 1200)
    plan = plan_stage([item], home)
    [p] = plan.items
    assert p.in_place == {"a.bin"} and p.partial == {"sub/b.bin": 1200} and plan.missing_bytes == 1800
    copied.clear()
    copy_file(p, b, copied.append)
    assert sum(copied) == 1800 and (tmp_path / "dest" / "sub" / "b.bin").read_bytes() == b"b" * 3000
    assert not os.path.exists(part)
    # the source changed (its size): the old partial is not resumed, and the copy is not in place
    (src / "sub" / "b.bin").write_bytes(b"c" * 2000)
    [p] = plan_stage([item], home).items
    assert p.in_place == {"a.bin"} and not p.partial


def test_a_stage_that_does_not_fit_names_both_figures(tmp_path):
    src = _tree(tmp_path / "src", {"w.bin": b"x" * 100})
    plan = plan_stage([StageItem(str(src), str(tmp_path / "dest"))], tmp_path / "home")
    plan.items[0].files[0] = plan.items[0].files[0].__class__("w.bin", 54 * GB, "1", 1)
    with pytest.raises(StageRefused) as exc:
        check_fit(plan, 0, "sg", free_of=lambda p: 20 * GB, memory=lambda: 10 ** 15)
    assert f"stage to {tmp_path / 'dest'} does not fit: 54.0 GB to copy, 20.0 GB free on " in str(exc.value)
    check_fit(plan, 0, "sg", free_of=lambda p: 60 * GB, memory=lambda: 0)  # on disk: memory is not asked


def test_a_stage_into_memory_keeps_room_for_the_job(tmp_path, monkeypatch):
    from gpudeck.agents.staging import plan as planmod

    src = _tree(tmp_path / "src", {"w.bin": b"x" * 100})
    plan = plan_stage([StageItem(str(src), "/dev/shm/gpudeck-unit-never-made/m")], tmp_path / "home")
    plan.items[0].files[0] = plan.items[0].files[0].__class__("w.bin", 54 * GB, "1", 1)
    monkeypatch.setattr(planmod, "mount_of", lambda path: ("/dev/shm", "tmpfs"))
    with pytest.raises(StageRefused) as exc:
        check_fit(plan, 16 * GB, "sg", free_of=lambda p: 100 * GB, memory=lambda: 64 * GB)
    assert ("54.0 GB to copy plus 16.0 GB the job needs itself (stage_reserve_gb), 64.0 GB of memory available"
            in str(exc.value))
    check_fit(plan, 8 * GB, "sg", free_of=lambda p: 100 * GB, memory=lambda: 64 * GB)


def test_the_rows_text_of_a_stage():
    s = Staging(state="copying", total_bytes=54 * GB, done_bytes=23 * GB, bytes_per_s=1.1 * GB)
    assert staging_text(s) == "staging 43% (23 of 54 GB, 1.1 GB/s)"
    assert staging_text(Staging(state="copying", total_bytes=50_000_000, done_bytes=21_000_000)) == \
        "staging 42% (21 of 50 MB)"
    assert staging_text(Staging(state="waiting", waiting_for="/dev/shm/q")) == \
        "staging: waiting for another job's copy to /dev/shm/q"
    assert staging_text(Staging(state="failed", error="'from' /m does not exist")).startswith("staging failed: ")
    assert staging_text(Staging(state="done", total_bytes=1, done_bytes=1)) is None


def test_a_staging_jobs_gpus_are_not_idle():
    gpus = [Gpu(i, f"GPU-{i}", "NVIDIA H200", 1000.0, 140_000.0, 0.0) for i in range(2)]
    job = JobStatus(name="sg", kind="sglang-server", state=JobState.STARTING, gpus=[0],
                    staging=Staging(state="copying", total_bytes=10, done_bytes=5))
    assert idle_gpus(gpus, [job]) == [1]
