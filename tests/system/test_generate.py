"""gpudeck generate against real sim-engine processes: formats, records, resume, bad input,
a server that dies mid-run, a full disk.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_generate.py."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from support.generate import (GenerateProc, assert_exactly_once, generate_argv, read_done, read_shards,
                              run_generate, write_prompts)
from support.wait import wait_for
from support.generate_cases import _p


@pytest.mark.system
def test_generates_every_prompt_once_with_the_record_fields(tmp_path, sim_engines):
    sim = sim_engines("--out-tokens", "8-40")
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 2500)
    out = tmp_path / "out"
    rc = run_generate(generate_argv(prompts, out, [sim.url], "--concurrency", "16", "--max-tokens", "30",
                                    "--thinking"), tmp_path / "gen.log")
    assert rc == 0, (tmp_path / "gen.log").read_text()[-3000:]
    shards = read_shards(out)
    assert sorted(shards) == ["shard-000000.jsonl", "shard-000001.jsonl", "shard-000002.jsonl"]
    assert [len(r) for r in shards.values()] == [1000, 1000, 500]
    assert_exactly_once(shards, ids)
    assert set(read_done(out / "done.txt")) == set(ids)
    by_id = {r["id"]: r for recs in shards.values() for r in recs}
    # OpenAI chat kept as is; ShareGPT turned into chat; multi-turn cut after the last user turn
    assert by_id["p0"]["messages"] == [{"role": "user", "content": "Explain item 0 in a few words."}]
    assert by_id["p1"]["messages"] == [{"role": "user", "content": "What is 1 squared?"}]
    assert [m["role"] for m in by_id["p2"]["messages"]] == ["system", "user", "assistant", "user"]
    assert by_id["p2"]["messages"][-1]["content"] == "second question 2"
    for rec in by_id.values():
        assert set(rec) == {"id", "messages", "reasoning", "answer", "finish_reason", "prompt_tokens",
                            "completion_tokens", "reasoning_tokens", "server"}
        assert rec["server"] == sim.url
        assert rec["reasoning"], "thinking was on: the sim-engine sends reasoning_content"
        assert rec["completion_tokens"] <= 30
    cut = sum(1 for r in by_id.values() if r["finish_reason"] == "length")
    assert 0 < cut < len(ids)
    progress = json.loads((out / "progress.json").read_text())
    assert progress["done"] == progress["total"] == 2500
    assert progress["tokens"] == sum(r["completion_tokens"] for r in by_id.values())
    assert progress["quality"]["cut_at_max_tokens"] == cut
    empty = sum(1 for r in by_id.values() if not r["answer"].strip() and r["finish_reason"] != "length")
    assert progress["useful_of"] == 2500 and progress["useful"] == 2500 - cut - empty  # a clean run: exact
    assert progress["quality"]["errors"] == 0 and progress["quality"]["no_reasoning"] == 0
    assert sim.metric("sglang:num_requests_total") == 2500


@pytest.mark.system
def test_no_thinking_is_sent_as_chat_template_kwargs(tmp_path, sim_engines):
    sim = sim_engines()
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 60)
    out = tmp_path / "out"
    assert run_generate(generate_argv(prompts, out, [sim.url], "--no-thinking"), tmp_path / "gen.log") == 0
    recs = [r for rs in read_shards(out).values() for r in rs]
    assert len(recs) == len(ids)
    # the sim-engine answers without reasoning only when enable_thinking is false
    assert all(r["reasoning"] == "" and r["reasoning_tokens"] is None for r in recs)
    assert json.loads((out / "progress.json").read_text())["quality"]["no_reasoning"] == 0


@pytest.mark.system
def test_a_relaunch_sends_nothing_that_is_done(tmp_path, sim_engines):
    sim = sim_engines()
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 1200)
    out = tmp_path / "out"
    log = tmp_path / "gen.log"
    assert run_generate(generate_argv(prompts, out, [sim.url]), log) == 0
    assert sim.metric("sglang:num_requests_total") == 1200
    assert run_generate(generate_argv(prompts, out, [sim.url]), log) == 0
    assert sim.metric("sglang:num_requests_total") == 1200, "a finished id was sent again"
    # more prompts appended to the file: only those are sent
    ids += write_prompts(prompts, 300, start=1200)
    assert run_generate(generate_argv(prompts, out, [sim.url]), log) == 0
    assert sim.metric("sglang:num_requests_total") == 1500
    assert_exactly_once(read_shards(out), ids)


@pytest.mark.system
def test_bad_lines_are_named_and_the_rest_goes_on(tmp_path, sim_engines):
    sim = sim_engines()
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 50)
    with open(prompts, "a") as f:
        f.write("{this is not json\n")
        f.write(json.dumps({"id": "no-user", "messages": [{"role": "system", "content": "x"}]}) + "\n")
        f.write(json.dumps({"id": "weird", "conversations": [{"from": "robot", "value": "x"}]}) + "\n")
        f.write("\n")
        f.write(json.dumps({"id": "p3", "messages": [{"role": "user", "content": "a duplicate id"}]}) + "\n")
    ids += write_prompts(prompts, 50, start=50)
    out = tmp_path / "out"
    log = tmp_path / "gen.log"
    assert run_generate(generate_argv(prompts, out, [sim.url], "--dedupe", "first"), log) == 0
    text = log.read_text()
    assert f"{prompts}:51: not JSON" in text
    assert f"{prompts}:52: no user turn" in text
    assert f"{prompts}:53: conversations[0]: unknown speaker 'robot'" in text
    assert_exactly_once(read_shards(out), ids)  # the duplicate id "p3" was not generated twice
    quality = json.loads((out / "progress.json").read_text())["quality"]
    assert quality["bad_prompts"] == 3 and quality["duplicate_ids"] == 1


@pytest.mark.system
def test_a_server_that_dies_mid_run(tmp_path, sim_engines):
    steady = sim_engines("--latency-ms", "20")
    doomed = sim_engines("--latency-ms", "20")
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 3000)
    out = tmp_path / "out"
    gen = GenerateProc(generate_argv(prompts, out, [steady.url, doomed.url], "--concurrency", "16"),
                       tmp_path / "gen.log")
    wait_for(lambda: doomed.metric("sglang:num_requests_total") >= 200, what="the second server to get work")
    doomed.kill()
    assert gen.wait() == 0, gen.text()[-3000:]
    assert_exactly_once(read_shards(out), ids)
    progress = json.loads((out / "progress.json").read_text())
    dead = next(s for s in progress["servers"] if s["url"] == doomed.url)
    assert dead["failed"] >= 3 and dead["state"] in ("resting", "probing", "failing")
    assert f"server {doomed.url} failed" in gen.text() and "resting it" in gen.text()
    assert progress["quality"]["errors"] == 0, "a dead server must not make prompts fail"


@pytest.mark.system
def test_waits_for_a_server_that_comes_back(tmp_path, sim_engines):
    sim = sim_engines("--latency-ms", "10")
    port = sim.port
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 1500)
    out = tmp_path / "out"
    gen = GenerateProc(generate_argv(prompts, out, [sim.url], "--concurrency", "8"), tmp_path / "gen.log")
    wait_for(lambda: sim.metric("sglang:num_requests_total") >= 100, what="progress")
    sim.kill()
    wait_for(lambda: "resting it" in gen.text(), what="the server to be rested")
    assert gen.proc.poll() is None, "generate gave up while its only server was down"
    sim.start(port)  # same port, like a restarted engine
    assert gen.wait() == 0, gen.text()[-3000:]
    assert_exactly_once(read_shards(out), ids)
    assert json.loads((out / "progress.json").read_text())["quality"]["errors"] == 0


@pytest.mark.system
def test_a_server_still_starting_is_rested_once_not_once_per_request(tmp_path, sim_engines):
    # every request of the first wave gets 503 while the engine loads; one outage, one rest
    sim = sim_engines("--startup-s", "2", "--latency-ms", "10")
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 200)
    out = tmp_path / "out"
    log = tmp_path / "gen.log"
    assert run_generate(generate_argv(prompts, out, [sim.url], "--concurrency", "32"), log) == 0
    text = log.read_text()
    rests = [line for line in text.splitlines() if "resting it" in line]
    assert rests and all("resting it 5 s" in line for line in rests), rests
    assert_exactly_once(read_shards(out), ids)


@pytest.mark.system
def test_failing_answers_are_retried(tmp_path, sim_engines):
    sim = sim_engines("--fail-rate", "0.2", "--seed", "7")
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 800)
    out = tmp_path / "out"
    log = tmp_path / "gen.log"
    assert run_generate(generate_argv(prompts, out, [sim.url], "--concurrency", "16", "--max-attempts", "20"),
                        log) == 0, log.read_text()[-3000:]
    assert_exactly_once(read_shards(out), ids)
    progress = json.loads((out / "progress.json").read_text())
    assert progress["retries"] >= 80  # about 20% of 800 attempts failed: 500s, garbage, dropped connections


@pytest.mark.system
@pytest.mark.parametrize("kind,said", [("500", "HTTP 500: {\"object\": \"error\""),
                                       ("garbage", "the answer is not JSON: b'<html><body>upstream garbage'"),
                                       ("disconnect", "ServerDisconnectedError")])
def test_a_prompt_that_keeps_failing_counts_as_an_error_and_exits_1(tmp_path, sim_engines, kind, said):
    sim = sim_engines("--fail-rate", "1.0", "--fail-kinds", kind)
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, 3)
    out = tmp_path / "out"
    log = tmp_path / "gen.log"
    rc = run_generate(generate_argv(prompts, out, [sim.url], "--max-attempts", "2", "--model-name", "m"), log)
    assert rc == 1
    text = log.read_text()
    assert "failed after 2 attempt(s)" in text and said in text
    assert f"prompt p0 ({prompts}:1) failed" in text and f"server {sim.url}: " in text
    assert json.loads((out / "progress.json").read_text())["quality"]["errors"] == 3
    assert not (out / "done.txt").exists() or read_done(out / "done.txt") == []


@pytest.mark.system
def test_refuses_degenerate_prompts_unless_forced(tmp_path, sim_engines):
    sim = sim_engines()
    prompts = tmp_path / "prompts.jsonl"
    with open(prompts, "w") as f:
        for i in range(100):
            f.write(json.dumps({"id": i, "messages": [{"role": "user", "content": "" if i % 2 else "hi"}]}) + "\n")
    out = tmp_path / "out"
    log = tmp_path / "gen.log"
    assert run_generate(generate_argv(prompts, out, [sim.url]), log) == 2
    assert "look degenerate" in log.read_text() and "empty last user turn" in log.read_text()
    assert sim.metric("sglang:num_requests_total") == 0
    assert run_generate(generate_argv(prompts, out, [sim.url], "--force"), log) == 0
    assert sim.metric("sglang:num_requests_total") == 100


@pytest.mark.system
def test_two_workers_on_one_output_directory_are_refused(tmp_path, sim_engines):
    sim = sim_engines("--latency-ms", "50")
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, 2000)
    out = tmp_path / "out"
    first = GenerateProc(generate_argv(prompts, out, [sim.url], "--concurrency", "4"), tmp_path / "a.log")
    wait_for(lambda: (out / "progress.json").exists(), what="the first worker to start")
    second = GenerateProc(generate_argv(prompts, out, [sim.url]), tmp_path / "b.log")
    assert second.wait(60) == 2
    assert "in use by another worker (pid" in second.text()
    first.kill9()


@pytest.fixture
def tiny_disk(tmp_path):
    """A 6 MiB tmpfs: a real file system that really fills up."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for the full-disk test needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.system
