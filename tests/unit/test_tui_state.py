"""FleetState, the data the console renders: totals, rows, sparklines backfilled from
history, console-side alerts, and the `status --json` shape it must keep."""

from __future__ import annotations

import dataclasses

from gpudeck.agents.contract.wire import Alert, Engine, Gpu, History, Host, JobStatus, Progress, Sample, Snapshot
from gpudeck.console.messages import SnapshotReceived
from gpudeck.console.actions import Confirm, JobOp, Refuse, RunNow, plan_job_action, target_job
from gpudeck.console.formatting import human_duration, round_figures
from gpudeck.console.rows import GpuRow, NodeRow
from gpudeck.console.selection import select_alerts, select_fleet, select_jobs
from gpudeck.console.series import Recent, Series
from gpudeck.console.state import FleetState
from support.tui import PINNED_NOW, pinned_events, pinned_fleet


def pinned_state() -> FleetState:
    state = FleetState(pinned_fleet(), clock=lambda: PINNED_NOW)
    for ev in pinned_events():
        if isinstance(ev, History):
            state.apply_history(ev)
        elif isinstance(ev, Snapshot):
            state.apply(ev)
        else:
            _, node, reason, since, retry = ev
            state.mark_unreachable(node, reason, since, retry)
    return state


def test_totals_count_engine_tokens_once():
    t = pinned_state().totals()
    assert (t.nodes_up, t.nodes_total) == (1, 2)
    assert (t.gpus_busy, t.gpus_total) == (4, 4)  # gpu-b is down: its GPUs are not counted
    # gen is a client of sglang-0: the engine's 2,412 tok/s, not 2,412 + 2,390
    assert t.tokens_per_s == 2412.0
    assert t.slowest_job == "gen" and human_duration(t.slowest_eta_s) == "10h 16m"
    assert t.alerts == 4


def test_fleet_rows_mark_shared_unowned_and_stale_gpus():
    rows = pinned_state().fleet_rows()
    gpus = {r.key: r for r in rows if isinstance(r, GpuRow)}
    assert gpus["gpu:gpu-a:3"].shared and gpus["gpu:gpu-a:3"].jobs == ("gen", "sglang-0")
    assert gpus["gpu:gpu-a:2"].unowned and gpus["gpu:gpu-a:2"].unowned_pids == (4242,)
    assert gpus["gpu:gpu-a:2"].jobs == ()
    assert gpus["gpu:gpu-b:0"].stale
    down = next(r for r in rows if isinstance(r, NodeRow) and r.node == "gpu-b")
    assert down.state == "unreachable" and down.down_for_s == 240 and down.retry_in_s == 8


def test_rows_are_equal_when_nothing_visible_changed():
    a, b = pinned_state(), pinned_state()
    assert a.job_rows() == b.job_rows()
    assert a.fleet_rows() == b.fleet_rows()


def test_history_backfills_the_sparkline_without_counting_twice():
    fleet = pinned_fleet()
    now = [PINNED_NOW]
    state = FleetState(fleet, clock=lambda: now[0])
    gen = JobStatus("gen", "generate", "running", progress=Progress(1, 10, 1, 1.0, 100.0))
    host = Host("gpu-a", 1.0, 1, 1, 2, 0.0, 0.0, 0.0)
    state.apply(Snapshot("gpu-a", 1, PINNED_NOW - 100, host, [], [gen]))
    # the console slept; on reconnect the agent sends what it saw meanwhile, including the
    # sample the console already had
    samples = [Sample(PINNED_NOW - 100 + 15 * k, job_tokens_per_s={"gen": 200.0}) for k in range(7)]
    state.apply_history(History("gpu-a", samples))
    spark = state.job_detail("gpu-a/gen", spark_width=8).spark
    assert spark.count(None) <= 2 and 100.0 in spark and 200.0 in spark
    state.apply_history(History("gpu-a", samples))  # delivered again: nothing changes
    assert state.job_detail("gpu-a/gen", spark_width=8).spark == spark


def test_series_keeps_an_hour_of_buckets():
    s = Series(bucket_s=15.0, keep=4)
    for k in range(10):
        s.add(15.0 * k, float(k))
    assert len(s) == 4
    assert s.last(4, 15.0 * 9) == (6.0, 7.0, 8.0, 9.0)


def test_a_series_keeps_each_figure_apart():
    s = Series(bucket_s=10.0, keep=8, figures=3)
    s.add(0.0, 100.0, None, 4.0)
    s.add(5.0, 300.0, 7.0)  # the third figure has no reading here: its mean is of its own readings
    s.add(12.0, None, None, None)  # no reading at all: no bucket
    assert len(s) == 1
    assert s.last(2, 12.0) == (200.0, None) and s.last(2, 12.0, 1) == (7.0, None) and s.last(2, 12.0, 2) == (4.0, None)


