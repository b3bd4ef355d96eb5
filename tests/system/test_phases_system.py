"""Phases with nobody looking: `gpudeck watch start`, launch the first phase, close the
console; the watcher starts the second when the first ends ok, and leaves it blocked (with an
event and a notification) when the first fails. Real CLI, detached watcher, real jobs."""

from __future__ import annotations

import json

import pytest

from support.watch import events, gpudeck_watch, job_state, stop_watch, wait_state, write_fleet
from support.wait import wait_for

pytestmark = pytest.mark.system  # a detached watcher and its jobs


@pytest.fixture
def watched(home):
    yield home
    stop_watch(home)


@pytest.mark.timeout(300)
def test_the_second_phase_starts_when_the_first_ends_ok_and_is_blocked_when_it_fails(tmp_path, home, watched,
                                                                                   receiver):
    out = tmp_path / "out"
    out.mkdir()
    fleet = write_fleet(tmp_path / "fleet.toml", home, notify=f'''
        [[notify]]
        url = "{receiver.url}"
        events = ["blocked"]
    ''', jobs=f'''
        [[jobs]]
        name = "generate"
        command = ["sh", "-c", "sleep 1; echo 7 > '{out}/generated'"]
        [[jobs]]
        name = "extract"
        command = ["sh", "-c", "cat '{out}/generated' > '{out}/extracted'"]
        after = ["generate"]
        [[jobs]]
        name = "broken"
        command = ["sh", "-c", "sleep 1; exit 3"]
        [[jobs]]
        name = "after-broken"
        command = ["sh", "-c", "touch '{out}/never'"]
        after = ["broken"]
    ''')
    for args in (("watch", "start"), ("launch", "generate"), ("launch", "broken")):
        r = gpudeck_watch(*args, "-f", str(fleet))
        assert r.returncode == 0, r.stdout + r.stderr
    # no console from here on: the watcher alone
    ext = wait_state(home, "extract", lambda s: s.get("state") == "exited", 60, what="extract to run and end ok")
    assert ext["exit_code"] == 0 and (out / "extracted").read_text() == "7\n"  # it read what its phase wrote
    assert job_state(home, "generate")["state"] == "exited" and (home / "jobs" / "generate" / "_SUCCESS").exists()
    started = [e for e in events(home) if e["kind"] == "action" and e.get("job") == "extract"
               and e.get("details", {}).get("action") == "after"]
    assert started and "generate finished ok" in started[0]["message"]

    wait_state(home, "after-broken", lambda s: s.get("state") == "blocked", 60, what="after-broken blocked")
    # the event is written a moment after the state
    blocked = wait_for(lambda: [e for e in events(home) if e["kind"] == "blocked"], 30, what="the blocked event")
    assert [e["job"] for e in blocked] == ["after-broken"]
    assert blocked[0]["message"] == "job after-broken is blocked: broken failed (exit code 3)"
    receiver.wait(lambda ms: [m.get("kind") for m in ms] == ["blocked"], 60, what="the blocked notification")
    assert not (out / "never").exists() and not (home / "jobs" / "broken" / "_SUCCESS").exists()
    r = gpudeck_watch("status", "--json", "-f", str(fleet))
    assert r.returncode == 0, r.stderr
    import json
    rows = {j["name"]: j for j in json.loads(r.stdout)["jobs"]}
    assert rows["after-broken"]["state"] == "blocked"
    assert rows["after-broken"]["waiting"] == "blocked: broken failed (exit code 3)"


def _two_local_nodes(home_a, home_b) -> str:
    return f'''
[defaults]
nvml = false
interval = 0.2

[[nodes]]
name = "a"
local = true
home = "{home_a}"

[[nodes]]
name = "b"
local = true
home = "{home_b}"
'''