def test_a_full_disk_pauses_generation_and_loses_nothing(tmp_path, sim_engines, tiny_disk):
    sim = sim_engines("--latency-ms", "5", "--out-tokens", "60-90")
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 4000)
    ballast = tiny_disk / "ballast"
    ballast.write_bytes(b"\0" * (5 * 2**20))  # leaves about 1 MiB: room for ~1,500 records
    out = tiny_disk / "out"
    progress = tmp_path / "progress.json"  # on the big disk, so it can say what is wrong
    gen = GenerateProc(generate_argv(prompts, out, [sim.url], "--concurrency", "8", "--progress", str(progress)),
                       tmp_path / "gen.log")
    wait_for(lambda: "No space left on device" in gen.text(), timeout=60, what="the disk to fill up")
    assert f"cannot write {out}" in gen.text() or f"done-set {out}" in gen.text()
    wait_for(lambda: progress.exists() and json.loads(progress.read_text())["blocked"], what="blocked in progress")
    assert gen.proc.poll() is None, "generate died on a full disk"
    sent = sim.metric("sglang:num_requests_total")
    assert sent < len(ids), "generation did not pause"
    ballast.unlink()
    assert gen.wait() == 0, gen.text()[-3000:]
    assert "writing again" in gen.text()
    assert_exactly_once(read_shards(out), ids)