def test_gpu_utilization_history_per_gpu_with_gaps_and_missing_readings():
    r = Recent(bucket_s=5.0, keep=3)
    for t in range(10):  # two buckets of five readings; GPU 1 answers every other time
        r.add(float(t), [10.0 * t, None if t % 2 else 50.0])
    assert r.values(0) == (20, 70) and r.values(1) == (50, 50)
    assert r.values(2) == ()  # no such GPU
    r.add(15.0, [1.0, 2.0, 3.0])  # a bucket later, and a third GPU: the bucket with no reading is None
    assert r.values(0) == (70, None, 1) and r.values(1) == (50, None, 2) and r.values(2) == (None, None, 3)


def test_gpu_rows_carry_their_utilization_history():
    state = FleetState(pinned_fleet(), clock=lambda: PINNED_NOW)
    host = Host("gpu-a", 1.0, 1, 1, 2, 0.0, 0.0, 0.0)
    for k in range(12):  # one snapshot a second: the 5 s buckets' means
        gpus = [Gpu(0, "u0", "H200", 1.0, 2.0, float(10 * (k // 5)), None, None),
                Gpu(2, "u2", "H200", 1.0, 2.0, 90.0, None, None)]  # GPU 1 not shown: indices, not positions
        state.apply(Snapshot("gpu-a", k + 1, PINNED_NOW - 20 + k, host, gpus, []))
    rows = {r.key: r for r in state.fleet_rows() if isinstance(r, GpuRow)}
    assert rows["gpu:gpu-a:0"].util_spark[-2:] == (10, 20) and rows["gpu:gpu-a:2"].util_spark[-1] == 90


def test_the_details_chart_series_follow_an_engine():
    state = FleetState(pinned_fleet(), clock=lambda: PINNED_NOW)
    host = Host("gpu-a", 1.0, 1, 1, 2, 0.0, 0.0, 0.0)
    for k in range(4):
        eng = Engine(url="http://127.0.0.1:30000/metrics", state="ready", flavor="sglang", tokens_per_s=1000.0 + k,
                     running=8.0, queued=float(k), kv_usage=0.5)
        job = JobStatus("sglang-0", "sglang-server", "running", engine=eng)
        state.apply(Snapshot("gpu-a", k + 1, PINNED_NOW - 15 * (3 - k), host, [], [job]))
    d = state.job_detail("gpu-a/sglang-0", spark_width=4)
    assert d.spark == (1000.0, 1001.0, 1002.0, 1003.0)
    assert d.running_series == (8.0,) * 4 and d.queued_series == (0.0, 1.0, 2.0, 3.0) and d.kv_series == (0.5,) * 4
    assert d.done_series == (None,) * 4  # an engine counts no items


def test_an_alert_shows_the_nodes_start_time_and_an_undated_one_says_so():
    state = FleetState(pinned_fleet(), clock=lambda: PINNED_NOW)
    host = Host("gpu-a", 1.0, 1, 1, 2, 0.0, 0.0, 0.0)
    alerts = [Alert("job_died", "job a died", job="a", since=PINNED_NOW - 3600),
              Alert("stalled", "job b: no progress", job="b"),  # from an agent older than `since`
              Alert("job_died", "job c died", job="c", since=PINNED_NOW - 60)]
    state.apply(Snapshot("gpu-a", 1, PINNED_NOW, host, [], [], alerts))
    rows = select_alerts(state.alert_rows())
    assert [(r.job, r.since) for r in rows] == [("c", PINNED_NOW - 60), ("a", PINNED_NOW - 3600), ("b", None)]
    state.clock = lambda: PINNED_NOW + 600  # the console's clock moves on: the node's times stay
    assert [r.since for r in select_alerts(state.alert_rows())] == [r.since for r in rows]


def test_filters_and_sorts_are_pure():
    state = pinned_state()
    jobs = state.job_rows()
    assert [r.name for r in select_jobs(jobs, "gen")] == ["gen"]
    assert [r.name for r in select_jobs(jobs, sort="state")][0] == "extract"  # failed first
    assert [r.name for r in select_jobs(jobs, sort="eta")][0] == "gen"
    fleet = select_fleet(state.fleet_rows(), "4242")
    assert [r.key for r in fleet] == ["node:gpu-a", "gpu:gpu-a:2", "proc:gpu-a:2:4242"]  # the GPU and its process
    assert [r.key for r in select_fleet(state.fleet_rows(), "4242", processes=False)] == ["node:gpu-a", "gpu:gpu-a:2"]
    assert [r.name for r in select_jobs(jobs, sort="name", reverse=True)] == sorted((r.name for r in jobs),
                                                                                   reverse=True)
    assert select_fleet(state.fleet_rows(), sort="problems")[0].key == "node:gpu-a"
    assert {r.kind for r in select_alerts(state.alert_rows(), "gpu")} >= {"shared_gpu", "unowned_gpu_process"}


def test_status_json_keeps_its_shape():
    doc = pinned_state().to_json()
    assert set(doc) == {"fleet", "nodes", "jobs", "alerts"}
    # the documented keys stay; new ones may come
    assert {"name", "reachable", "error", "unreachable_since", "gpus", "gpu_error", "host"} <= set(doc["nodes"][0])
    assert {"name", "node", "kind", "state", "pids", "gpus", "attempt", "exit_code", "done",
            "total", "tokens_per_s", "eta_s", "quality", "engine"} <= set(doc["jobs"][0])
    assert {"containment", "gpus_simulated"} <= set(doc["nodes"][0])
    assert {"last_kill", "last_tokens_per_s", "last_rate_at", "argv", "error"} <= set(doc["jobs"][0])
    assert {"node", "kind", "message", "job", "gpu", "pid"} <= set(doc["alerts"][0])
    # dollars and plans: a fleet file without prices has none, and says null, never 0
    engine = next(j for j in doc["jobs"] if j["name"] == "sglang-0")["engine"]["tokens_per_s"]
    assert doc["fleet"] == {"spent": None, "to_finish": None, "nodes_priced": 0, "idle_per_hour": None, "burned": None, "s3_bytes": None,
                           "s3_cost_per_month": None, "s3_price_per_gb_month": 0.023,
                            "tokens_per_s": round_figures(engine)}  # the engine's, not also gen's count of them
    assert all(n["price_per_hour"] is None and n["spent"] is None and n["to_finish"] is None for n in doc["nodes"])
    gen = next(j for j in doc["jobs"] if j["name"] == "gen")
    assert {"cost_per_m_tokens", "cost_per_useful_completion", "planned_wall_s", "projected_wall_s", "drift_pct",
            "plan", "plan_error", "first_started_at", "useful", "useful_of", "rate_per_s"} <= set(gen)
    assert gen["cost_per_m_tokens"] is None and gen["cost_per_useful_completion"] is None


def test_a_newer_snapshot_replaces_a_queued_one_of_the_same_node():
    snap = next(e for e in pinned_events() if isinstance(e, Snapshot))
    newer = SnapshotReceived(dataclasses.replace(snap, seq=snap.seq + 1))
    assert newer.can_replace(SnapshotReceived(snap))
    other = dataclasses.replace(snap, node="gpu-b")
    assert not newer.can_replace(SnapshotReceived(other))


def test_a_job_key_sends_the_contract_s_op_read_once_from_its_binding():
    """A job key's op is typed from its binding on: the binding's word (keymap.py's
    ``job('kill')``) is read once into a JobOp, which names the contract's op class it sends;
    ``job_request`` builds that class, and a move (several requests) is no one request."""
    import pytest

    from gpudeck.agents.contract import ops
    from gpudeck.console.actions import job_request
    from gpudeck.console.keymap import KEYMAP

    words = {k.action[len("job('"):-2] for k in KEYMAP if k.action.startswith("job(")}
    assert {JobOp.bound(w) for w in words} == set(JobOp)
    for op in JobOp:
        if op is JobOp.MOVE:
            assert op.request is None
            with pytest.raises(ValueError, match="move of gen is no one request"):
                job_request(op, "gen", 10.0)
            continue
        request = job_request(op, "gen", 10.0)
        assert op.request is not None and type(request) is op.request and request.name == op.value
        assert issubclass(op.request, ops.Op) and request.job == "gen"
    with pytest.raises(ValueError, match=r"job\('kil'\) in a key binding names no job op; the ops: kill, "):
        JobOp.bound("kil")


def test_what_a_job_key_does_is_data():
    rows = {r.name: r for r in pinned_state().job_rows()}
    kill = plan_job_action(JobOp.KILL, "gen", rows["gen"], read_only=False, grace_s=10.0)
    assert isinstance(kill, Confirm) and "SIGKILL after 10 s" in kill.question and kill.yes == "Kill"
    launch = plan_job_action(JobOp.LAUNCH, "gen", rows["gen"], read_only=False, grace_s=10.0)
    assert isinstance(launch, Confirm) and launch.yes == "Launch"  # it takes GPUs and starts spending: asks
    assert "Launch job [b]gen[/b] on gpu-a?" in launch.question and "attempt 3" in launch.question
    assert JobOp.LAUNCH.key == "L" and JobOp.KILL.key == "ctrl+k"  # l is the log's key, k moves up: k9s's kill
    assert isinstance(plan_job_action(JobOp.RELAUNCH, "extract", rows["extract"], read_only=False, grace_s=10.0),
                      RunNow)  # not running: nothing to kill first
    assert isinstance(plan_job_action(JobOp.KILL, "gen", rows["gen"], read_only=True, grace_s=10.0), Refuse)
    gpus = {r.key: r for r in pinned_state().fleet_rows() if isinstance(r, GpuRow)}
    assert target_job(gpus["gpu:gpu-a:3"]) is None  # two jobs: the key cannot choose
    assert target_job(gpus["gpu:gpu-a:2"]) is None  # memory no job owns
    assert target_job(rows["gen"]) == "gen"


def test_a_moved_jobs_row_says_where_it_moved_from_and_status_says_it_too(monkeypatch):
    import time

    from gpudeck.agents.contract.fencing import new_attempt_id
    from gpudeck.console.commands.status import render_status
    from gpudeck.console.placements import Placement, moved

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        state = pinned_state()
        place = Placement("gpu-b", "gpu-a", "gpu-a", new_attempt_id("gpu-b", now=PINNED_NOW - 7200), PINNED_NOW - 7200)
        # extract's placement no longer holds: the fleet file names gpu-a, not the node it moved to
        gone = Placement("gpu-b", "gpu-c", "gpu-c", new_attempt_id("gpu-b", now=1.0), 1.0)
        state.set_moves(moved(state.fleet, {"audit": place, "extract": gone}))
        rows = {r.name: r for r in state.job_rows()}
        assert rows["audit"].moved == "moved from gpu-a 10:00" and rows["extract"].moved is None
        doc = {j["name"]: j for j in state.to_json()["jobs"]}
        assert doc["audit"]["moved_from"] == {"node": "gpu-a", "at": PINNED_NOW - 7200,
                                              "attempt_id": place.attempt_id}
        assert doc["gen"]["moved_from"] is None
        assert f"  moved from gpu-a at 10:00 (attempt id {place.attempt_id})" in render_status(state)
        # a day or more ago: with its date
        state.set_moves({"audit": dataclasses.replace(place, at=PINNED_NOW - 2 * 86400)})
        assert next(r for r in state.job_rows() if r.name == "audit").moved == "moved from gpu-a Nov 28 12:00"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_the_cli_row_of_a_blocked_phase_says_why_as_the_tui_does():
    from gpudeck.console.commands.status import render_status

    why = "blocked: extract failed (exit code 3); relaunch extract, or launch eval by hand"
    state = FleetState(pinned_fleet(), clock=lambda: PINNED_NOW)
    host = Host("gpu-a", 1.0, 1, 1, 2, 0.0, 0.0, 0.0)
    state.apply(Snapshot("gpu-a", 1, PINNED_NOW, host, [], [JobStatus("gen", "generate", "blocked", waiting=why)]))
    assert next(r for r in state.job_rows() if r.name == "gen").flags[0].startswith("blocked: extract failed")  # the TUI
    lines = render_status(state).splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.startswith("gen "))
    assert "blocked" in lines[row] and lines[row + 1] == f"  {why}"


def test_a_job_never_launched_reads_not_started_and_a_task_slurm_holds_queued_by_slurm():
    """"pending" said both, and a newcomer read it as about to start: a job never launched reads
    `not started` (`not_started` in --json), a task in Slurm's queue `queued`, "queued by Slurm"."""
    from gpudeck.agents.contract.wire import TaskInfo
    from gpudeck.console.commands.status import render_status

    state = FleetState(pinned_fleet(), clock=lambda: PINNED_NOW)
    host = Host("gpu-a", 1.0, 1, 1, 2, 0.0, 0.0, 0.0)
    task = TaskInfo("extract", 3, array_id="14", scheduler_state="PENDING", reason="Priority")
    state.apply(Snapshot("gpu-a", 1, PINNED_NOW, host, [], [JobStatus("gen", "generate", "pending"),
                                                            JobStatus("extract/3", "extract", "pending", task=task)]))
    rows = {r.name: r for r in state.job_rows()}
    assert rows["gen"].state == "not_started" and rows["gen"].state.text == "not started"
    assert rows["extract/3"].state == "queued" and rows["extract/3"].flags[0] == "queued by Slurm: Priority"
    doc = {j["name"]: j for j in state.to_json()["jobs"]}
    assert doc["gen"]["state"] == "not_started" and doc["extract/3"]["state"] == "queued"
    text = render_status(state)
    assert "pending" not in text, text
    gen = next(ln for ln in text.splitlines() if ln.startswith("gen "))
    assert gen.split()[3:5] == ["not", "started"], gen
    assert "  queued by Slurm: Slurm 14_3 PENDING, Priority" in text, text
    # a task never submitted (no array id, not listed) is not started, like any job never launched
    state.apply(Snapshot("gpu-a", 2, PINNED_NOW, host, [], [JobStatus("extract/4", "extract", "pending",
                                                                      task=TaskInfo("extract", 4,
                                                                                    note="not submitted"))]))
    assert next(r for r in state.job_rows() if r.name == "extract/4").state == "not_started"
