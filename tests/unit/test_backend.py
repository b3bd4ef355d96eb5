"""The one seam between the agent and its jobs (agents/jobs/backend.py): both backends, the
node's supervisor and a cluster's Slurm jobs, answer every method of JobBackend, and the GPU
readers every member of GpuReader; the agent's ops table reaches the jobs through it alone,
whichever backend it holds."""

from __future__ import annotations

import inspect

import pytest

from gpudeck.agents.cluster.backend import ClusterJobs
from gpudeck.agents.contract import ops, wire
from gpudeck.agents.contract.cluster import ClusterSpec
from gpudeck.agents.contract.jobs import JobSpec
from gpudeck.agents.sense.gpu import GpuSampler
from gpudeck.agents.jobs.backend import GpuReader, JobBackend
from gpudeck.agents.simgpu import SimGpuSampler
from gpudeck.agents.jobs.supervisor import JobSupervisor
from support.jobs import FakeJobs


def _members(protocol: type) -> set[str]:
    names = {n for n, v in vars(protocol).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return names | set(protocol.__annotations__)


def _backends(tmp_path):
    gpu = GpuSampler(enabled=False)
    return [JobSupervisor(tmp_path / "node", gpu, node="n"),
            ClusterJobs(tmp_path / "login", "hpc", ClusterSpec(name="hpc", shared_dir=str(tmp_path / "shared")), gpu),
            FakeJobs()]


def test_both_backends_answer_every_method_of_the_seam(tmp_path):
    wanted = _members(JobBackend)
    assert {"statuses", "configure", "launch", "kill", "set_blocked", "read_note", "workdir"} <= wanted
    for jobs in _backends(tmp_path):
        missing = sorted(n for n in wanted if not hasattr(jobs, n))
        assert not missing, f"{type(jobs).__name__} lacks {missing}"
        for name in wanted & set(vars(JobBackend)):
            ours = getattr(type(jobs), name)
            assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(getattr(JobBackend, name)), name


def test_no_backend_leaves_a_method_unimplemented_or_subclasses_the_agent():
    from gpudeck.agents.node import agent
    from gpudeck.agents.jobs import kills as node_kills, launching, liveness, store, supervisor
    from gpudeck.agents.cluster import backend as cluster, core, kills, polling, submit
    for module in (supervisor, store, liveness, launching, node_kills, cluster, core, polling, submit, kills):
        assert "NotImplementedError" not in inspect.getsource(module), module.__name__
    assert not issubclass(ClusterJobs, agent.Agent) and not issubclass(JobSupervisor, agent.Agent)


def test_no_method_of_the_seam_hands_out_the_backend_s_own_collections(tmp_path):
    node = JobSupervisor(tmp_path / "node", GpuSampler(enabled=False), node="n")
    node.configure([JobSpec(name="a", command=["true"])])
    declared = node.declared()
    with pytest.raises(TypeError):
        declared["b"] = JobSpec(name="b", command=["true"])  # type: ignore[index]
    assert list(node.declared()) == ["a"]
    node.set_blocked("a", True)
    facts = node.facts("a")
    with pytest.raises(AttributeError):
        facts.state = None  # type: ignore[misc,union-attr]


def test_every_gpu_reader_has_every_member_of_the_reader(tmp_path):
    wanted = _members(GpuReader)
    for gpu in (GpuSampler(enabled=False), SimGpuSampler(tmp_path, "2xH200:141")):
        assert not sorted(n for n in wanted if not hasattr(gpu, n)), type(gpu).__name__
    assert SimGpuSampler(tmp_path, "1xH200:141").health_reader() is not None
    assert GpuSampler(enabled=False).health_reader() is None


@pytest.mark.parametrize("op, called", [
    (ops.Launch(job="a"), "launched"), (ops.Relaunch(job="a", grace_s=3.0), "relaunches"),
])
def test_the_ops_table_reaches_the_jobs_through_the_backend_it_holds(tmp_path, op, called):
    from gpudeck.agents.node.agent import Agent

    jobs = FakeJobs([JobSpec(name="a", command=["true"])])
    agent = Agent(tmp_path / "home", "n", jobs, GpuSampler(enabled=False))
    try:
        reply = agent.handle(wire.Request(id=1, op=op.name, args={}), op)
        assert reply.ok, reply.error
        assert getattr(jobs, called) == ["a"]
        refused = agent.handle(wire.Request(id=2, op="kill_pid", args={}), ops.KillPid(pid=42))
        assert not refused.ok and "fake backend kills no process" in refused.error
    finally:
        agent.watch.close()



def test_an_audit_line_names_its_action_from_one_enum(tmp_path):
    """Audit actions are AuditAction's (agents/contract/vocab.py), spelled on disk as before; a
    word outside it (the op's ``kill_pid`` for the line's ``kill-pid``) writes no line."""
    import json

    from gpudeck.agents.contract.vocab import AuditAction
    from gpudeck.agents.jobs.audit import AuditLog

    log, seen = AuditLog(tmp_path / "audit.log", "n1"), []
    log.on_audit(lambda action, job, entry: seen.append((action, job, entry["action"])))
    log.write(AuditAction.KILL_PID, None, pid=5)
    with pytest.raises(ValueError):
        log.write("kill_pid", None, pid=5)
    lines = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
    assert [(e["action"], e["pid"]) for e in lines] == [("kill-pid", 5)]
    assert seen == [(AuditAction.KILL_PID, None, "kill-pid")] and type(seen[0][0]) is AuditAction
    assert {a.value for a in AuditAction} >= {"kill-pid", "kill-start", "adopt-ended", "restart-gave-up"}