@pytest.mark.system
def test_runs_as_a_fleet_job_and_the_agent_reads_its_progress(tmp_path, sim_engines, start_agent, reap_jobs):
    sim = sim_engines("--latency-ms", "2")
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 1500)
    out = tmp_path / "out"
    a = start_agent(interval=0.2)
    a.ok("configure", jobs=[{"name": "gen", "kind": "generate",
                             "options": {"servers": [sim.url], "prompts": str(prompts), "out": str(out),
                                         "concurrency": 8, "max_tokens": 100, "thinking": True}}])
    a.ok("launch", job="gen")
    snap = a.wait_snapshot(lambda s: a.job(s, "gen")["state"] == "exited", timeout=120, what="the job to finish")
    job = a.job(snap, "gen")
    p = wait_for(lambda: (a.job(a.latest(), "gen").get("progress") or {}).get("done") == 1500 and
                 a.job(a.latest(), "gen")["progress"], what="the agent to read progress.json")
    assert p["total"] == 1500 and p["tokens"] > 0
    assert set(p["quality"]) >= {"empty_answer", "no_reasoning", "cut_at_max_tokens", "errors"}
    assert job["state"] == "exited"
    assert_exactly_once(read_shards(out), ids)


@pytest.mark.system
def test_sigterm_stops_cleanly_and_a_relaunch_finishes(tmp_path, sim_engines):
    import signal
    sim = sim_engines("--latency-ms", "20")
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 3000)
    out = tmp_path / "out"
    log = tmp_path / "gen.log"
    gen = GenerateProc(generate_argv(prompts, out, [sim.url], "--concurrency", "16"), log)
    wait_for(lambda: sim.metric("sglang:num_requests_total") >= 500, what="progress")
    gen.proc.send_signal(signal.SIGTERM)
    assert gen.wait(60) == 143
    assert "stopped:" in gen.text()
    assert list(out.glob("shard-*.jsonl.tmp")), "the open shard is kept for the next start"
    assert not list(out.glob("*.[0-9]*.tmp"))
    assert run_generate(generate_argv(prompts, out, [sim.url]), log) == 0
    assert_exactly_once(read_shards(out), ids)
    assert "model: sim-model (from /v1/models)" in log.read_text()


