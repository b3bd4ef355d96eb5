"""Plans against reality and dollars, as pure functions: the drift text and the plan_drift
condition on the seed's figures, plan.json read only when it changes (and a broken one named,
never a crash), the cost arithmetic, and the console state and header over a priced fleet.

The unit tier's tests of this file (starts nothing); the others are in tests/tui/test_cost.py."""

from __future__ import annotations

import json
import logging
import os

import pytest

from gpudeck.agents.jobs import planwatch
from gpudeck.agents.contract.vocab import JobState
from gpudeck.agents.jobs.planwatch import PlanWatch
from gpudeck.agents.contract import documents
from gpudeck.agents.contract.documents import drift_pct, drift_text, over_plan
from gpudeck.agents.contract.wire import Host, JobPlan, JobStatus, Progress, Snapshot
from gpudeck.agents.jobs.records import JobRecord, first_start_of
from gpudeck.agents.watch.checks import Checks
from gpudeck.agents.contract.watching import AlertThresholds
from gpudeck.console import cost
from gpudeck.console.state import FleetState
from gpudeck.remote.fleet import parse_fleet
from support.cost import HOUR, NOW, PLANNED, PRICED, REAL, _gen, _priced_state


# ---------------------------------------------------------------- the plan against reality


def test_the_drift_text_of_the_seed_case():
    assert drift_text(PLANNED, REAL) == "planned 5d 2h, now 16d 11h (+224%)"
    assert drift_pct(PLANNED, REAL) == 223.8
    assert drift_text(REAL, PLANNED) == "planned 16d 11h, now 5d 2h (-69%)"
    assert drift_text(PLANNED, None) == "planned 5d 2h, now -"
    assert drift_pct(None, REAL) is None and drift_pct(0.0, REAL) is None


def _plan_file(tmp_path, **doc) -> str:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    path = out / "plan.json"
    path.write_text(json.dumps({"projected_wall_s": PLANNED, "written_at": NOW - 2 * HOUR, **doc}))
    return str(path)


def _spec(tmp_path):
    from gpudeck.agents.contract.jobs import JobSpec
    return JobSpec(name="gen", kind="generate", options={"out": str(tmp_path / "out"), "prompts": "p.jsonl",
                                                         "servers": ["http://127.0.0.1:1"]})


def test_within_the_first_hour_a_job_at_a_third_of_its_planned_rate_is_an_alert(tmp_path):
    """The seed's case: a plan of about 5 days; an hour in, the job's real rate heads for 16.5."""
    _plan_file(tmp_path)
    total = 902_087
    rate = total / REAL  # items a second, measured over the job's first hour
    done = int(rate * HOUR)
    progress = Progress(done=done, total=total, rate_per_s=rate, eta_s=(total - done) / rate)
    rec = JobRecord(name="gen", state=JobState.RUNNING, started_at=NOW - HOUR, first_started_at=NOW - HOUR)
    fields = PlanWatch(lambda name: tmp_path).fields("gen", _spec(tmp_path), rec, progress, NOW)
    plan = fields["plan"]
    assert fields["first_started_at"] == NOW - HOUR and plan.since == NOW - HOUR  # the plan was written before
    assert plan.planned_wall_s == PLANNED and plan.projected_wall_s == pytest.approx(REAL, abs=2)
    assert drift_text(plan.planned_wall_s, plan.projected_wall_s) == "planned 5d 2h, now 16d 11h (+224%)"
    job = JobStatus("gen", "generate", JobState.RUNNING, progress=progress, plan=plan)
    now_true, _ = Checks().evaluate(NOW, [], [job], None, [], [], AlertThresholds(), {})
    (drift,) = [c for c in now_true if c.key == "plan_drift:gen"]
    assert drift.alert == "plan_drift" and drift.event == "plan_drift" and drift.job == "gen"
    assert "planned 5d 2h, now 16d 11h (+224%), more than 25% over its plan" in drift.message
    # back within 25% (a plan of 14 days): no condition, so the watcher resolves it
    back = JobStatus("gen", "generate", JobState.RUNNING, progress=progress,
                     plan=JobPlan(plan.path, 14 * 86400.0, plan.projected_wall_s, drift_pct(14 * 86400.0, REAL)))
    now_true, _ = Checks().evaluate(NOW, [], [back], None, [], [], AlertThresholds(), {})
    assert not [c for c in now_true if c.key.startswith("plan_drift")]


