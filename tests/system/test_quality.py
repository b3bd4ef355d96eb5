"""Junk is heard mid-run, with nobody looking: a generate job under a detached watcher, against
a simulated engine that answers with junk (`sim-engine --junk`), a webhook receiver on loopback
and a phase after the job. Real CLI, real watcher, real worker, real HTTP."""

from __future__ import annotations

import json

import pytest

from support.generate import read_shards, write_prompts
from support.wait import wait_for
from support.watch import events, gpudeck_watch, job_state, stop_watch, wait_state, write_fleet

pytestmark = pytest.mark.system  # a detached watcher, a generate worker, a sim-engine and a receiver


@pytest.fixture
def watched(home):
    yield home
    stop_watch(home)


def _start(fleet) -> None:
    for args in (("watch", "start", "--supervise", "none"), ("launch", "gen")):
        r = gpudeck_watch(*args, "-f", str(fleet))
        assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.timeout(300)
def test_answers_all_cut_at_max_tokens_are_heard_within_a_minute_and_block_the_next_phase(
        tmp_path, home, watched, receiver, sim_engines):
    sim = sim_engines("--junk", "cut", "--latency-ms", "20")
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out"
    write_prompts(prompts, 1500)
    fleet = write_fleet(tmp_path / "fleet.toml", home, notify=f'''
        [[notify]]
        url = "{receiver.url}"
        events = ["quality", "blocked"]

        [heartbeat]
        url = "{receiver.url}"
        every = 1
        on_quality = true
    ''', jobs=f'''
        [[jobs]]
        name = "gen"
        kind = "generate"
        servers = ["{sim.url}"]
        prompts = "{prompts}"
        out = "{out}"
        concurrency = 4
        max_tokens = 32
        restart = "on-failure"
        restart_backoff_s = 0.2

        [[jobs]]
        name = "ext"
        command = ["sh", "-c", "touch '{tmp_path}/extracted'"]
        after = ["gen"]
    ''')
    _start(fleet)

    # the alert reaches the receiver within a minute of the launch, naming the share, the window and an id
    got = receiver.wait(lambda ms: [m for m in ms if m.get("kind") == "quality"], 60, what="a quality notification")
    m = got[0]
    assert m["job"] == "gen" and m["details"]["problem"] == "cut_at_max_tokens", m
    assert m["details"]["window"] >= 100 and m["details"]["share_pct"] == 100.0
    assert "100% of its last" in m["message"] and "completions cut at max_tokens (limit 20%); e.g. id p" in m["message"]
    # the heartbeat goes to /fail while the alert is up (on_quality = true)
    wait_for(lambda: any(path.endswith("/fail") for _, path in receiver.gets), 30, what="a /fail ping")

    # the run ends: every prompt done, none useful: exit 4, no _SUCCESS but _QUALITY, never restarted
    end = wait_state(home, "gen", lambda s: s.get("state") in ("exited", "failed"), 180, what="gen to end")
    log = (home / "jobs" / "gen" / "job.log").read_text()
    assert end["state"] == "failed" and end["exit_code"] == 4, log[-3000:]
    assert not (out / "_SUCCESS").exists() and not (home / "jobs" / "gen" / "_SUCCESS").exists()
    doc = json.loads((out / "_QUALITY").read_text())
    assert doc["ok"] is False and doc["done"] == 1500 and doc["useful"] == 0 and doc["useful_of"] == 1500
    assert doc["problems"]["cut_at_max_tokens"] == 1500 and doc["min_useful_pct"] == 50.0
    assert doc["why"].startswith("0.0% of the 1500 records counted are useful, under --min-useful-pct 50%")
    restarts = home / "jobs" / "gen" / "restarts.json"
    wait_for(lambda: "not restarted: exit code 4" in (json.loads(restarts.read_text()).get("note") or "")
             if restarts.exists() else False, 30, what="the watcher's note that exit 4 is not restarted")
    assert job_state(home, "gen")["attempt"] == 1

    # the phase after it is blocked, saying why; the receiver hears that too
    wait_state(home, "ext", lambda s: s.get("state") == "blocked", 60, what="ext blocked")
    (blocked,) = wait_for(lambda: [e for e in events(home) if e["kind"] == "blocked"], 30, what="the blocked event")
    assert blocked["message"] == (f"job ext is blocked: gen ended with too few useful records: {doc['why']} "
                                  f"({out}/_QUALITY)")
    receiver.wait(lambda ms: any(m.get("kind") == "blocked" for m in ms), 60, what="the blocked notification")
    assert not (tmp_path / "extracted").exists()
    r = gpudeck_watch("status", "--json", "-f", str(fleet))
    rows = {j["name"]: j for j in json.loads(r.stdout)["jobs"]}
    assert rows["ext"]["waiting"].startswith("blocked: gen ended with too few useful records: 0.0% of the 1500")
    assert rows["gen"]["quality"]["cut_at_max_tokens"] == 1500 and rows["gen"]["quality_window"]["n"] == 1000


@pytest.mark.timeout(300)
def test_a_run_that_degrades_mid_way_raises_its_alert_then_resolves_when_it_ends(
        tmp_path, home, watched, receiver, sim_engines):
    # 400 good completions, then every answer is reasoning with no answer
    sim = sim_engines("--junk", "no-answer", "--junk-after", "400", "--latency-ms", "10")
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out"
    write_prompts(prompts, 1500)
    fleet = write_fleet(tmp_path / "fleet.toml", home, notify=f'''
        [[notify]]
        url = "{receiver.url}"
        events = ["quality", "resolved", "finished"]
    ''', jobs=f'''
        [[jobs]]
        name = "gen"
        kind = "generate"
        servers = ["{sim.url}"]
        prompts = "{prompts}"
        out = "{out}"
        concurrency = 4
        max_tokens = 128
        min_useful_pct = 20
    ''')
    _start(fleet)
    got = receiver.wait(lambda ms: [m for m in ms if m.get("kind") == "quality"], 120, what="a quality notification")
    m = got[0]
    assert m["details"]["problem"] == "no_answer" and m["details"]["share_pct"] > 10, m
    assert "with reasoning and no answer (limit 10%)" in m["message"]
    end = wait_state(home, "gen", lambda s: s.get("state") in ("exited", "failed"), 180, what="gen to end")
    assert end["state"] == "exited", (home / "jobs" / "gen" / "job.log").read_text()[-3000:]
    # a third of its records useful, over its min_useful_pct of 20: it ends ok, and the alert clears with the job
    receiver.wait(lambda ms: any(x.get("kind") == "resolved" and x["details"].get("of") == "quality" for x in ms),
                  60, what="the quality alert resolved")
    assert (out / "_SUCCESS").exists() and not (out / "_QUALITY").exists()
    assert {x["details"]["problem"] for x in receiver.messages if x.get("kind") == "quality"} == {"no_answer"}

    records = {r["id"]: r for recs in read_shards(out, allow_open=True).values() for r in recs}
    # the example the alert named is a record with reasoning and no answer
    example = records[m["details"]["example"]]
    assert example["reasoning"] and not example["answer"].strip()
    unanswered = sum(1 for r in records.values() if not r["answer"].strip())
    assert len(records) == 1500 and 1500 - 400 - 8 <= unanswered <= 1500 - 400  # the engine's first 400 were good
    progress = json.loads((home / "jobs" / "gen" / "progress.json").read_text())
    assert progress["quality"]["no_answer"] == unanswered and progress["useful"] == 1500 - unanswered