@pytest.mark.system
def test_a_lost_done_set_is_rebuilt_from_the_shards(tmp_path, sim_engines):
    sim = sim_engines()
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 2000)
    out = tmp_path / "out"
    log = tmp_path / "gen.log"
    assert run_generate(generate_argv(prompts, out, [sim.url]), log) == 0
    (out / "done.txt").unlink()
    (out / "resume.json").unlink()
    assert run_generate(generate_argv(prompts, out, [sim.url]), log) == 0
    assert "rebuilt it from them (2000 ids)" in log.read_text()
    assert sim.metric("sglang:num_requests_total") == 2000
    assert_exactly_once(read_shards(out), ids)


@pytest.mark.system
def test_duplicate_ids_are_refused_unless_dedupe_first(tmp_path, sim_engines):
    sim = sim_engines()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(_p("p0", "first text") + _p("p0", "another text entirely") + _p("p1", "third"))
    out = tmp_path / "out"
    log = tmp_path / "gen.log"
    assert run_generate(generate_argv(prompts, out, [sim.url]), log) == 2
    text = log.read_text()
    assert f"{prompts}:2: id 'p0' repeats an earlier line's id (1 line(s)" in text and "--dedupe first" in text
    assert "Traceback" not in text and not (out / "done.txt").exists()
    assert run_generate(generate_argv(prompts, out, [sim.url], "--dedupe", "first"), log) == 0
    recs = {r["id"]: r for rs in read_shards(out).values() for r in rs}
    assert sorted(recs) == ["p0", "p1"] and recs["p0"]["messages"][-1]["content"] == "first text"
    assert "--dedupe first: 1 prompt line(s) repeat an earlier id and are dropped" in log.read_text()
    assert json.loads((out / "progress.json").read_text())["quality"]["duplicate_ids"] == 1


@pytest.mark.system
def test_a_prompt_line_over_max_prompt_bytes_is_a_bad_line(tmp_path, sim_engines):
    sim = sim_engines()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(_p("a", "short") + _p("big", "word " * 400_000) + _p("b", "short too"))
    out = tmp_path / "out"
    log = tmp_path / "gen.log"
    assert run_generate(generate_argv(prompts, out, [sim.url], "--max-prompt-bytes", "1000000"), log) == 0
    assert f"{prompts}:2: the line is 2,000,061 bytes, over --max-prompt-bytes (1,000,000)" in log.read_text()
    assert sorted(r["id"] for rs in read_shards(out).values() for r in rs) == ["a", "b"]
    assert json.loads((out / "progress.json").read_text())["quality"]["bad_prompts"] == 1


@pytest.mark.system
def test_servers_dead_past_give_up_after_stop_the_run_with_exit_1(tmp_path):
    from support.generate import free_port
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, 50)
    log = tmp_path / "gen.log"
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    argv = generate_argv(prompts, tmp_path / "out", [dead], "--max-attempts", "100000", "--give-up-after", "2s")
    assert run_generate(argv, log, timeout=60) == 1, log.read_text()[-2000:]
    text = log.read_text()
    assert "giving up: no server has answered for" in text and dead in text
    assert "--give-up-after never" in text and "Traceback" not in text


@pytest.mark.system
def test_give_up_after_reads_times_and_never(tmp_path):
    # the contract's one grammar (tests/unit/test_units.py), with 'never' for no limit
    from gpudeck.agents.contract.units import parse_duration
    assert parse_duration("10m", never=True) == 600.0 and parse_duration("never", never=True) is None
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, 2)
    log = tmp_path / "gen.log"
    argv = generate_argv(prompts, tmp_path / "out", ["http://127.0.0.1:9"], "--give-up-after=-5m")
    assert run_generate(argv, log, timeout=60) == 2
    assert "--give-up-after: expected a duration" in log.read_text() and "'-5m'" in log.read_text()