def test_an_attempt_in_its_warm_up_raises_no_drift_however_slow_its_first_minutes():
    """The demo on a loaded machine opened with a plan_drift alert from its own warm-up: a rate
    over its first minutes holds the ramp from nothing. An attempt's first 5 minutes (at most a
    tenth of its plan) and a job getting ready judge no drift; past them, the drift is an alert."""
    from gpudeck.agents.contract.wire import Engine

    def drifting(started_ago: float, planned: float = PLANNED, **kw) -> bool:
        job = JobStatus("gen", "generate", JobState.RUNNING, started_at=NOW - started_ago,
                        progress=Progress(done=10, total=10_000, rate_per_s=0.01, eta_s=999_000.0, **kw),
                        plan=JobPlan("/data/plan.json", planned, 10 * planned, drift_pct(planned, 10 * planned)))
        now_true, _ = Checks().evaluate(NOW, [], [job], None, [], [], AlertThresholds(), {})
        return any(c.key == "plan_drift:gen" for c in now_true)

    assert not drifting(60.0) and not drifting(299.0)  # a plan of days: 5 minutes of warm-up
    assert drifting(301.0)
    assert not drifting(8.0, planned=83.0) and drifting(9.0, planned=83.0)  # a plan of 83 s: a tenth of it
    assert not drifting(3600.0, phase="loading", phase_since=NOW - 60)  # getting ready: not its pace yet
    assert drifting(3600.0)


def test_a_job_ahead_of_its_plan_is_no_alert_and_no_warning():
    """Three times faster than planned: the figures say so (-67%), and nothing wakes anyone: no
    plan_drift condition, no flag, no warning colour in the console."""
    ahead = drift_pct(REAL, PLANNED)
    assert ahead < -25 and drift_text(REAL, PLANNED) == "planned 16d 11h, now 5d 2h (-69%)"
    progress = Progress(done=10, total=100, rate_per_s=1.0, eta_s=90.0)
    job = JobStatus("gen", "generate", JobState.RUNNING, progress=progress,
                    plan=JobPlan("/data/plan.json", REAL, PLANNED, ahead))
    now_true, _ = Checks().evaluate(NOW, [], [job], None, [], [], AlertThresholds(), {})
    assert not [c for c in now_true if c.key.startswith("plan_drift")]
    state = FleetState(parse_fleet(PRICED, "priced.toml"), clock=lambda: NOW)
    state.apply(Snapshot("gpu-a", 1, NOW, Host("h", 1.0, 1, 1, 2, 0.0, 0.0, 0.0), [], [job]))
    (row,) = state.job_rows()
    assert row.drift_pct == -69 and not row.plan_off and not any(f.startswith("plan") for f in row.flags)
    assert not over_plan(ahead, 25.0) and over_plan(drift_pct(PLANNED, REAL), 25.0)
    assert not over_plan(25.0, 25.0) and not over_plan(None, 25.0)


def test_a_plan_made_mid_run_counts_from_when_it_was_written_and_a_finished_job_from_what_it_took(tmp_path):
    _plan_file(tmp_path, written_at=NOW - HOUR)
    watch = PlanWatch(lambda name: tmp_path)
    live = JobRecord(name="gen", state=JobState.RUNNING, started_at=NOW - 2 * HOUR, first_started_at=NOW - 9 * HOUR)
    plan = watch.fields("gen", _spec(tmp_path), live, Progress(done=10, total=20, eta_s=HOUR), NOW)["plan"]
    assert plan.since == NOW - HOUR and plan.projected_wall_s == 2 * HOUR
    done = JobRecord(name="gen", state=JobState.EXITED, started_at=NOW - 2 * HOUR, first_started_at=NOW - 9 * HOUR,
                     ended_at=NOW - 0.5 * HOUR)
    plan = watch.fields("gen", _spec(tmp_path), done, Progress(done=20, total=20), NOW)["plan"]
    assert plan.projected_wall_s == 0.5 * HOUR
    killed = JobRecord(name="gen", state=JobState.KILLED, started_at=NOW - HOUR, ended_at=NOW)
    assert watch.fields("gen", _spec(tmp_path), killed, None, NOW)["plan"].drift_pct is None


