"""Who owns a node's jobs ("Nothing on screen lies", item 5), driven through the CLI against
real agents on one home: a copy of a fleet file reads the node (never "unreachable", exit 7,
the jobs in their true states marked with their owner); `--take-over` is for changes and
says what it took from whom; a `[fleet] name` makes copies one owner, and the owners of a
file keyed by its path before it had a name move to the name."""

from __future__ import annotations

import json
import shutil
import socket

import pytest

from support.cli import gpudeck
from support.wait import wait_for

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("reap_jobs")]

EXIT_OWNED_ELSEWHERE = 7


def _fleet(path, home, *jobs: str, name: str = ""):
    head = f'[fleet]\nname = "{name}"\n\n' if name else ""
    path.write_text(head + f'[defaults]\nhome = "{home}"\nnvml = false\n' + "".join(
        f'\n[[jobs]]\nname = "{j}"\ncommand = "exec sleep 120"\n' for j in jobs))
    return path


def _status(path, code: int = 0) -> dict:
    r = gpudeck("status", "--json", "-f", str(path), check=False)
    assert r.returncode == code, f"status -f {path.name} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout)


def _jobs(doc: dict) -> dict[str, dict]:
    return {j["name"]: j for j in doc["jobs"]}


def _running(path, job: str) -> None:
    def state() -> str:
        return _jobs(json.loads(gpudeck("status", "--json", "-f", str(path), check=False).stdout))[job]["state"]
    wait_for(lambda: state() == "running", 60, what=f"{job} running")


def _path_owner(path) -> str:
    return f"{socket.gethostname()}:{path.resolve()}"


def test_a_copy_of_the_fleet_file_reads_the_node_and_is_told_who_owns_its_jobs(tmp_path, home):
    a = _fleet(tmp_path / "a.toml", home, "work", "idle")
    gpudeck("launch", "work", "-f", str(a))
    _running(a, "work")
    b = tmp_path / "b.toml"  # a teammate's copy, with no [fleet] name: another owner
    shutil.copy(a, b)

    r = gpudeck("status", "-f", str(b), check=False)
    assert r.returncode == EXIT_OWNED_ELSEWHERE, r.stdout + r.stderr
    assert "UNREACHABLE" not in r.stdout and "unreachable" not in r.stdout + r.stderr
    assert "local: OWNED_ELSEWHERE" in r.stdout and f"fleet file {_path_owner(a)}" in r.stdout

    doc = _status(b, EXIT_OWNED_ELSEWHERE)
    node = doc["nodes"][0]
    assert node["reachable"] is True and node["state"] == "owned_elsewhere"
    assert node["owned_elsewhere"] == {"work": _path_owner(a), "idle": _path_owner(a)}
    jobs = _jobs(doc)
    assert jobs["work"]["state"] == "running" and jobs["work"]["pids"]  # its true state, not "unknown"
    assert jobs["work"]["owner"] == _path_owner(a) and jobs["work"]["owned_elsewhere"] is True
    assert jobs["idle"]["state"] == "not_started" and jobs["idle"]["owner"] == _path_owner(a)
    assert not [al for al in doc["alerts"] if al["kind"] == "unreachable"]

    # every look reads the node: doctor, events, logs, history
    r = gpudeck("doctor", "-f", str(b), check=False)
    assert "belongs to another fleet" not in r.stdout + r.stderr and "local:" in r.stdout, r.stdout + r.stderr
    assert r.returncode == gpudeck("doctor", "-f", str(a), check=False).returncode
    gpudeck("logs", "work", "-f", str(b))
    gpudeck("events", "-f", str(b))
    gpudeck("history", "-f", str(b))

    # the looks took nothing: the original file still owns its jobs, and says so with exit 0
    doc = _status(a, 0)
    assert doc["nodes"][0]["state"] == "up" and _jobs(doc)["work"]["owner"] == _path_owner(a)


