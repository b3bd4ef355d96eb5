"""An open console current with its fleet file (console/reload.py): a change is read once it has
stayed as it is for 1 s, by a clock the test moves; a mistake is said once, with its line, and
the last good version stays; a job dropped from the file while it runs is shown as not in the
file, never killed; what a reload changed is said one line each."""

from __future__ import annotations

import os

from gpudeck.agents.contract.wire import Host, JobStatus, Snapshot
from gpudeck.console.reload import FleetFileWatch, reload_lines
from gpudeck.console.state import NOT_IN_FILE, FleetState
from gpudeck.remote.fleet import load_fleet, parse_fleet

from support.clock import FakeClock

ONE = '[[nodes]]\nname = "a"\nlocal = true\nhome = "/tmp/a"\n\n[[jobs]]\nname = "gen"\nkind = "command"\n' \
      'command = ["sleep", "9"]\nnode = "a"\n'
TWO = ONE + '\n[[nodes]]\nname = "b"\nlocal = true\nhome = "/tmp/b"\n\n[[jobs]]\nname = "other"\n' \
            'kind = "command"\ncommand = ["sleep", "9"]\nnode = "b"\n'


def write(path, text: str, stamp: int) -> None:
    """The file's content, and an mtime of its own (a filesystem's clock may not move between
    two writes of a test)."""
    path.write_text(text)
    os.utime(path, ns=(stamp, stamp))


def watch_of(tmp_path, clock):
    path = tmp_path / "fleet.toml"
    write(path, ONE, 1_000_000_000)
    return path, FleetFileWatch(str(path), load_fleet, clock=clock)


def test_a_change_is_read_once_it_stayed_unchanged_a_second(tmp_path):
    clock = FakeClock()
    path, watch = watch_of(tmp_path, clock)
    assert watch.poll() is None  # nothing changed
    write(path, TWO, 2_000_000_000)
    assert watch.poll() is None  # just changed
    clock.advance(0.9)
    assert watch.poll() is None  # not settled yet
    clock.advance(0.1)
    found = watch.poll()
    assert found is not None and found.error is None
    assert {"a", "b"} <= {n.name for n in found.fleet.nodes}
    clock.advance(5.0)
    assert watch.poll() is None  # read once


def test_a_file_still_being_written_waits_for_its_last_write(tmp_path):
    clock = FakeClock()
    path, watch = watch_of(tmp_path, clock)
    write(path, TWO[:40], 2_000_000_000)  # half a save: not valid TOML
    watch.poll()
    clock.advance(0.8)
    write(path, TWO, 3_000_000_000)
    assert watch.poll() is None
    clock.advance(0.8)
    assert watch.poll() is None  # 1.6 s since the first write, 0.8 s since the last
    clock.advance(0.2)
    found = watch.poll()
    assert found is not None and found.error is None and len(found.fleet.jobs) == 2


def test_a_mistake_is_said_once_with_its_line_and_a_fix_is_read(tmp_path):
    clock = FakeClock()
    path, watch = watch_of(tmp_path, clock)
    write(path, ONE + 'bogus_key = 3\n', 2_000_000_000)
    watch.poll()
    clock.advance(1.0)
    found = watch.poll()
    assert found is not None and found.fleet is None
    assert found.error.startswith(f"{path}:11: ") and "bogus_key" in found.error
    clock.advance(3.0)
    assert watch.poll() is None  # said once per change
    write(path, TWO, 3_000_000_000)
    watch.poll()
    clock.advance(1.0)
    assert watch.poll().fleet is not None


def test_a_file_beside_it_counts_as_a_change(tmp_path):
    clock = FakeClock()
    beside = tmp_path / "placements.json"
    path = tmp_path / "fleet.toml"
    write(path, ONE, 1_000_000_000)
    watch = FleetFileWatch(str(path), load_fleet, (str(beside),), clock=clock)
    beside.write_text("{}")  # a move made from another terminal
    watch.poll()
    clock.advance(1.0)
    assert watch.poll().fleet is not None


def _snap(node: str, *jobs: JobStatus) -> Snapshot:
    return Snapshot(node, 1, 1_700_000_000.0, Host(node, 1.0, 1, 1, 2, 0.0, 0.0, 0.0), [], list(jobs))


def test_a_running_job_dropped_from_the_file_is_shown_not_in_the_fleet_file():
    old, new = parse_fleet(TWO, "/f/fleet.toml"), parse_fleet(ONE, "/f/fleet.toml")
    state = FleetState(old, clock=lambda: 1_700_000_000.0)
    state.apply(_snap("b", JobStatus("other", "command", "running", pid=7)))
    state.apply(_snap("a", JobStatus("gen", "command", "running", pid=8),
                      JobStatus("grabbed", "command", "running", pid=9, adopted=True)))
    assert not any(NOT_IN_FILE in r.flags for r in state.job_rows())
    state.set_fleet(new)
    flags = {r.name: r.flags for r in state.job_rows()}
    assert NOT_IN_FILE in flags["other"]  # still shown, as it runs
    assert NOT_IN_FILE not in flags["gen"] and NOT_IN_FILE not in flags["grabbed"]  # declared; adopted


def test_what_a_reload_changed_is_said_one_line_each():
    old, new = parse_fleet(TWO, "/f/fleet.toml"), parse_fleet(ONE.replace('"9"', '"10"'), "/f/fleet.toml")
    lines = reload_lines(old, new, lambda job: "b" if job == "other" else None, {"a": "no answer in time"})
    assert lines == ["node b no longer in the file",
                     'job other removed from the file; still running on b: not killed, shown as "not in the fleet '
                     'file"',
                     "changed: gen (a launch or relaunch runs what the file says now)",
                     "node a: the new file was not sent: no answer in time"]
    assert reload_lines(new, old, lambda job: None, {})[:2] == ["node b added: connecting", "job other added"]
    # the demo shows its nodes without the implicit local one: a reload does not add it
    import dataclasses
    demo = dataclasses.replace(old, nodes=[n for n in old.nodes if n.name != "local"])
    assert reload_lines(demo, old, lambda job: None, {}) == []
    moved_home = parse_fleet(TWO.replace('"/tmp/b"', '"/tmp/b2"'), "/f/fleet.toml")
    assert reload_lines(old, moved_home, lambda job: None, {}) == [
        "node b changed: its connection keeps the old settings until the console starts again"]