def test_plan_json_is_read_again_only_when_its_mtime_changes(tmp_path, monkeypatch):
    path = _plan_file(tmp_path)
    reads = []
    real = documents.read_plan
    monkeypatch.setattr(planwatch, "read_plan", lambda p: reads.append(p) or real(p))
    watch = PlanWatch(lambda name: tmp_path)
    rec = JobRecord(name="gen", state=JobState.RUNNING, started_at=NOW - HOUR)
    spec = _spec(tmp_path)
    for _ in range(100):  # a hundred ticks
        assert watch.fields("gen", spec, rec, None, NOW)["plan"].planned_wall_s == PLANNED
    assert reads == [path]
    # a new plan of the same size, with the old mtime put back: not read (the mtime is the signal)
    st = os.stat(path)
    with open(path, "w") as f:
        f.write(json.dumps({"projected_wall_s": PLANNED + 1, "written_at": NOW - 2 * HOUR}))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert watch.fields("gen", spec, rec, None, NOW)["plan"].planned_wall_s == PLANNED and len(reads) == 1
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert watch.fields("gen", spec, rec, None, NOW)["plan"].planned_wall_s == PLANNED + 1 and len(reads) == 2
    os.unlink(path)
    assert "plan" not in watch.fields("gen", spec, rec, None, NOW)


@pytest.mark.parametrize("text, says", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"projected_wall_s": "5d"}', "projected_wall_s: expected a number, got '5d'"),
    ('{"projected_wall_s": -3}', "projected_wall_s: must be seconds above 0 (or null), got -3"),
    ('{"projected_wall_s": 10, "written_at": "yesterday"}', "written_at: expected a number, got 'yesterday'"),
])
def test_a_broken_plan_is_named_on_the_job_and_in_the_log_once_and_the_last_good_one_kept(tmp_path, caplog,
                                                                                          text, says):
    path = _plan_file(tmp_path)
    watch = PlanWatch(lambda name: tmp_path)
    rec = JobRecord(name="gen", state=JobState.RUNNING, started_at=NOW - HOUR)
    spec = _spec(tmp_path)
    assert watch.fields("gen", spec, rec, None, NOW)["plan"].error is None
    with open(path, "w") as f:
        f.write(text)
    with caplog.at_level(logging.WARNING, logger="agents"):
        for _ in range(5):
            plan = watch.fields("gen", spec, rec, None, NOW)["plan"]
    assert plan.error.startswith(f"{path}: ") and says in plan.error
    assert plan.planned_wall_s == PLANNED  # the last good reading
    (warning,) = [r.getMessage() for r in caplog.records if "plan.json" in r.getMessage()]
    assert "job gen: " in warning and says in warning


def test_a_runs_first_start_goes_on_through_restarts_and_begins_again_after_a_clean_exit():
    assert first_start_of(JobRecord(name="j"), NOW) == NOW  # a first launch
    failed = JobRecord(name="j", state=JobState.FAILED, started_at=NOW - HOUR, first_started_at=NOW - 5 * HOUR)
    assert first_start_of(failed, NOW) == NOW - 5 * HOUR
    older_agent = JobRecord(name="j", state=JobState.KILLED, started_at=NOW - HOUR)
    assert first_start_of(older_agent, NOW) == NOW - HOUR
    finished = JobRecord(name="j", state=JobState.EXITED, started_at=NOW - HOUR, first_started_at=NOW - 5 * HOUR)
    assert first_start_of(finished, NOW) == NOW


def test_dollars_per_million_tokens_and_per_useful_completion():
    assert cost.cost_per_m_tokens(36.0, 10_000.0) == pytest.approx(1.0)  # 36 M tokens an hour for $36
    assert cost.cost_per_m_tokens(None, 10_000.0) is None and cost.cost_per_m_tokens(36.0, 0.0) is None
    # two generation jobs share a $36/h node in proportion to their tokens: $27/h and $9/h
    a = _gen("a", 7_500.0, 2.0, useful=900, useful_of=1000)
    b = _gen("b", 2_500.0, 1.0)  # counts no useful records (an older worker)
    server = JobStatus("sglang", "sglang-server", "running")
    costs = cost.generation_costs(36.0, [a, b, server])
    assert set(costs) == {"a", "b"}
    assert costs["a"].per_m_tokens == pytest.approx(1.0) and costs["b"].per_m_tokens == pytest.approx(1.0)
    assert costs["a"].per_useful == pytest.approx(27.0 / (2.0 * 3600 * 0.9))  # 6,480 useful completions an hour
    assert cost.dollars(costs["a"].per_useful) == "$0.0042"
    assert costs["b"].per_useful is None
    assert cost.generation_costs(None, [a, b]) == {}