def test_take_over_is_only_for_changes_and_says_what_it_took_from_whom(tmp_path, home):
    a = _fleet(tmp_path / "a.toml", home, "work", "idle")
    gpudeck("launch", "work", "-f", str(a))
    _running(a, "work")
    b = tmp_path / "b.toml"
    shutil.copy(a, b)

    r = gpudeck("status", "--take-over", "-f", str(b), check=False)
    assert r.returncode == 2 and "--take-over" in r.stderr  # a look has no such option
    r = gpudeck("launch", "idle", "-f", str(b), check=False)  # a change: refused, exit 7, naming the owner
    assert r.returncode == EXIT_OWNED_ELSEWHERE and _path_owner(a) in r.stderr and "--take-over" in r.stderr
    assert _jobs(_status(a))["idle"]["state"] == "not_started"  # the refusal changed nothing

    r = gpudeck("kill", "work", "--take-over", "-f", str(b))
    assert f"took job 'work' on node local from fleet file {_path_owner(a)}" in r.stdout
    assert f"took job 'idle' on node local from fleet file {_path_owner(a)}" in r.stdout
    assert "killed work" in r.stdout
    # the original file is now the one told, in its own words: reachable, exit 7, b the owner
    doc = _status(a, EXIT_OWNED_ELSEWHERE)
    assert doc["nodes"][0]["state"] == "owned_elsewhere" and doc["nodes"][0]["reachable"] is True
    assert _jobs(doc)["work"]["owner"] == _path_owner(b) and _jobs(doc)["work"]["state"] == "killed"


def test_a_fleet_name_makes_copies_one_owner_and_takes_the_paths_owners(tmp_path, home):
    a = _fleet(tmp_path / "a.toml", home, "work", "idle")
    gpudeck("launch", "work", "-f", str(a))  # owned as host:/path/a.toml, the key of before names
    _running(a, "work")
    a = _fleet(tmp_path / "a.toml", home, "work", "idle", name="lab")  # the file named: its owners migrate
    doc = _status(a, 0)
    assert _jobs(doc)["work"]["owner"] == "lab" and _jobs(doc)["work"]["state"] == "running"

    c = tmp_path / "elsewhere" / "renamed.toml"  # a copy, renamed, elsewhere: the same owner
    c.parent.mkdir()
    shutil.copy(a, c)
    doc = _status(c, 0)
    assert doc["nodes"][0]["state"] == "up"
    assert _jobs(doc)["work"]["owner"] == "lab" and _jobs(doc)["work"]["owned_elsewhere"] is False
    gpudeck("launch", "idle", "-f", str(c))  # no --take-over: one owner
    _running(a, "idle")

    # a file of that name whose jobs differ from what the node holds is told so, and its look
    # drops nothing of the other copy's
    d = _fleet(tmp_path / "d.toml", home, "work", "extra", name="lab")
    r = gpudeck("status", "-f", str(d))
    assert f"holds job(s) idle of fleet 'lab', declared by {_path_owner(c)}, which this file lacks" in r.stderr
    assert f"this file declares job(s) extra, which {_path_owner(c)}" in r.stderr
    assert _jobs(_status(c, 0))["idle"]["state"] == "running"


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "console"])
async def test_the_console_on_a_copy_reads_the_node_and_marks_the_owner(tmp_path, fleet_home, read_only):
    """`up --read-only` (and `up` without --take-over) on a copy: the node drawn up, never
    unreachable, the job in its true state, the owner on the node's line; a change refused
    there, naming the owner."""
    from gpudeck.console.actions import JobOp
    from gpudeck.console.app import make_app
    from gpudeck.remote.fleet import load_fleet
    from support.tui import job_row, notifications_text, shell_job, wait_for_text, wait_until, write_fleet

    original = write_fleet(tmp_path, fleet_home, [shell_job("idle", "sleep 600")])
    gpudeck("launch", "idle", "-f", original.path)
    copy = tmp_path / "copy" / "fleet.toml"
    copy.parent.mkdir()
    shutil.copy(original.path, copy)
    app = make_app(load_fleet(copy), grace_s=2.0, read_only=read_only, initial_view="fleet")
    app.animation_level = "none"
    # wide: the node line before the mark grows with the host figures (cpu 100%, load 10.5, mem)
    async with app.run_test(size=(220, 40), notifications=True) as pilot:
        text = await wait_for_text(pilot, "owned elsewhere: idle belong to fleet file")
        assert any("● local" in ln and "owned elsewhere" in ln for ln in text.splitlines()), text
        assert "unreachable" not in text
        row = await wait_until(pilot, lambda: (r := job_row(app, "idle")) and r.state == "running" and r,
                               what="the job in its true state")
        assert not row.stale
        if not read_only:  # a change there is refused, naming the owner
            app._plan_job_action(JobOp.KILL, "idle")  # the `k` key's path, before its question
            await wait_until(pilot, lambda: "belongs to another fleet" in notifications_text(app),
                             what="the refusal told")
            assert job_row(app, "idle").state == "running"