@pytest.mark.timeout(300)
def test_a_phase_never_starts_on_half_an_output_a_second_run_removes_its_s3_marker_first(
        tmp_path, moto_s3, sim_engines):
    """`generate --s3` ran once and left `s3://…/_SUCCESS`; it runs again on the same prefix
    with more prompts. The second run removes the marker once it holds its fence claim, before
    it writes anything, so a job `after` it on another node (which waits for that S3 object)
    starts only when the second run has ended."""
    import json

    from support.generate import write_prompts

    s3 = moto_s3.client()
    s3.create_bucket(Bucket="phase")
    engine = sim_engines("--latency-ms", "100", "--out-tokens", "4-8")
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, 20)
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    gen = f'''
[[jobs]]
name = "gen"
node = "a"
kind = "generate"
prompts = "{prompts}"
out = "{tmp_path / 'out'}"
servers = ["{engine.url}"]
concurrency = 2
max_tokens = 16
shard_size = 10
s3 = "s3://phase/gen"
s3_endpoint = "{moto_s3.endpoint}"
'''
    started = tmp_path / "ext-started"
    ext = f'''
[[jobs]]
name = "ext"
node = "b"
command = ["sh", "-c", "date +%s.%N > '{started}'"]
after = ["gen"]
'''
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(_two_local_nodes(home_a, home_b) + gen)

    def marker() -> bool:
        return "gen/_SUCCESS" in moto_s3.keys("phase", "gen/")

    try:
        for args in (("watch", "start", "--supervise", "none"), ("launch", "gen")):
            r = gpudeck_watch(*args, "-f", str(fleet))
            assert r.returncode == 0, r.stdout + r.stderr
        first = wait_state(home_a, "gen", lambda s: s.get("state") in ("exited", "failed"), 120, what="the first run")
        assert first["state"] == "exited", (home_a / "jobs" / "gen" / "job.log").read_text()[-2000:]
        assert marker()
        write_prompts(prompts, 280, start=20)  # more prompts, same prefix: the output is no longer complete
        r = gpudeck_watch("relaunch", "gen", "-f", str(fleet))
        assert r.returncode == 0, r.stdout + r.stderr
        progress = home_a / "jobs" / "gen" / "progress.json"

        def second_run_writing() -> bool:
            try:
                return json.loads(progress.read_text()).get("done", 0) > 20
            except (OSError, ValueError):
                return False

        wait_for(second_run_writing, 120, what="the second run to write past the first's 20")
        # now declare the phase on node b, whose watcher starts it
        fleet.write_text(_two_local_nodes(home_a, home_b) + gen + ext)
        r = gpudeck_watch("watch", "start", "--supervise", "none", "-f", str(fleet))
        assert r.returncode == 0, r.stdout + r.stderr
        end = wait_state(home_a, "gen", lambda s: s.get("state") in ("exited", "failed") and s.get("attempt") == 2,
                         180, what="the second run to end")
        assert end["state"] == "exited"
        wait_for(lambda: started.exists() and started.read_text().strip(), 120, what="the phase to start on node b")
        assert float(started.read_text()) >= end["ended_at"] - 0.5, \
            (f"the phase started at {started.read_text().strip()}, before gen's second run ended "
             f"({end['ended_at']}): it ran on half an output")
        assert marker()  # the second run's own marker, at its end
    finally:
        stop_watch(home_a)
        stop_watch(home_b)


@pytest.mark.timeout(120)
def test_a_phase_asks_for_its_dependencys_s3_marker_at_that_jobs_own_s3_endpoint(tmp_path, moto_s3):
    """`gen` writes to an S3-compatible store of its own (`s3_endpoint`), on node a; `ext`, on
    node b, runs after it. Node b's watcher asks that endpoint for gen's `_SUCCESS`, not AWS
    (nothing points the node at the test's S3: no AWS_ENDPOINT_URL_S3)."""

    s3 = moto_s3.client()
    s3.create_bucket(Bucket="phase")
    s3.put_object(Bucket="phase", Key="gen/_SUCCESS", Body=b"")  # gen finished ok on node a
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    started = tmp_path / "ext-started"
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(_two_local_nodes(home_a, home_b) + f'''
[[jobs]]
name = "gen"
node = "a"
kind = "generate"
prompts = "{tmp_path / 'prompts.jsonl'}"
out = "{tmp_path / 'out'}"
servers = ["http://127.0.0.1:9"]
s3 = "s3://phase/gen"
s3_endpoint = "{moto_s3.endpoint}"

[[jobs]]
name = "ext"
node = "b"
command = ["sh", "-c", "date +%s.%N > '{started}'"]
after = ["gen"]
''')
    try:
        r = gpudeck_watch("watch", "start", "--supervise", "none", "-f", str(fleet), "b")
        assert r.returncode == 0, r.stdout + r.stderr
        wait_for(lambda: started.exists(), 60, what="ext started on node b, gen's marker found at its endpoint",
                 detail=lambda: str([j.get("waiting") for j in json.loads(gpudeck_watch(
                     "status", "--json", "-f", str(fleet)).stdout)["jobs"] if j["name"] == "ext"]))
        assert job_state(home_b, "ext")["state"] in ("running", "exited")
    finally:
        stop_watch(home_b)


@pytest.mark.timeout(120)
def test_a_relaunch_removes_the_success_marker_the_agent_wrote_for_the_last_attempt(tmp_path, home):
    """A command job's `success_marker` says its last attempt ended ok; a relaunch removes it
    before the new attempt starts, so a job after it on another node does not start meanwhile."""
    marker = tmp_path / "shared" / "done"
    gate = tmp_path / "gate"
    fleet = write_fleet(tmp_path / "fleet.toml", home, jobs=f'''
        [[jobs]]
        name = "step"
        command = ["sh", "-c", "while [ ! -e '{gate}' ]; do sleep 0.1; done"]
        success_marker = "{marker}"
    ''')
    try:
        gate.touch()
        for args in (("watch", "start", "--supervise", "none"), ("launch", "step")):
            r = gpudeck_watch(*args, "-f", str(fleet))
            assert r.returncode == 0, r.stdout + r.stderr
        wait_state(home, "step", lambda s: s.get("state") == "exited", 60, what="the first attempt to end ok")
        from support.wait import wait_for
        wait_for(marker.exists, 30, what="the marker of the first attempt")
        gate.unlink()
        r = gpudeck_watch("relaunch", "step", "-f", str(fleet))
        assert r.returncode == 0, r.stdout + r.stderr
        st = wait_state(home, "step", lambda s: s.get("attempt") == 2, 30, what="the second attempt")
        assert st["state"] == "running" and not marker.exists(), "the marker outlived the relaunch"
        gate.touch()
        wait_state(home, "step", lambda s: s.get("state") == "exited", 60, what="the second attempt to end ok")
        wait_for(marker.exists, 30, what="the second attempt's marker")
    finally:
        stop_watch(home)