def test_spent_and_to_finish_per_node_and_for_the_fleet():
    live = _gen("a", 100.0, 1.0, first=NOW - 5 * HOUR, eta=2.5 * HOUR)
    live2 = _gen("b", 100.0, 1.0, first=NOW - 2 * HOUR, eta=1.0 * HOUR)
    ended = JobStatus("old", "command", "exited", started_at=NOW - 8 * HOUR, ended_at=NOW - 6 * HOUR)
    # live jobs: from the earliest first start of the live ones (the one that ended is not billed again)
    assert cost.node_spent(10.0, [live, live2, ended], NOW) == pytest.approx(50.0)
    assert cost.node_to_finish(10.0, [live, live2, ended]) == pytest.approx(25.0)  # the slowest ETA
    # nothing live: the time its jobs ran; to finish: nothing
    later = JobStatus("later", "command", "failed", started_at=NOW - 3 * HOUR, first_started_at=NOW - 7 * HOUR,
                      ended_at=NOW - 1 * HOUR)
    assert cost.node_spent(10.0, [ended, later], NOW) == pytest.approx(70.0)
    assert cost.node_to_finish(10.0, [ended, later]) == 0.0
    assert cost.node_spent(10.0, [], NOW) == 0.0  # priced, nothing ran
    assert cost.node_to_finish(10.0, [_gen("c", 1.0, 1.0)]) is None  # live, no ETA yet: unknown, not $0
    assert cost.node_spent(None, [live], NOW) is None and cost.node_to_finish(None, [live]) is None
    fleet = cost.fleet_cost([cost.NodeCost(10.0, 50.0, 25.0), cost.NodeCost(None, None, None),
                             cost.NodeCost(4.0, 8.0, None)])
    assert (fleet.spent, fleet.to_finish, fleet.nodes_priced) == (58.0, 25.0, 2)
    assert cost.fleet_cost([cost.NodeCost(None, None, None)]) == cost.FleetCost(None, None, 0)
    # a priced node that does not answer knows neither figure: the fleet's are unknown too, never $0
    assert cost.fleet_cost([cost.NodeCost(10.0, None, None)]) == cost.FleetCost(None, None, 1)
    assert cost.fleet_cost([cost.NodeCost(10.0, None, None), cost.NodeCost(4.0, 8.0, 2.0)]) == \
        cost.FleetCost(8.0, 2.0, 2)
    assert [cost.dollars(v) for v in (12_345.6, 123.4, 3.1, 0.5, 0.0, None)] == \
        ["$12,346", "$123", "$3.10", "$0.50", "$0.00", "—"]


def test_the_console_state_over_a_priced_fleet():
    state = _priced_state()
    t = state.totals()
    assert t.priced and t.spent == 180.0 and t.to_finish == 90.0  # gpu-b has no price: not counted, not $0
    rows = {r.name: r for r in state.job_rows()}
    assert rows["gen"].cost_per_m_tokens == 1.0 and rows["gen"].cost_per_useful == pytest.approx(0.00556, rel=1e-3)
    assert (rows["gen"].planned_s, rows["gen"].drift_pct) == (PLANNED, 224)
    assert rows["gen-b"].priced is False and rows["gen-b"].cost_per_m_tokens is None
    doc = state.to_json()
    assert doc["fleet"] == {"spent": 180.0, "to_finish": 90.0, "nodes_priced": 1, "idle_per_hour": None, "burned": None, "s3_bytes": None,
                           "s3_cost_per_month": None, "s3_price_per_gb_month": 0.023,
                           "tokens_per_s": t.tokens_per_s}
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert (nodes["gpu-a"]["price_per_hour"], nodes["gpu-a"]["spent"], nodes["gpu-a"]["to_finish"]) == (36, 180.0, 90.0)
    assert (nodes["gpu-b"]["price_per_hour"], nodes["gpu-b"]["spent"], nodes["gpu-b"]["to_finish"]) == (None,) * 3
    jobs = {j["name"]: j for j in doc["jobs"]}
    assert jobs["gen"]["cost_per_m_tokens"] == 1.0 and jobs["gen"]["drift_pct"] == 223.8
    assert jobs["gen"]["planned_wall_s"] == PLANNED and jobs["gen"]["projected_wall_s"] == REAL
    assert jobs["gen-b"]["cost_per_m_tokens"] is None and jobs["gen-b"]["cost_per_useful_completion"] is None
    from gpudeck.console.commands.status import render_status
    text = render_status(state)
    assert "gpu-a (h): " in text and ", $36/h: $180 spent, $90.00 to finish" in text and ", price —" in text
    assert "  plan: planned 5d 2h, now 16d 11h (+224%)" in text
    assert "  cost: $1.00 per M output tokens, $0.0056 per useful completion" in text
    assert "  cost: — (node gpu-b has no price_per_hour)" in text
    assert "fleet: $180 spent, $90.00 to finish at the current rate" in text
