"""Slurm clusters end to end: a real single-node Slurm (tests/support/slurm.py), the real
`gpudeck` commands, the cluster agent on the "login node" (this machine, or the loopback sshd),
tasks that hold simulated GPU memory on the indices Slurm gave them (tests/support/slurm_task.py).

gpudeck submits, observes, kills with proof and requeues; Slurm schedules.


The unit tier's tests of this file (starts nothing); the others are in tests/e2e/test_slurm.py."""

from __future__ import annotations

import pytest

from gpudeck.agents.cluster.slurm import parse_idx, parse_job_detail, parse_squeue
from support.slurm_cases import holder_job


# ---------------------------------------------------------------- units (no cluster)


def test_idx_ranges_and_not_applicable():
    assert parse_idx("0-1,3") == [0, 1, 3]
    assert parse_idx("2") == [2]
    assert parse_idx("N/A") == [] and parse_idx("") == [] and parse_idx(None) == []
    with pytest.raises(ValueError):
        parse_idx("0-x")


def test_scontrol_detail_gives_node_indices():
    line = ("JobId=15 ArrayJobId=14 ArrayTaskId=0 ArrayTaskThrottle=3 JobName=gd:f:extract JobState=RUNNING "
            "Reason=None Requeue=1 Restarts=2 BatchFlag=1 ExitCode=0:0 NodeList=vm JOB_GRES=gpu:3 "
            "Nodes=vm CPU_IDs=0 Mem=0 GRES=gpu:3(IDX:0-1,3) StdOut=/x/%a.log")
    (d,) = parse_job_detail(line)
    assert (d.raw, d.array_id, d.index, d.gpus, d.restarts, d.node) == ("15", "14", 0, [0, 1, 3], 2, "vm")
    (none,) = parse_job_detail("JobId=16 ArrayJobId=14 ArrayTaskId=1 JobState=PENDING NodeList=(null)")
    assert none.gpus == [] and none.node is None


def test_squeue_rows_of_an_array():
    rows = parse_squeue("14_2|14|2|PENDING|JobArrayTaskLimit||gres:gpu:1|0:00|10:00|N/A|gd:f:extract\n"
                        "14_0|15|0|RUNNING|None|vm|gres:gpu:1|1:02|10:00|NONE|gd:f:extract\n"
                        "a banner line a site wrapper printed\n")
    assert [(r.id, r.raw, r.index, r.state, r.node, r.elapsed_s, r.limit_s) for r in rows] == [
        ("14_2", "14", 2, "PENDING", None, 0.0, 600.0), ("14_0", "15", 0, "RUNNING", "vm", 62.0, 600.0)]
    assert rows[0].array_id == "14"


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("line,said", [
    ("gpus = [0, 1]", "on a Slurm cluster 'gpus' is a count"),
    ('node = "local"', "both 'node' and 'cluster'"),
    ("shards = 0", "'shards' must be an integer >= 1"),
    ('time = "bogus"', "Slurm's time format"),
])
def test_bad_cluster_jobs_are_refused_with_file_and_line(tmp_path, line, said):
    from gpudeck.remote.fleet import FleetError, load_fleet
    path = tmp_path / "f.toml"
    job = "\n".join(ln for ln in holder_job(tmp_path).splitlines() if not ln.startswith(line.split(" ")[0] + " "))
    path.write_text(f"""[[clusters]]
name = "lab"
shared_dir = "/tmp/x"
{job}
{line}
""")
    with pytest.raises(FleetError) as e:
        load_fleet(path)
    assert said in str(e.value) and f"{path}:" in str(e.value)


def test_cluster_keys_are_checked(tmp_path):
    from gpudeck.remote.fleet import FleetError, load_fleet
    for table, said in [("poll_s = 2", "'poll_s': at least 10"), ("", "needs a 'shared_dir'"),
                        ("shared_dir = 'rel/dir'", "expected an absolute path"), ("prtition = 'x'", "did you mean")]:
        path = tmp_path / "f.toml"
        shared = "" if "shared_dir" in table or not table else "shared_dir = '/tmp/x'\n"
        path.write_text(f"[[clusters]]\nname = 'lab'\n{shared}{table}\n")
        with pytest.raises(FleetError) as e:
            load_fleet(path)
        assert said in str(e.value), str(e.value)


# ---------------------------------------------------------------- the console


def test_pending_runs_collapse_and_the_rest_stay_rows():
    from gpudeck.agents.contract.vocab import JobState
    from gpudeck.agents.contract.jobs import JobKind
    from gpudeck.agents.contract.wire import JobStatus, TaskInfo
    from gpudeck.console.state import collapse_pending

    def task(i: int, state: JobState, reason: str | None = "JobArrayTaskLimit") -> tuple[str, JobStatus]:
        return "lab", JobStatus(name=f"x/{i}", kind=JobKind.COMMAND, state=state,
                                task=TaskInfo(job="x", index=i, reason=reason))

    jobs = [task(0, JobState.RUNNING), task(1, JobState.RUNNING)] + [task(i, JobState.PENDING) for i in range(2, 200)]
    jobs += [task(200, JobState.PENDING, "Resources"), task(201, JobState.PENDING, "Resources")]
    names = [j.name for _, j in collapse_pending(jobs)]
    assert names == ["x/0", "x/1", "x/[2-199]", "x/200", "x/201"]  # two in a row stay rows
    (_, folded) = collapse_pending(jobs)[2]
    assert folded.task.note.startswith("198 tasks")
