"""The extraction's start-up (issue 25), on the CPU, no processes: the start-up caches' key
and layout, the phase the worker says while it compiles and how the watcher reads it (no
stall alert, no restart_on_stall while a job says it is compiling, up to the cap), and the
start-up in `plan extract`'s projection."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from gpudeck.agents.node.alerts import node_alerts
from gpudeck.agents.contract.documents import ProgressDoc, read_progress, write_document
from gpudeck.agents.contract.jobs import JobKind, JobSpec
from gpudeck.agents.contract.stall import STARTUP_CAP_S, quiet_since, starting_up
from gpudeck.agents.contract.vocab import AlertKind, EventKind, JobState
from gpudeck.agents.contract.wire import JobStatus, Progress
from gpudeck.agents.sense.progress import ProgressTracker
from gpudeck.agents.watch.restarts import RestartEngine
from gpudeck.agents.workers.extract import compile_cache
from gpudeck.agents.workers.extract.startup import StartupClock, process_started_at
from gpudeck.agents.workers.plan.extract_plan import project, startup_seconds, wall_time
from gpudeck.console.formatting import startup_text
from support.jobs import FakeJobs

QWEN = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 5120,
        "intermediate_size": 17408, "num_hidden_layers": 64, "num_attention_heads": 24, "num_key_value_heads": 4,
        "head_dim": 256, "vocab_size": 151936, "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16"}


def _key(config=QWEN, dtype="bfloat16", torch="torch==2.11.0", triton="triton==3.5.0", gpu="NVIDIA H200",
         cap="9.0") -> compile_cache.CacheKey:
    return compile_cache.CacheKey(shape=compile_cache.shape_of(config), dtype=dtype, torch=torch, triton=triton,
                                  gpu=gpu, capability=cap)


# ---------------------------------------------------------------- the start-up caches' key

def test_the_same_inputs_give_the_same_key():
    assert _key().digest == _key().digest == _key(config=dict(QWEN)).digest
    assert len(_key().digest) == 16
    # bf16 and bfloat16 are one dtype; a field that does not shape a kernel changes nothing
    assert _key(dtype="bf16").name == _key().name
    assert _key(config={**QWEN, "rms_norm_eps": 1e-5, "torch_dtype": "float32"}).digest == _key().digest
    # a transformers config object and its config.json give one key
    obj = SimpleNamespace(to_dict=lambda: dict(QWEN))
    assert _key(config=obj).digest == _key().digest


@pytest.mark.parametrize("change", [
    {"dtype": "float16"},
    {"config": {**QWEN, "hidden_size": 4096}},
    {"config": {**QWEN, "num_hidden_layers": 48}},
    {"config": {**QWEN, "num_key_value_heads": 8}},
    {"config": {**QWEN, "model_type": "qwen3_5_text", "layer_types": ["linear_attention", "full_attention"]}},
    {"torch": "torch==2.12.0"},
    {"triton": "triton==3.6.0"},
    {"gpu": "NVIDIA H100 80GB HBM3"},
    {"cap": "10.0"},
])
def test_a_changed_dtype_shape_version_or_gpu_gives_another_key(change):
    assert _key(**change).digest != _key().digest


def test_a_multimodal_config_is_keyed_by_its_text_config():
    wrapped = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
               "text_config": {k: v for k, v in QWEN.items() if k != "architectures"}}
    shape = compile_cache.shape_of(wrapped)
    assert shape["hidden_size"] == 5120 and shape["architectures"] == ["Qwen3_5ForConditionalGeneration"]


def test_the_cache_layout_and_the_environment(tmp_path, monkeypatch):
    env: dict = {}
    key = _key()
    d = compile_cache.use(str(tmp_path / "cache"), key, environ=env)
    assert d is not None and not d.warm
    assert d.root == str(tmp_path / "cache" / f"qwen3-bfloat16-{key.digest}")
    assert env["TRITON_CACHE_DIR"] == d.triton == f"{d.root}/triton"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == d.inductor == f"{d.root}/inductor"
    assert env["TRITON_CACHE_AUTOTUNING"] == "1"
    assert json.loads((tmp_path / "cache" / key.name / "key.json").read_text())["dtype"] == "bfloat16"
    # a kernel written there: the next start on this node finds the cache warm
    (tmp_path / "cache" / key.name / "triton" / "k.cubin").write_bytes(b"x")
    assert compile_cache.use(str(tmp_path / "cache"), key, environ={}).warm
    # another dtype never shares the directory
    assert compile_cache.dirs_for(str(tmp_path / "cache"), _key(dtype="float16")).root != d.root
    # a variable the operator set wins; 'off' leaves everything to torch
    env = {"TRITON_CACHE_DIR": "/elsewhere"}
    d = compile_cache.use(str(tmp_path / "cache"), key, environ=env)
    assert env["TRITON_CACHE_DIR"] == "/elsewhere" and d.ours == ("TORCHINDUCTOR_CACHE_DIR",)
    assert compile_cache.use("off", key, environ={}) is None
    monkeypatch.setenv("GPUDECK_HOME", str(tmp_path / "home"))
    assert compile_cache.default_root() == str(tmp_path / "home" / "cache" / "compile")


def test_the_key_reads_the_installed_versions_without_importing():
    pytest.importorskip("torch", reason="the key names torch's installed version (pip install '.[extract]')")
    key = compile_cache.key_for(QWEN, "bfloat16", "cpu", None)
    assert key.torch is not None and key.torch.startswith("torch==")


# ---------------------------------------------------------------- the phase the worker says

def test_the_startup_clock_says_each_phase_keeping_the_last_counts(tmp_path):
    path = tmp_path / "progress.json"
    write_document(path, ProgressDoc(done=700, total=1000, tokens=12345))  # the last attempt's
    clock = StartupClock(str(path), started_at=time.time() - 5.0)
    clock.enter("starting")
    clock.enter("loading")
    clock.enter("compiling")
    doc = read_progress(path)
    assert (doc.done, doc.total, doc.tokens, doc.phase) == (700, 1000, 12345, "compiling")
    assert doc.phase_since == pytest.approx(time.time(), abs=2) and doc.startup_s is None
    clock.enter("running", write=False)
    assert read_progress(path).phase == "compiling"  # the pipeline's writer says it from here
    assert clock.shard_durable() is True  # the first: the caller records what the start-up learned
    first = clock.startup_s
    assert clock.shard_durable() is False  # only the first counts
    assert clock.startup_s == first and 5.0 <= first < 10.0
    assert set(clock.breakdown()) == {"process", "starting", "loading", "compiling", "first_shard"}
    assert sum(clock.breakdown().values()) == pytest.approx(first, abs=0.05)
    assert clock.fields()["phase"] == "running"


def test_the_process_start_is_before_now():
    assert time.time() - 3600 < process_started_at() <= time.time()


def test_old_progress_files_parse_and_the_phase_reaches_the_wire(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text(json.dumps({"done": 3, "total": 10}))  # written before the phase existed
    old = read_progress(path)
    assert old.phase is None and old.phase_since is None and old.startup_s is None
    path.write_text(json.dumps({"done": 3, "phase": "compiling", "phase_since": 1000.0, "state": "starting"}))
    p = ProgressTracker(str(path), None, None).poll(now=1010.0)
    assert p is not None and (p.phase, p.phase_since, p.startup_s) == ("compiling", 1000.0, None)
    assert startup_text(p, now=1080.0) == "compiling 1m 20s"
    assert startup_text(Progress(done=1, phase="running", phase_since=1.0), now=5.0) is None


# ---------------------------------------------------------------- the watcher's stall rule, with a clock

T0 = 1_000_000.0


def _compiling(since: float = T0) -> Progress:
    return Progress(done=0, total=100, phase="compiling", phase_since=since)


def test_no_stall_is_counted_while_the_job_says_it_is_compiling():
    p = _compiling()
    for minutes in (1, 10, 29):
        now = T0 + minutes * 60
        assert starting_up(p, now) and quiet_since(p, T0 - 100, now, started_at=T0 - 100) is None
    # past the cap it is judged as any job: silent since its start
    late = T0 + STARTUP_CAP_S + 1
    assert not starting_up(p, late) and quiet_since(p, None, late, started_at=T0 - 100) == T0 - 100
    # once it says it runs, its silence counts from then, not from its start
    running = Progress(done=0, total=100, phase="running", phase_since=T0 + 600)
    assert quiet_since(running, None, T0 + 700, started_at=T0 - 100) == T0 + 600
    # a job that says nothing: as before
    assert quiet_since(Progress(done=0), T0, T0 + 5, started_at=T0 - 100) == T0


def _job(progress: Progress, started_at: float = T0 - 60) -> JobStatus:
    return JobStatus(name="x", kind=JobKind.EXTRACT, state=JobState.RUNNING, progress=progress, attempt=1,
                     started_at=started_at, pid=123)


def test_the_stall_alert_waits_for_the_compile():
    spec = JobSpec(name="x", command=["x"], stall_after_s=600)
    stalled = [a for a in node_alerts([], [_job(_compiling())], {"x": spec}, None, {"x": T0 - 60}, T0 + 1200)
               if a.kind is AlertKind.STALLED]
    assert not stalled
    stalled = [a for a in node_alerts([], [_job(Progress(done=0, total=100))], {"x": spec}, None, {"x": T0 - 60},
                                      T0 + 1200) if a.kind is AlertKind.STALLED]
    assert stalled
    late = T0 + STARTUP_CAP_S + 60
    assert [a for a in node_alerts([], [_job(_compiling())], {"x": spec}, None, {"x": T0 - 60}, late)
            if a.kind is AlertKind.STALLED]


def _engine(tmp_path):
    spec = JobSpec(name="x", kind=JobKind.EXTRACT, command=["x"], restart_on_stall="10m", max_restarts=3)
    jobs = FakeJobs([spec])
    events: list = []
    return RestartEngine(jobs, lambda kind, msg, **kw: events.append((kind, msg)), started_at=T0 - 100), jobs, events


def test_restart_on_stall_leaves_a_compiling_job_alone_until_the_cap(tmp_path):
    engine, jobs, events = _engine(tmp_path)
    job = _job(_compiling(T0 - 30))
    for minutes in (5, 15, 25):  # restart_on_stall is 10m: a silent job would be killed at 10
        engine.tick(T0 + minutes * 60, [job], {"x": T0 - 60})
    assert not jobs.relaunches and not [e for e in events if e[0] is EventKind.STALLED]
    engine.tick(T0 + STARTUP_CAP_S + 30, [job], {"x": T0 - 60})  # compiling for over 30 min: a stall
    assert jobs.relaunched.acquire(timeout=5)
    assert [e for e in events if e[0] is EventKind.STALLED]


def test_restart_on_stall_still_restarts_a_silent_job(tmp_path):
    engine, jobs, events = _engine(tmp_path)
    engine.tick(T0 + 11 * 60, [_job(Progress(done=0, total=100))], {"x": T0 - 60})
    assert jobs.relaunched.acquire(timeout=5)


# ---------------------------------------------------------------- plan extract counts the start-up

def test_the_projection_adds_the_startup_per_start():
    base = dict(layers_kept=5, num_layers=64, hidden_size=5120, dtype_bytes=2, samples=1000, tokens=1_000_000,
                free_bytes=10**15, tokens_per_s=10_000)
    assert project(**base)["projected_wall_s"] == 100.0
    p = project(**base, startup_s=40.0, restarts=4)
    assert p["projected_wall_s"] == 100.0 + 5 * 40.0 and p["startup_total_s"] == 200.0 and p["restarts"] == 4
    assert wall_time(10, None, 40.0) is None


def test_the_plan_reads_the_workers_measured_startup(tmp_path):
    args = SimpleNamespace(startup_s=None, out=str(tmp_path), part=None, progress_file=None)
    assert startup_seconds(args, None)[0] is None
    assert startup_seconds(args, {"startup_s": 50.0, "cache_warm": False}) == (
        50.0, "measured by the pilot (model load to first durable shard, cold start-up cache)")
    write_document(tmp_path / "progress.json", ProgressDoc(done=5, startup_s=42.5))
    s, source = startup_seconds(args, {"startup_s": 50.0})
    assert s == 42.5 and "worker's last start" in source
    args.startup_s = 12.0
    assert startup_seconds(args, None) == (12.0, "--startup-s")
