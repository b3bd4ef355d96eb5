"""An engine loading (agents/sense/loading.py): its figure read from its own log lines (SGLang's
tqdm bars, after carriage returns), llama-server's 503 read as loading, the time to ready; the
figure spares the stall rules while it moves and keeps the GPUs out of idle_paid; the row and
``status --json`` say it. The system tier drives the simulated engine
(tests/system/test_engine_loading.py)."""

from __future__ import annotations

import json

from gpudeck.agents.node.alerts import node_alerts
from gpudeck.agents.contract.jobs import JobKind, JobSpec
from gpudeck.agents.contract.stall import STARTUP_CAP_S, engine_quiet_since
from gpudeck.agents.contract.vocab import AlertKind, EngineState, EventKind, JobState
from gpudeck.agents.contract.wire import Engine, Gpu, Host, JobStatus, Snapshot
from gpudeck.agents.sense.loading import EngineStartups, LogFigures, attempt_header, last_figure
from gpudeck.agents.watch.checks import idle_gpus
from gpudeck.agents.watch.restarts import RestartEngine
from gpudeck.agents.workers.sim_engine.cli import loading_line
from gpudeck.console.state import FleetState
from support.tui import PINNED_NOW, pinned_fleet

# as SGLang 0.5.23 prints them (BAR_FORMAT in sglang/srt/utils/common.py; tqdm's default for
# the CUDA graph capture), each update after a carriage return
SGLANG = (b"[2026-01-05 10:00:01] Load weight begin. avail mem=139.10 GB\n"
          b"\rLoading safetensors checkpoint shards:   0% Completed | 0/15 [00:00<?, ?it/s]"
          b"\rLoading safetensors checkpoint shards:   7% Completed | 1/15 [00:02<00:30,  2.10s/it]"
          b"\rLoading safetensors checkpoint shards:  13% Completed | 2/15 [00:05<00:32,  2.50s/it]")
CAPTURE = ("\rCapturing batches (bs=8 avail_mem=20.31 GB):  40%|\u2588\u2588\u2588\u2588      | 2/5 "
           "[00:01<00:01,  1.90it/s]").encode()
OTHER_BAR = b"\rProcessing prompts:  50%|#####     | 5/10 [00:01<00:01,  5.00it/s]"


def test_the_newest_loading_line_is_the_figure():
    fig = last_figure(SGLANG)
    assert (fig.phase, fig.pct, fig.step, fig.elapsed_s) == ("loading", 13.0, "2/15", 5.0)
    fig = last_figure(SGLANG + b"\n" + CAPTURE + OTHER_BAR)  # another program's bar is not the engine's start
    assert (fig.phase, fig.pct, fig.step) == ("capturing", 40.0, "2/5")
    assert last_figure(b"INFO: Uvicorn running on http://127.0.0.1:30000\n" + OTHER_BAR) is None
    # a line cut mid-write (no "[elapsed<" yet) is not read as a smaller total
    assert last_figure(b"\rLoading safetensors checkpoint shards:  13% Completed | 2/1") is None


def test_the_sim_engine_prints_what_sglang_prints():
    line = loading_line(3, 8, 7.5, 20.0)
    assert line == "Loading safetensors checkpoint shards:  38% Completed | 3/8 [00:07<00:12,  2.50s/it]"
    assert last_figure(b"\r" + line.encode()).step == "3/8"


def _log(tmp_path, *parts: bytes):
    path = tmp_path / "job.log"
    with open(path, "ab") as f:
        for p in parts:
            f.write(p)
    return path


