"""A real generate job, run by a real agent against a sim-engine, whose plan.json promised
three times the rate the server can give: the drift alert comes up and is notified, the
console state shows dollars per M tokens and per useful completion from the job's own
counters, a corrected plan resolves the alert, and a broken plan.json is named on the job
and in the agent's log while the agent goes on."""

from __future__ import annotations

import json
import os
import time

import pytest

from gpudeck.agents.contract.wire import Snapshot, from_dict
from gpudeck.console.state import FleetState
from gpudeck.remote.fleet import parse_fleet
from support.generate import write_prompts
from support.watch import Receiver, events

pytestmark = pytest.mark.system  # a sim-engine, a real agent and a webhook receiver

PROMPTS = 5000
CONCURRENCY = 2
LATENCY_S = 0.1  # per request: the server gives at most CONCURRENCY / LATENCY_S = 20 completions a second


def _write_plan(path, doc) -> None:
    """Replace plan.json as `gpudeck plan` does (a new file, renamed over), a new mtime each time."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    os.replace(tmp, path)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # coarse clocks: a visibly new version


def test_a_generate_job_at_a_third_of_its_planned_rate(tmp_path, sim_engines, start_agent, reap_jobs, home):
    sim = sim_engines("--latency-ms", str(LATENCY_S * 1000), "--out-tokens", "8-40")
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, PROMPTS)
    out = tmp_path / "out"
    out.mkdir()
    best = CONCURRENCY / LATENCY_S
    plan = out / "plan.json"
    _write_plan(plan, {"prompts": PROMPTS, "completions_per_s": 3 * best, "projected_wall_s": PROMPTS / (3 * best),
                       "written_at": time.time() - 60})
    rx = Receiver()
    try:
        a = start_agent(interval=0.2)
        a.ok("configure", jobs=[{"name": "gen", "kind": "generate",
                                 "options": {"servers": [sim.url], "prompts": str(prompts), "out": str(out),
                                             "concurrency": CONCURRENCY, "max_tokens": 30}}],
             watch={"notify": [{"url": rx.url, "events": ["plan_drift", "resolved"]}]})
        a.ok("launch", job="gen")

        def drifting(s):
            return any(al["kind"] == "plan_drift" and al["job"] == "gen" for al in s["alerts"])
        snap = a.wait_snapshot(drifting, 90, what="a plan_drift alert")
        job = a.job(snap, "gen")
        p = job["plan"]
        assert p["path"] == str(plan) and p["error"] is None and p["planned_wall_s"] == pytest.approx(83.3, abs=0.1)
        assert p["drift_pct"] >= 100, p  # a third of the planned rate at best: about +200%
        (alert,) = [al for al in snap["alerts"] if al["kind"] == "plan_drift"]
        assert alert["message"].startswith("job gen: planned 1m 23s, now ")
        assert "more than 25% over its plan" in alert["message"]
        rx.wait(lambda ms: any(m["kind"] == "plan_drift" and m["job"] == "gen" for m in ms), 30, what="plan_drift")

        # the console's view of the same snapshot, on a node that costs $36 an hour
        fleet = parse_fleet('[[nodes]]\nname = "testnode"\nprice_per_hour = 36\n', "fleet.toml")
        snap = a.wait_snapshot(lambda s: (a.job(s, "gen")["progress"] or {}).get("useful_of", 0) > 20, 60,
                               what="useful records counted")
        state = FleetState(fleet, clock=lambda: snap["t"])
        state.apply(from_dict(Snapshot, snap))
        progress = a.job(snap, "gen")["progress"]
        assert 0 < progress["useful"] < progress["useful_of"] <= progress["done"]  # some are cut at max_tokens
        (row,) = state.job_rows()
        assert row.priced and row.cost_per_m_tokens == pytest.approx(36e6 / (progress["tokens_per_s"] * 3600),
                                                                     rel=6e-3)
        useful = progress["useful"] / progress["useful_of"]
        assert row.cost_per_useful == pytest.approx(36 / (progress["rate_per_s"] * 3600 * useful), rel=6e-3)
        assert "plan +" in " ".join(row.flags) and row.drift_pct >= 100
        doc = state.to_json()
        assert doc["fleet"]["nodes_priced"] == 1 and doc["fleet"]["spent"] > 0 and doc["fleet"]["to_finish"] > 0
        assert doc["jobs"][0]["cost_per_m_tokens"] == pytest.approx(row.cost_per_m_tokens, rel=6e-3)

        # a plan that matches what the job does now: back within 25%, resolved (and notified)
        now = a.job(a.latest(), "gen")["plan"]["projected_wall_s"]
        _write_plan(plan, {"projected_wall_s": now, "written_at": time.time() - 60})
        a.wait_snapshot(lambda s: not drifting(s) and a.job(s, "gen")["plan"]["planned_wall_s"] == now, 30,
                        what="the drift resolved")
        rx.wait(lambda ms: any(m["kind"] == "resolved" and m["key"] == "plan_drift:gen" for m in ms), 30,
                what="resolved")
        kinds = [e["kind"] for e in events(home) if e.get("key") == "plan_drift:gen"]
        assert kinds[:2] == ["plan_drift", "resolved"]

        # a broken plan.json: named on the job and in the agent's log; the agent goes on ticking
        _write_plan(plan, "{half a plan")
        snap = a.wait_snapshot(lambda s: (a.job(s, "gen")["plan"] or {}).get("error"), 30, what="the plan's error")
        assert "not valid JSON" in a.job(snap, "gen")["plan"]["error"]
        seq = snap["seq"]
        a.wait_snapshot(lambda s: s["seq"] > seq + 5, 30, what="more ticks")
        assert any("plan.json" in line and "not valid JSON" in line for line in a.stderr)
        assert a.proc.poll() is None
    finally:
        rx.stop()
