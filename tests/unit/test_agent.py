"""The agent process: hello, snapshots, bad input, history, exit on stdin close, --once.

The unit tier's tests of this file (starts nothing); the others are in tests/system/test_agent.py."""

from __future__ import annotations


def test_a_gpu_the_node_does_not_have_is_an_alert():
    from gpudeck.agents.node.alerts import node_alerts
    from gpudeck.agents.contract.vocab import AlertKind, JobState
    from gpudeck.agents.contract.jobs import JobKind
    from gpudeck.agents.contract.wire import Gpu, JobStatus
    gpus = [Gpu(index=i, uuid=f"GPU-{i}", name="H200", mem_used_mib=0, mem_total_mib=1) for i in range(2)]
    jobs = [JobStatus(name="far", kind=JobKind.COMMAND, state=JobState.PENDING, gpus=[1, 99])]
    alerts = node_alerts(gpus, jobs, {}, None, {}, 0.0)
    assert [(a.kind, a.job, a.gpu) for a in alerts] == [(AlertKind.NO_SUCH_GPU, "far", 99)]
    assert "declares GPU 99; this node has 2 (0-1)" in alerts[0].message
    assert node_alerts([], jobs, {}, None, {}, 0.0) == []  # no NVML: nothing to check against