def test_only_the_attempts_own_lines_count_and_only_new_bytes_are_read(tmp_path):
    old = attempt_header(1) + b"sg at ...\n" + SGLANG + b"\n"
    path = _log(tmp_path, old, attempt_header(2) + b"sg at ...: python -m sglang.launch_server\n")
    figures = LogFigures(path, attempt=2)
    assert figures.poll() is None  # attempt 1's 13% is not this attempt's
    _log(tmp_path, b"\rLoading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]")
    assert figures.poll().step == "0/4"
    read_at = figures.offset
    _log(tmp_path, b"\rLoading safetensors checkpoint shards:  50% Completed | 2/4 [00:06<00:06,  3.00s/it]")
    fig = figures.poll()
    assert fig.pct == 50.0 and figures.offset > read_at
    since, moved = figures.since, figures.moved_at
    assert figures.poll() is fig and figures.moved_at == moved  # nothing new: the same figure, not moved
    # its keeper cut the log (agents/logcap.py): read again from its start, same bar, still moving
    path.write_bytes(b"\rLoading safetensors checkpoint shards:  75% Completed | 3/4 [00:09<00:03,  3.00s/it]")
    assert figures.poll().pct == 75.0 and figures.since == since


def _startups(tmp_path):
    return EngineStartups(lambda name, file: tmp_path / name / file)


def test_an_engine_loading_then_ready_with_its_time_to_ready_kept(tmp_path):
    (tmp_path / "sg").mkdir()
    _log(tmp_path / "sg", attempt_header(1) + b"sg at ...\n", SGLANG)
    startups = _startups(tmp_path)
    refused = Engine(url="u", state=EngineState.LOADING, error="connection refused: not listening yet")
    e = startups.apply("sg", 1, 1000.0, refused, now=1010.0)
    assert (e.phase, e.phase_pct, e.phase_step) == ("loading", 13.0, "2/15") and e.phase_since is not None
    ready = startups.apply("sg", 1, 1000.0, Engine(url="u", state=EngineState.READY), now=1072.0)
    assert ready.phase is None and ready.ready_s == 72.0
    assert json.loads((tmp_path / "sg" / "ready.json").read_text()) == {"attempt": 1, "ready_s": 72.0}
    # a new agent shows the same; the next attempt has its own
    again = _startups(tmp_path)
    assert again.apply("sg", 1, 1000.0, Engine(url="u", state=EngineState.READY), now=5000.0).ready_s == 72.0
    assert again.apply("sg", 2, 6000.0, Engine(url="u", state=EngineState.READY), now=6001.0).ready_s is None


def test_llama_server_says_no_percentage_it_is_loading_while_health_is_503(tmp_path):
    (tmp_path / "llama").mkdir()
    _log(tmp_path / "llama", attempt_header(1) + b"llama at ...\nllama_model_loader: loaded meta data\n")
    startups = _startups(tmp_path)
    e = startups.apply("llama", 1, 1000.0, Engine(url="u", state=EngineState.STARTING, error="503"), now=1080.0)
    assert (e.phase, e.phase_since, e.phase_pct) == ("loading", 1000.0, None)
    e = startups.apply("llama", 1, 1000.0, Engine(url="u", state=EngineState.LOADING), now=1001.0)
    assert e.phase == "starting"


# ---------------------------------------------------------------- the stall rules and idle GPUs

T0 = 1_000_000.0


def _loading(moved_at: float, pct: float = 13.0) -> Engine:
    return Engine(url="u", state=EngineState.LOADING, phase="loading", phase_since=T0, phase_pct=pct,
                  phase_step="2/15", phase_moved_at=moved_at)


def _engine_job(e: Engine) -> JobStatus:
    return JobStatus(name="sg", kind=JobKind.SGLANG_SERVER, state=JobState.STARTING, gpus=[0, 1], engine=e,
                     attempt=1, started_at=T0, pid=123)


def test_a_load_that_moves_is_never_stalled_one_that_stopped_is_past_the_cap():
    late = T0 + STARTUP_CAP_S + 900
    assert engine_quiet_since(_loading(T0 + 10), T0 + 600) is None  # within the cap: spared
    assert engine_quiet_since(_loading(late - 5), late) == late - 5  # still moving: quiet only 5 s
    spec = JobSpec(name="sg", kind="sglang-server", port=30000, model="/m", stall_after_s=600)

    def stalled(e: Engine) -> list:
        return [a for a in node_alerts([], [_engine_job(e)], {"sg": spec}, None, {}, late)
                if a.kind is AlertKind.STALLED]
    assert not stalled(_loading(late - 5))
    [alert] = stalled(_loading(T0 + 60))  # stuck at 13% since a minute after it began
    assert "loading with no progress" in alert.message


