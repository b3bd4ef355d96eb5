"""Phases with nobody looking: `gpudeck watch start`, launch the first phase, close the
console; the watcher starts the second when the first ends ok, and leaves it blocked (with an
event and a notification) when the first fails. Real CLI, detached watcher, real jobs."""

from __future__ import annotations

import pytest

from support.watch import events, gpudeck_watch, job_state, stop_watch, wait_state, write_fleet

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
    blocked = [e for e in events(home) if e["kind"] == "blocked"]
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