async def test_a_copy_whose_jobs_differ_is_told_on_its_nodes_line_until_they_agree(tmp_path, home):
    """Two files of one [fleet] name whose jobs differ: `status` says so under the node, every
    time it looks (a look drops nothing), and in its JSON; the console says so on the node's
    line for as long as the node says so, not in a notice that the next one covers; once the
    file declares what the node holds, the line is gone."""
    from gpudeck.console.app import make_app
    from gpudeck.remote.fleet import load_fleet
    from gpudeck.console.actions import JobOp
    from gpudeck.console.messages import JobActionRequested
    from support.tui import answer, confirm_dialog, job_row, screen_text, wait_until

    c = _fleet(tmp_path / "c.toml", home, "work", "idle", name="lab")
    gpudeck("launch", "idle", "-f", str(c))
    _running(c, "idle")
    d = _fleet(tmp_path / "d.toml", home, "work", "extra", name="lab")
    said = "idle only in the other copy; extra only in this file"
    for _ in range(2):  # a look leaves the node's declarations as they are: said again
        r = gpudeck("status", "-f", str(d))
        assert f"local: COPY DIFFERS: {said}; the other copy: {_path_owner(c)}\n" in r.stdout, r.stdout
        node = _status(d)["nodes"][0]
        assert node["copy_differs"] == {"fleet": "lab", "declared_from": _path_owner(c), "lacks": ["idle"],
                                        "adds": ["extra"], "replaced": False}, node
    assert _status(c)["nodes"][0]["copy_differs"] is None

    app = make_app(load_fleet(d), grace_s=2.0, initial_view="fleet")
    app.animation_level = "none"
    async with app.run_test(size=(240, 40), notifications=True) as pilot:
        def node_line() -> str:
            return next((ln for ln in screen_text(app).splitlines() if "● local" in ln), "")
        line = await wait_until(pilot, lambda: "copy differs:" in node_line() and node_line(),
                                what="the node's line telling the copy differs")
        assert f"copy differs: {said}; this file's jobs replaced the other copy's here" in line, line
        seq = app.state.nodes["local"].snapshot.seq  # still there snapshots later: no notice to cover it
        await wait_until(pilot, lambda: app.state.nodes["local"].snapshot.seq > seq + 3, what="later snapshots")
        assert "copy differs:" in node_line(), screen_text(app)

        _fleet(d, home, "work", "idle", name="lab")  # the file now declares what the node holds
        app.post_message(JobActionRequested(JobOp.LAUNCH, "work"))  # the L key's path: it reads the file again
        await confirm_dialog(pilot, "the launch question")
        await answer(pilot, "y")
        await wait_until(pilot, lambda: (r := job_row(app, "work")) and r.state == "running", what="work running")
        await wait_until(pilot, lambda: node_line() and "copy differs" not in node_line(),
                         what="the node's line without the difference")
    r = gpudeck("status", "-f", str(c))
    assert "COPY DIFFERS" not in r.stdout and _status(c)["nodes"][0]["copy_differs"] is None, r.stdout
