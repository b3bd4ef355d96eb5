"""Phases (`after = ["generate"]`): the fleet file's rules, the node's rule of when a job starts
or is blocked (agents/watch/phases.py), and Slurm's `--dependency=afterok`. No process is
started here (tests/system/test_phases_system.py runs them)."""

from __future__ import annotations

import textwrap

import pytest

from gpudeck.agents.contract.jobs import JobSpec, SpecError
from gpudeck.agents.contract.vocab import EventKind, JobState
from gpudeck.agents.watch.phases import Phases
from gpudeck.remote.fleet import parse_fleet
from gpudeck.remote.fleet_check import FleetError
from support.jobs import FakeJobs

NODES = '''
[[nodes]]
name = "a"
host = "a.example"
[[nodes]]
name = "b"
host = "b.example"
'''


def fleet(jobs: str):
    return parse_fleet(NODES + textwrap.dedent(jobs), "fleet.toml")


def test_after_on_the_same_node_needs_no_marker():
    f = fleet('''
        [[jobs]]
        name = "gen"
        node = "a"
        command = "true"
        [[jobs]]
        name = "ext"
        node = "a"
        command = "true"
        after = ["gen"]
    ''')
    ext = f.job("ext")
    assert ext.after == ["gen"] and ext.after_markers == {}


def test_after_naming_an_unknown_job_is_a_fleet_error_with_its_line():
    with pytest.raises(FleetError) as err:
        fleet('''
            [[jobs]]
            name = "generate"
            command = "true"
            [[jobs]]
            name = "ext"
            command = "true"
            after = ["genrate"]
        ''')
    assert str(err.value).startswith("fleet.toml:15: job 'ext' 'after': no job named 'genrate' "
                                      "(did you mean 'generate'?)")


def test_a_circle_of_after_is_a_fleet_error_with_its_line():
    with pytest.raises(FleetError) as err:
        fleet('''
            [[jobs]]
            name = "x"
            command = "true"
            after = ["z"]
            [[jobs]]
            name = "y"
            command = "true"
            after = ["x"]
            [[jobs]]
            name = "z"
            command = "true"
            after = ["y"]
        ''')
    assert "circle (x -> z -> y -> x)" in str(err.value) and str(err.value).startswith("fleet.toml:")
    line = int(str(err.value).split(":")[1])
    assert (NODES + "\n").count("\n") < line  # a line of the jobs, not of the nodes
    with pytest.raises(FleetError, match="names the job itself"):
        fleet('''
            [[jobs]]
            name = "x"
            command = "true"
            after = ["x"]
        ''')


def test_after_must_be_a_list_of_names():
    with pytest.raises(FleetError, match="'after': expected a list of strings"):
        fleet('''
            [[jobs]]
            name = "x"
            command = "true"
            after = "y"
        ''')


def test_a_job_on_another_node_is_met_by_its_marker():
    f = fleet('''
        [[jobs]]
        name = "gen"
        node = "a"
        kind = "generate"
        prompts = "/p.jsonl"
        out = "/shared/gen/"
        servers = ["http://127.0.0.1:1"]
        part = "1/4"
        [[jobs]]
        name = "gen-s3"
        node = "a"
        kind = "generate"
        prompts = "/p.jsonl"
        out = "/local/gen"
        s3 = "s3://bucket/run7"
        s3_endpoint = "http://minio.lab:9000"
        servers = ["http://127.0.0.1:1"]
        [[jobs]]
        name = "prep"
        node = "a"
        command = "true"
        success_marker = "/shared/prep/_SUCCESS"
        [[jobs]]
        name = "ext"
        node = "b"
        command = "true"
        after = ["gen", "gen-s3", "prep"]
    ''')
    assert f.job("ext").after_markers == {"gen": "/shared/gen/part-1-of-4/_SUCCESS",
                                          "gen-s3": "s3://bucket/run7/_SUCCESS",
                                          "prep": "/shared/prep/_SUCCESS"}
    # an S3 marker is asked for where its job writes it: that job's own store
    assert f.job("ext").after_endpoints == {"gen-s3": "http://minio.lab:9000"}


def test_a_command_job_on_another_node_needs_a_success_marker():
    with pytest.raises(FleetError, match="give 'prep' a 'success_marker'"):
        fleet('''
            [[jobs]]
            name = "prep"
            node = "a"
            command = "true"
            [[jobs]]
            name = "ext"
            node = "b"
            command = "true"
            after = ["prep"]
        ''')


@pytest.mark.parametrize("key", ["after_markers", "after_endpoints"])
def test_after_markers_is_not_a_fleet_key(key):
    with pytest.raises(FleetError, match=f"has no key '{key}'"):
        fleet(f'''
            [[jobs]]
            name = "x"
            command = "true"
            {key} = {{ y = "/m" }}
        ''')


def test_a_spec_refuses_a_bad_after():
    with pytest.raises(SpecError, match="'after': expected a list of strings"):
        JobSpec(name="x", command=["true"], after="y")  # type: ignore[arg-type]


# ---------------------------------------------------------------- the node's rule


def _phases(specs, gave_up=()):
    jobs = FakeJobs(specs)
    said: list[tuple] = []
    ph = Phases(jobs, lambda kind, message, **kw: said.append((kind, message, kw)), lambda n: n in gave_up)
    return jobs, ph, said


def _wait_started(ph, name):
    from support.wait import wait_for
    wait_for(lambda: name not in ph._starting, 5, what="the launch thread")


GEN = JobSpec(name="gen", command=["true"])
EXT = JobSpec(name="ext", command=["true"], after=["gen"])