def test_restart_on_stall_leaves_a_moving_load_alone_and_restarts_a_stuck_one(tmp_path):
    spec = JobSpec(name="sg", kind="sglang-server", port=30000, model="/m", restart_on_stall="10m", max_restarts=3)
    from support.jobs import FakeJobs
    sup = FakeJobs([spec], workdir=tmp_path)
    events: list = []
    engine = RestartEngine(sup, lambda kind, msg, **kw: events.append(kind), started_at=T0 - 100)
    late = T0 + STARTUP_CAP_S + 1200
    for t in (T0 + 700, T0 + 1500, late):  # 40 minutes of a load that keeps moving
        engine.tick(t, [_engine_job(_loading(t - 30))], {})
    assert not sup.relaunches and EventKind.STALLED not in events
    engine.tick(late + 700, [_engine_job(_loading(late - 30))], {})  # no move for 12 minutes
    assert sup.relaunched.acquire(timeout=5) and EventKind.STALLED in events


def test_a_loading_engines_gpus_are_not_idle():
    gpus = [Gpu(i, f"GPU-{i}", "NVIDIA H200", 1000.0, 140_000.0, 0.0) for i in range(3)]
    assert idle_gpus(gpus, [_engine_job(_loading(T0))]) == [2]
    ready = _engine_job(Engine(url="u", state=EngineState.READY, ready_s=80.0))
    assert idle_gpus(gpus, [JobStatus(**{**ready.__dict__, "state": JobState.RUNNING})]) == [0, 1, 2]


# ---------------------------------------------------------------- what the console shows

def _state(*jobs: JobStatus) -> FleetState:
    state = FleetState(pinned_fleet(), clock=lambda: PINNED_NOW)
    host = Host("gpu-a", 1.0, 1, 1, 2, 0.0, 0.0, 0.0)
    state.apply(Snapshot("gpu-a", 1, PINNED_NOW, host, [], list(jobs)))
    return state


def test_the_row_and_status_json_show_the_loading_percentage_then_the_time_to_ready():
    e = Engine(url="u", state=EngineState.LOADING, phase="loading", phase_since=PINNED_NOW - 40, phase_pct=13.0,
               phase_step="2/15", phase_moved_at=PINNED_NOW - 2)
    state = _state(JobStatus("sglang-0", "sglang-server", "starting", [0], engine=e))
    row = state.job_row("sglang-0")
    assert "loading 13%, 40s" in row.flags and row.ready is None
    [doc] = [j for j in state.to_json()["jobs"] if j["name"] == "sglang-0"]
    assert (doc["phase"], doc["phase_pct"], doc["phase_s"]) == ("loading", 13.0, 40.0)
    assert doc["engine"]["phase_step"] == "2/15"
    llama = Engine(url="u", state=EngineState.STARTING, phase="loading", phase_since=PINNED_NOW - 80)
    assert "loading 1m 20s" in _state(JobStatus("sglang-0", "llama-server", "starting", [0],
                                                engine=llama)).job_row("sglang-0").flags
    ready = Engine(url="u", state=EngineState.READY, ready_s=112.0)
    state = _state(JobStatus("sglang-0", "sglang-server", "running", [0], engine=ready))
    row = state.job_row("sglang-0")
    assert row.ready == "ready in 1m 52s" and not any(f.startswith("loading") for f in row.flags)
    [doc] = [j for j in state.to_json()["jobs"] if j["name"] == "sglang-0"]
    assert doc["phase"] is None and doc["startup_s"] == 112.0
