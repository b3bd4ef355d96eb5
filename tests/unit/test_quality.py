"""Junk heard mid-run, the rules alone: what makes a completion junk and the window of the last
ones (agents/workers/generate/quality.py), the watcher's quality alerts against [alerts]
*_pct (agents/watch/checks.py), the heartbeat's /fail on them, an exit 4 that no restart
policy restarts and the phase after it blocked by its _QUALITY, and the fleet file's keys.
No process: tests/system/test_quality.py runs the real ones."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gpudeck.agents.contract.jobs import EXIT_DATA, JobKind, JobSpec, final_exit, quality_marker
from gpudeck.agents.contract.vocab import AlertKind, EventKind, JobState
from gpudeck.agents.contract.watching import AlertThresholds, ConfigError, HeartbeatConfig
from gpudeck.agents.contract.wire import Alert, JobStatus, Progress, QualityWindow
from gpudeck.agents.records import JobRecord
from gpudeck.agents.watch.checks import quality
from gpudeck.agents.watch.heartbeat import failing_reason
from gpudeck.agents.watch.phases import Phases
from gpudeck.agents.workers.generate.quality import (CUT, EMPTY, NO_ANSWER, REPETITION, Window, problems,
                                                     repeats)
from gpudeck.remote.fleet import parse_fleet
from gpudeck.remote.fleet_check import FleetError

PROSE = ("The shard writer keeps the order of writes that makes a kill harmless: the record is "
         "appended and fsynced before its id reaches the done-set, so a restart finds every record "
         "whose id is done, and cuts a half-written line at the end of the open shard. Uploads go "
         "from a thread of their own; a failed one is retried with backoff, and never holds up the "
         "requests. Prompts are read as a stream, never loaded whole, and a bad line is named by "
         "its file and line. ")
OTHER = ("A job with after waits for every job it names to finish ok, whether or not a console "
         "looks. On another node it waits for the completion marker, which the parser resolved "
         "into a path or an S3 URL; a failure there is that node's news. The watcher keeps its "
         "conditions in a file of its own, so a new watcher neither repeats nor forgets them, and "
         "each notification waits in the outbox until the receiver answered with a 2xx. ")


def _r(answer="", reasoning=None, finish="stop") -> dict:
    return {"answer": answer, "reasoning": reasoning, "finish_reason": finish}


# ---------------------------------------------------------------- what junk is


def test_each_problem_by_its_definition():
    assert problems(_r("Paris.", "The capital of France is Paris.")) == ()
    assert problems(_r("", PROSE, finish="length")) == (CUT,)  # a trace cut mid-thought: cut alone
    assert problems(_r("  \n", None)) == (EMPTY,)
    assert problems(_r("", "")) == (EMPTY,)
    assert problems(_r("", "I should add 2 and 2.")) == (NO_ANSWER,)
    assert problems(_r("4", None, finish="abort")) == ()  # ended by the server: not useful, and none of these
    loop = "so we need to check the value again and " * 30
    assert problems(_r(loop)) == (REPETITION,)
    assert problems(_r(loop, finish="length")) == (CUT, REPETITION)  # a loop that ran to max_tokens: both
    assert problems(_r("", loop)) == (NO_ANSWER, REPETITION)  # a looping thought that never answered


def test_the_repetition_test_reads_the_tail_its_n_and_span():
    assert not repeats(PROSE * 1)  # ordinary prose: nearly every 20-gram distinct
    assert not repeats("def f(x):\n    return x + 1\n\n" + PROSE)
    assert not repeats("ok ok ok ok")  # under 200 characters: not judged
    period = "x" * 7 + "abcdefghij" * 45  # a loop of 490 characters ...
    assert repeats(PROSE + period[:490] * 3)  # ... seen back to back in the last 1,000: a loop
    assert not repeats(PROSE + "".join(f"step {i}: check {i * 7919 % 1000}. " for i in range(60)))  # numbered steps
    # a loop early in the text that the tail left behind is no loop (the test reads the last 1,000)
    assert not repeats("again and " * 100 + PROSE + OTHER + PROSE[:200])
    assert repeats(OTHER + PROSE * 3)  # a paragraph said three times over is a loop too
    # the tail: the reasoning, then the answer; a loop in the answer's tail is found behind a long reasoning
    assert problems(_r("so we need to check the value again and " * 30, PROSE + OTHER)) == (REPETITION,)


def test_the_window_slides_and_names_the_newest_example():
    w = Window(size=4)
    w.add("a", (CUT,))
    w.add("b", ())
    w.add("c", (CUT, REPETITION))
    doc = w.document()
    assert (doc.size, doc.n, doc.counts[CUT], doc.counts[REPETITION]) == (4, 3, 2, 1)
    assert doc.examples == {CUT: "c", REPETITION: "c"} and doc.share(CUT) == pytest.approx(2 / 3)
    for pid in ("d", "e", "f", "g"):
        w.add(pid, ())
    doc = w.document()  # a, b, c slid out: "c" is no example of a window it has left
    assert doc.n == 4 and doc.counts[CUT] == 0 and doc.examples == {}
    assert QualityWindow(size=1000, n=0).share(CUT) is None


# ---------------------------------------------------------------- the watcher's alerts


def _gen(window: QualityWindow, state: JobState = JobState.RUNNING, name: str = "gen") -> JobStatus:
    return JobStatus(name=name, kind=JobKind.GENERATE, state=state,
                     progress=Progress(done=window.n, total=5000, window=window))


def _window(n: int, **counts: int) -> QualityWindow:
    return QualityWindow(size=1000, n=n, counts={CUT: 0, EMPTY: 0, NO_ANSWER: 0, REPETITION: 0, **counts},
                         examples={k: f"p-{k}" for k, v in counts.items() if v})


def test_a_share_over_its_threshold_raises_the_problem_s_own_alert_naming_share_window_and_an_id():
    limits = AlertThresholds()
    (c,) = quality([_gen(_window(1000, **{CUT: 870}))], limits)
    assert c.alert is AlertKind.QUALITY_CUT and c.event is EventKind.QUALITY and c.job == "gen"
    assert c.key == "quality:cut_at_max_tokens:gen"
    assert c.message == "job gen: 87% of its last 1,000 completions cut at max_tokens (limit 20%); e.g. id p-cut_at_max_tokens"
    assert c.details == {"problem": CUT, "share_pct": 87.0, "window": 1000, "limit_pct": 20.0,
                         "example": "p-cut_at_max_tokens"}
    kinds = {c.alert for c in quality([_gen(_window(200, **{EMPTY: 11, NO_ANSWER: 21, REPETITION: 21}))], limits)}
    assert kinds == {AlertKind.QUALITY_EMPTY, AlertKind.QUALITY_NO_ANSWER, AlertKind.QUALITY_REPETITION}


@pytest.mark.parametrize("window, state, limits", [
    (_window(99, **{CUT: 99}), JobState.RUNNING, AlertThresholds()),  # under 100 completions: not judged yet
    (_window(1000, **{CUT: 200}), JobState.RUNNING, AlertThresholds()),  # at the threshold is not over it
    (_window(1000, **{EMPTY: 50, NO_ANSWER: 100, REPETITION: 100}), JobState.RUNNING, AlertThresholds()),
    (_window(1000, **{CUT: 1000}), JobState.RUNNING, AlertThresholds(cut_pct=100)),  # 100: off
    (_window(1000, **{CUT: 1000}), JobState.FAILED, AlertThresholds()),  # the job ended: its window is no news
])
def test_no_alert(window, state, limits):
    assert quality([_gen(window, state)], limits) == []


def test_a_quality_alert_fails_the_heartbeat_only_with_on_quality():
    alerts = [Alert(AlertKind.QUALITY_CUT, "job gen: 87% ...", job="gen")]
    assert failing_reason(alerts) is None
    assert failing_reason(alerts, on_quality=True) == "quality_cut: job gen: 87% ..."
    assert HeartbeatConfig(url="http://h/x", on_quality=True).on_quality


def test_the_fleet_file_takes_the_pct_keys_and_on_quality():
    f = parse_fleet('[alerts]\ncut_pct = 50\nrepetition_pct = 2.5\n[heartbeat]\nurl = "http://h/p"\non_quality = true\n'
                    '[[nodes]]\nname = "a"\nhost = "a"\n', "fleet.toml")
    assert (f.alerts.cut_pct, f.alerts.empty_pct, f.alerts.no_answer_pct, f.alerts.repetition_pct) == (50, 5, 10, 2.5)
    assert f.heartbeat.on_quality is True
    with pytest.raises(FleetError, match=r"fleet.toml:2: \[alerts\] 'empty_pct': expected a percentage from 0 to 100"):
        parse_fleet("[alerts]\nempty_pct = 120\n", "fleet.toml")
    with pytest.raises(FleetError, match=r"fleet.toml:3: \[heartbeat\] 'on_quality': expected true or false, got a string"):
        parse_fleet('[heartbeat]\nurl = "http://h/p"\non_quality = "yes"\n', "fleet.toml")
    with pytest.raises(ConfigError):
        AlertThresholds(no_answer_pct=101)
    with pytest.raises(FleetError, match="'min_useful_pct': must be at most 100"):
        parse_fleet('[[jobs]]\nname = "g"\nkind = "generate"\nprompts = "p"\nout = "o"\nservers = ["http://h:1"]\n'
                    'min_useful_pct = 150\n', "fleet.toml")


# ---------------------------------------------------------------- exit 4: never restarted, and blocks


def test_exit_4_is_final_for_the_built_in_workers_only():
    gen = JobSpec(name="g", kind="generate", options={"prompts": "p", "out": "/o", "servers": ["http://h:1"]})
    assert final_exit(gen, EXIT_DATA) and not final_exit(gen, 1)
    assert not final_exit(JobSpec(name="c", command=["x"]), EXIT_DATA)  # a command's 4 is its own business
    assert quality_marker(gen) == "/o/_QUALITY"
    parted = JobSpec(name="g", kind="generate", options={"prompts": "p", "out": "/o", "servers": ["http://h:1"],
                                                         "s3": "s3://b/gen", "part": "2/3"})
    assert quality_marker(parted) == "s3://b/gen/part-2-of-3/_QUALITY"


def test_an_on_failure_generate_that_exited_4_is_not_restarted_and_a_command_that_did_is(tmp_path):
    from gpudeck.agents.watch.restarts import RestartEngine
    from support.clock import FakeClock

    for kind, restarted in (("generate", False), ("command", True)):
        opts = {"prompts": "p", "out": "/o", "servers": ["http://h:1"]} if kind == "generate" else {}
        spec = JobSpec(name="gen", kind=kind, restart="on-failure", restart_backoff_s=0, options=opts,
                       **({"command": ["x"]} if kind == "command" else {}))
        sup = SimpleNamespace(spec_of=lambda n, s=spec: s, job_dir=lambda n, d=tmp_path / kind: d,
                              audit=lambda *a, **k: None)
        engine = RestartEngine(sup, lambda *a, **k: None, clock=FakeClock(1000.0))
        engine._start = lambda *a: engine._started.append(a)  # record, start nothing
        engine._started = []
        job = JobStatus(name="gen", kind=JobKind(kind), state=JobState.FAILED, attempt=1, exit_code=4,
                        ended_at=1000.0)
        for t in (1000.0, 1001.0, 1002.0):
            engine.tick(t, [job], {})
        st = engine.state("gen")
        assert bool(engine._started) is restarted, kind
        if not restarted:
            assert st.next_at is None and "not restarted: exit code 4" in st.note
            assert json.loads((tmp_path / kind / "restarts.json").read_text())["note"] == st.note


class _Sup:
    def __init__(self, specs: list[JobSpec]) -> None:
        self.declared = {s.name: s for s in specs}
        self.records: dict[str, JobRecord] = {}

    def spec_of(self, name):
        return self.declared.get(name)

    def hold(self, name, blocked):
        rec = self.records.setdefault(name, JobRecord(name=name))
        rec.state = JobState.BLOCKED if blocked else JobState.PENDING


def test_a_phase_after_a_generate_that_ended_in_junk_is_blocked_saying_why(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    gen = JobSpec(name="gen", kind="generate", restart="on-failure",
                  options={"prompts": "p", "out": str(out), "servers": ["http://h:1"]})
    ext = JobSpec(name="ext", command=["true"], after=["gen"])
    sup = _Sup([gen, ext])
    said: list = []
    ph = Phases(sup, lambda kind, message, **kw: said.append((kind, message)), lambda n: False)
    sup.records["gen"] = JobRecord(name="gen", state=JobState.FAILED, attempt=1, exit_code=4)
    ph.tick()  # no _QUALITY (extract's audit, say): blocked all the same, never "to be restarted"
    assert ph.notes["ext"] == "blocked: gen failed (exit code 4: its verdict on its data, never restarted; see its log)"
    sup.records["ext"].state = JobState.PENDING
    why = "0.0% of the 3000 records counted are useful, under --min-useful-pct 50%"
    (out / "_QUALITY").write_text(json.dumps({"ok": False, "why": why}))
    ph.tick()
    assert ph.notes["ext"] == f"blocked: gen ended with too few useful records: {why} ({out}/_QUALITY)"
    assert sup.records["ext"].state is JobState.BLOCKED
    assert said[-1] == (EventKind.BLOCKED, f"job ext is blocked: gen ended with too few useful records: {why} "
                                           f"({out}/_QUALITY)")


def test_a_phase_on_another_node_is_blocked_by_the_quality_document_beside_the_marker(tmp_path):
    marker = tmp_path / "gen" / "_SUCCESS"
    ext = JobSpec(name="ext", command=["true"], after=["gen"], after_markers={"gen": str(marker)})
    sup = _Sup([ext])
    ph = Phases(sup, lambda *a, **k: None, lambda n: False)
    ph.tick()
    assert ph.notes["ext"] == f"waiting for gen (its marker {marker})"
    marker.parent.mkdir()
    (marker.parent / "_QUALITY").write_text(json.dumps({"ok": False, "why": "12.0% useful"}))
    ph.tick()
    assert ph.notes["ext"] == f"blocked: gen ended with too few useful records: 12.0% useful ({marker.parent}/_QUALITY)"
    (marker.parent / "_QUALITY").unlink()  # a new run over the output removed it: waiting again
    ph.tick()
    assert ph.notes["ext"] == f"waiting for gen (its marker {marker})" and sup.records["ext"].state is JobState.PENDING


# ---------------------------------------------------------------- the figures: history and Prometheus


def _snap(t: float, window: QualityWindow) -> "Snapshot":
    from gpudeck.agents.contract.wire import Host, Snapshot
    host = Host(hostname="n", cpu_pct=1.0, cpu_count=8, mem_used_bytes=1, mem_total_bytes=2, load1=0.0, load5=0.0,
                load15=0.0)
    gen = JobStatus(name="gen", kind=JobKind.GENERATE, state=JobState.RUNNING,
                    progress=Progress(done=window.n, tokens=100, quality={CUT: 900, EMPTY: 0, NO_ANSWER: 3,
                                                                          REPETITION: 12, "errors": 1},
                                      useful=150, useful_of=1000, window=window))
    cmd = JobStatus(name="cmd", kind=JobKind.COMMAND, state=JobState.RUNNING, progress=Progress(done=5))
    return Snapshot(node="n", seq=int(t), t=t, host=host, gpus=[], jobs=[gen, cmd],
                    alerts=[Alert(AlertKind.QUALITY_CUT, "job gen: 87% ...", job="gen")])


def test_the_window_s_shares_go_into_the_history_of_the_job_and_no_other(tmp_path):
    from gpudeck.agents.historydb import HistoryDB

    t0 = 1_700_000_000.0 - 1_700_000_000.0 % 3600
    db = HistoryDB(tmp_path / "history.db", clock=lambda: t0 + 200)
    for k in range(120):
        db.record(_snap(t0 + k, _window(1000, **{CUT: 800 + k, REPETITION: 10})))
    _, points = db.read(t0, t0 + 59, "1m", job="gen")
    p = points[0]
    assert p.mean["cut_pct"] == pytest.approx(82.95, abs=0.1) and (p.lo["cut_pct"], p.hi["cut_pct"]) == (80.0, 85.9)
    assert p.mean["repetition_pct"] == 1.0 and p.mean["empty_pct"] == 0.0 and p.mean["no_answer_pct"] == 0.0
    _, raw = db.read(t0 + 100, t0 + 110, "1s", job="cmd")
    assert raw and all("cut_pct" not in q.mean for q in raw)  # a job without a window has no such figure


def test_the_prometheus_file_has_the_shares_the_totals_and_the_useful_ratio():
    from gpudeck.agents import promfile
    from support.promfile import parse

    got = parse(promfile.generate_text(_snap(1.0, _window(1000, **{CUT: 870, REPETITION: 20}))))
    ratio = {s[0]["problem"]: s[1] for s in got["gpudeck_job_quality_ratio"]}
    assert ratio == {CUT: 0.87, EMPTY: 0.0, NO_ANSWER: 0.0, REPETITION: 0.02}
    assert all(s[0]["job"] == "gen" for s in got["gpudeck_job_quality_ratio"])  # the command job has none
    assert got["gpudeck_job_quality_window"] == [({"node": "n", "job": "gen"}, 1000.0)]
    totals = {s[0]["problem"]: s[1] for s in got["gpudeck_job_quality_total"]}
    assert totals == {CUT: 900.0, EMPTY: 0.0, NO_ANSWER: 3.0, REPETITION: 12.0}
    assert got["gpudeck_job_useful_ratio"] == [({"node": "n", "job": "gen"}, 0.15)]
    assert ({"node": "n", "kind": "quality_cut"}, 1.0) in got["gpudeck_alerts_active"]


def test_the_console_flags_a_quality_alert_on_its_job_with_the_share():
    from gpudeck.console.formatting import junk_flags

    w = _window(1000, **{CUT: 870, REPETITION: 150})
    assert junk_flags(["quality_cut", "stalled", "quality_repetition"], w) == ("junk cut 87%", "junk loop 15%")
    assert junk_flags(["quality_empty"], None) == ("junk empty",)