def test_a_job_waits_while_what_it_runs_after_runs_then_starts_when_it_exited_ok():
    jobs, ph, said = _phases([GEN, EXT])
    ph.tick()
    assert ph.notes["ext"] == "waiting for gen (not started)" and not jobs.launched
    jobs.set_state("gen", JobState.RUNNING)
    ph.tick()
    assert ph.notes["ext"] == "waiting for gen (running)" and not jobs.launched
    jobs.set_state("gen", JobState.EXITED, exit_code=0)
    ph.tick()
    _wait_started(ph, "ext")
    assert jobs.launched == ["ext"] and "ext" not in ph.notes
    assert [k for k, _, _ in said] == [EventKind.ACTION]
    ph.tick()
    assert jobs.launched == ["ext"]  # started once


@pytest.mark.parametrize("state, code, gave_up, blocked", [
    (JobState.FAILED, 1, False, "blocked: gen failed (exit code 1)"),
    (JobState.KILLED, None, False, "blocked: gen was killed"),
    (JobState.LOST, None, True, "blocked: gen lost (no exit code) and its restarts were given up"),
])
def test_a_job_is_blocked_when_what_it_runs_after_failed_for_good(state, code, gave_up, blocked):
    jobs, ph, said = _phases([GEN, EXT], gave_up={"gen"} if gave_up else ())
    jobs.set_state("gen", state, exit_code=code)
    ph.tick()
    ph.tick()
    assert ph.notes["ext"] == blocked and jobs.state("ext") is JobState.BLOCKED and not jobs.launched
    assert [(k, kw["key"]) for k, _, kw in said] == [(EventKind.BLOCKED, "blocked:ext")]  # said once


def test_a_failure_with_a_restart_to_come_is_waited_for_and_a_relaunch_unblocks():
    retried = JobSpec(name="gen", command=["true"], restart="on-failure")
    jobs, ph, said = _phases([retried, EXT])
    jobs.set_state("gen", JobState.FAILED, exit_code=3)
    ph.tick()
    assert ph.notes["ext"] == "waiting for gen (failed, exit code 3; to be restarted)" and not said
    jobs, ph, said = _phases([GEN, EXT])
    jobs.set_state("gen", JobState.FAILED, exit_code=3)
    ph.tick()
    jobs.set_state("gen", JobState.RUNNING, attempt=2)  # relaunched
    ph.tick()
    assert jobs.state("ext") is JobState.PENDING and ph.notes["ext"] == "waiting for gen (running)"
    assert [k for k, _, _ in said] == [EventKind.BLOCKED, EventKind.RESOLVED]


def test_a_job_on_another_node_starts_when_its_marker_appears(tmp_path):
    marker = tmp_path / "gen" / "_SUCCESS"
    ext = JobSpec(name="ext", command=["true"], after=["gen"], after_markers={"gen": str(marker)})
    jobs, ph, _ = _phases([ext])
    ph.tick()
    assert ph.notes["ext"] == f"waiting for gen (its marker {marker})" and not jobs.launched
    marker.parent.mkdir()
    marker.write_text("{}")
    ph.tick()
    _wait_started(ph, "ext")
    assert jobs.launched == ["ext"]


# ---------------------------------------------------------------- Slurm


def test_a_cluster_job_after_another_is_submitted_with_afterok(tmp_path):
    from gpudeck.agents.cluster.backend import ClusterJobs
    from gpudeck.agents.cluster.slurm import QueueRow
    from gpudeck.agents.contract.cluster import ClusterSpec
    from gpudeck.agents.sense.gpu import GpuSampler

    cluster = ClusterJobs(tmp_path / "home", "hpc", ClusterSpec(name="hpc", shared_dir=str(tmp_path / "shared")),
                        GpuSampler(enabled=False))
    gen = JobSpec(name="gen", command=["true"], cluster="hpc")
    ext = JobSpec(name="ext", command=["true"], cluster="hpc", after=["gen"])

    def row(array: str, index: int, state: str) -> QueueRow:
        return QueueRow(id=f"{array}_{index}", raw=array, index=index, state=state, reason="", node=None,
                        gres=None, elapsed_s=None, limit_s=None, name="gen")

    with pytest.raises(Exception, match="'gen', which is not in hpc's queue; launch gen first"):
        cluster.after_ids(ext)
    cluster.rows = {("gen", 0): row("4242", 0, "RUNNING")}
    ids = cluster.after_ids(ext)
    assert ids == ["4242"]
    argv = cluster.sbatch_argv(ext, [0], ids)
    assert "--dependency=afterok:4242" in argv and argv.index("--dependency=afterok:4242") < argv.index("--")
    assert not [a for a in cluster.sbatch_argv(gen, [0], cluster.after_ids(gen)) if a.startswith("--dependency")]
    cluster.rows = {("gen", 0): row("4242", 0, "COMPLETED")}
    assert cluster.after_ids(ext) == []  # done already: nothing to wait for
    cluster.rows = {("gen", 0): row("4242", 0, "FAILED")}
    with pytest.raises(Exception, match="blocked: 'gen' ended FAILED"):
        cluster.after_ids(ext)


def test_a_cluster_job_cannot_run_after_a_node_job():
    with pytest.raises(FleetError, match="a cluster job runs after jobs of its own cluster only"):
        parse_fleet(NODES + textwrap.dedent('''
            [[clusters]]
            name = "hpc"
            shared_dir = "/shared/gpudeck"
            [[jobs]]
            name = "gen"
            node = "a"
            command = "true"
            [[jobs]]
            name = "ext"
            cluster = "hpc"
            command = "true"
            after = ["gen"]
        '''), "fleet.toml")
