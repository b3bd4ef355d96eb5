"""Helpers for the console's tests: what the screen shows, waiting on it, fleets of real
command jobs, and a pinned fleet state for snapshot tests."""

from __future__ import annotations

import io
import json
import os
import re
import socket
from pathlib import Path
from typing import Any, Callable, Optional

from rich.console import Console

from support.core import ROOT, reap  # noqa: F401  (re-exported for the TUI tests)
from support.wait import wait_for_async
from gpudeck.agents.contract.wire import (Alert, Disk, Engine, Gpu, GpuProcess, History, Host, JobPlan, JobStatus,
                                          Progress, Sample, Snapshot)
from gpudeck.remote.fleet import Fleet, parse_fleet

SNAPSHOTS = Path(__file__).resolve().parent.parent / "snapshots"
UPDATE_SNAPSHOTS = bool(os.environ.get("GPUDECK_UPDATE_SNAPSHOTS"))


# ---------------------------------------------------------------- what the user sees


def screen_text(app) -> str:
    """The whole screen as plain text, dialogs and notifications included."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


def screen_words(app) -> str:
    """The screen's words in reading order, one space between them, borders dropped: a
    sentence a dialog wrapped reads whole, wherever it wrapped (a path in it moves the break:
    tmp_path is longer under pytest-xdist, ``popen-gw0/``)."""
    return " ".join(re.sub(r"[\u2500-\u259f]", " ", screen_text(app)).split())


def notifications_text(app) -> str:
    """What the notice on the bottom line says (the console shows one at a time, over the
    footer); the footer's key hints when there is none."""
    return " ".join(screen_text(app).splitlines()[-1].strip().strip("▌").split())


async def wait_until(pilot, cond: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """``wait_for_async`` for a Textual app: the app runs between polls (``pilot.pause``), and a
    failure shows what was on the screen."""
    return await wait_for_async(cond, timeout, what, pause=pilot.pause,
                                detail=lambda: f"--- screen:\n{screen_text(pilot.app)}\n{_app_state(pilot.app)}")


def _app_state(app) -> str:
    """For a failure: the app's workers, its verdicts and the notices it still holds (the screen
    shows one notice at a time, and a short one is gone by then)."""
    workers = [f"{w.name} ({w.group}): {w.state.name}" for w in app.workers]
    notices = [f"{n.title}: {n.message}" for n in getattr(app, "_notifications", [])]
    verdicts = [f"{j} {op}: {v}" for j, op, v in getattr(app, "verdicts", [])]
    client = getattr(app, "client", None)
    links = sorted(getattr(client, "links", {}) or {})
    return (f"--- workers: {workers}\n--- verdicts: {verdicts}\n--- notices held: {notices}\n"
            f"--- nodes linked: {links}")


async def confirm_dialog(pilot, what: str = "the confirm dialog", timeout: float = 30.0) -> Any:
    """The confirm dialog once it takes keys: pushed, mounted, and its safe button focused (its
    on_mount), so that the answer pressed next is the dialog's and not the screen's under it."""
    from gpudeck.console.screens.confirm import ConfirmScreen

    def ready() -> Any:
        s = pilot.app.screen
        return isinstance(s, ConfirmScreen) and s.is_mounted and getattr(s.focused, "id", None) == "no" and s
    return await wait_until(pilot, ready, timeout, what=what)


async def answer(pilot, key: str) -> None:
    """Press ``key`` in the confirm dialog that is up, and wait until it has closed."""
    dialog = pilot.app.screen
    await pilot.press(key)
    await wait_until(pilot, lambda: dialog not in pilot.app.screen_stack, what=f"the dialog closed by {key!r}")


async def describe(pilot, tab: str = "fields", key: str = "enter") -> Any:
    """Press ``key`` (enter or d: describe, as in k9s) on the row under the cursor and wait for
    the describe screen; ``tab="log"``: a job's chart and log (its `l`)."""
    from gpudeck.console.screens.describe import DescribeScreen

    app = pilot.app
    await pilot.press(key)
    screen = await wait_until(pilot, lambda: isinstance(app.screen, DescribeScreen) and app.screen.composed
                              and app.screen, what="the describe screen")
    if tab != "fields":
        await pilot.press("l")
        await wait_until(pilot, lambda: screen.query_one("#describe-tabs").current == tab, what=f"its {tab} tab")
    return screen


async def command(pilot, text: str, enter: bool = True) -> Any:
    """`:` then ``text``, as typed, once the command line has the keys; then enter."""
    from gpudeck.console.screens.command_line import CommandLine

    app = pilot.app
    await pilot.press("colon")
    line = await wait_until(pilot, lambda: isinstance(app.screen, CommandLine) and app.screen.is_mounted
                            and getattr(app.screen.focused, "id", None) == "command" and app.screen,
                            what="the command line")
    await pilot.press(*text)
    await wait_until(pilot, lambda: line.query_one("#command").value == text, what=f"{text!r} typed")
    if enter:
        await pilot.press("enter")
        await wait_until(pilot, lambda: line not in app.screen_stack, what="the command line closed")
    return line


async def wait_for_text(pilot, text: str, timeout: float = 30.0) -> str:
    return await wait_until(pilot, lambda: text in screen_text(pilot.app) and screen_text(pilot.app), timeout,
                            what=repr(text))


def job_row(app, name: str):
    """The JobRow the app holds for ``name`` (None before its node answered)."""
    return next((r for r in app.state.job_rows() if r.name == name), None)


# ---------------------------------------------------------------- fleets of real jobs


def progress_script(total: int = 100_000, step_s: float = 0.1) -> str:
    """A job that counts, reports progress.json, logs a line per item and resumes where it
    stopped (its count is kept in the job's state directory)."""
    return (f'n=$(cat "$GPUDECK_JOB_DIR/count" 2>/dev/null || echo 0); echo "resuming at $n"; '
            f'while true; do n=$((n+1)); echo $n > "$GPUDECK_JOB_DIR/count"; '
            f'printf \'{{"done": %d, "total": {total}, "tokens": %d, "quality": {{"cut_at_max_tokens": 2}}}}\' '
            f'$n $((n*250)) > "$GPUDECK_PROGRESS_FILE.tmp"; mv "$GPUDECK_PROGRESS_FILE.tmp" '
            f'"$GPUDECK_PROGRESS_FILE"; echo "item $n"; sleep {step_s}; done')


def write_fleet(tmp: Path, home: Path, jobs: list[dict], extra: str = "", interval: float = 0.2) -> Fleet:
    """A fleet file of command jobs on this machine, with its own agent home."""
    lines = [f"[defaults]\nhome = {json.dumps(str(home))}\nnvml = false\ninterval = {interval}\n", extra]
    for j in jobs:
        lines.append("[[jobs]]")
        for k, v in j.items():
            lines.append(f"{k} = {json.dumps(v)}")
        lines.append("")
    path = tmp / "fleet.toml"
    path.write_text("\n".join(lines))
    return parse_fleet(path.read_text(), str(path))


def shell_job(name: str, script: str, **kw: Any) -> dict:
    return {"name": name, "kind": "command", "command": ["sh", "-c", script], **kw}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




# ---------------------------------------------------------------- a pinned fleet for snapshot tests

PINNED_NOW = 1_764_504_000.0  # 2025-11-30 12:00:00 UTC


def pinned_fleet(price_per_hour: Optional[float] = None) -> Fleet:
    """The pinned fleet; with ``price_per_hour``, node gpu-a costs that (the dollars shown)."""
    price = f"price_per_hour = {price_per_hour}\n" if price_per_hour is not None else ""
    text = f"""
[[nodes]]
name = "gpu-a"
host = "gpu-a.example"
{price}
[[nodes]]
name = "gpu-b"
host = "gpu-b.example"

[[jobs]]
name = "sglang-0"
node = "gpu-a"
kind = "sglang-server"
model = "/models/Qwen3-8B"
port = 30000
gpus = [0, 1]

[[jobs]]
name = "gen"
node = "gpu-a"
kind = "generate"
servers = ["sglang-0"]
prompts = "/data/prompts.jsonl"
out = "/data/gen"
command = ["python", "-m", "my_generate", "--out", "/data/gen"]

[[jobs]]
name = "extract"
node = "gpu-a"
kind = "command"
command = ["python", "extract.py"]
gpus = [2, 3]

[[jobs]]
name = "audit"
node = "gpu-b"
kind = "command"
command = ["python", "audit.py"]
"""
    return parse_fleet(text, "pinned.toml")


def pinned_events() -> list[Any]:
    """What two nodes said: gpu-a busy (an engine, a generation job against it, an extraction
    that died, a process no job owns), gpu-b reachable before and now down."""
    t = PINNED_NOW
    a_gpus = [
        Gpu(0, "GPU-a0", "NVIDIA H200", 120_000.0, 143_771.0, 97.0, 64.0, 612.0,
            [GpuProcess(4101, 119_500.0, "sglang-0", 98.0, "python -m sglang.launch_server --model /models/Qwen3-8B --tp 2")]),
        Gpu(1, "GPU-a1", "NVIDIA H200", 119_800.0, 143_771.0, 95.0, 62.0, 598.0,
            [GpuProcess(4102, 119_300.0, "sglang-0", 97.0, "sglang::scheduler_TP1")]),
        Gpu(2, "GPU-a2", "NVIDIA H200", 55_400.0, 143_771.0, 0.0, 38.0, 121.0,
            [GpuProcess(4242, 55_400.0, None, 0.0, "python notebook_kernel.py")]),
        Gpu(3, "GPU-a3", "NVIDIA H200", 30_200.0, 143_771.0, 41.0, 51.0, 233.0,
            [GpuProcess(4301, 22_000.0, "gen", 12.5, "python -m my_generate --out /data/gen"),
             GpuProcess(4103, 8_000.0, "sglang-0")]),
    ]
    a_jobs = [
        JobStatus("sglang-0", "sglang-server", "running", [0, 1], ["GPU-a0", "GPU-a1"], pid=4100, pgid=4100,
                  pids=[4100, 4101, 4102], attempt=1, started_at=t - 7200,
                  engine=Engine("http://127.0.0.1:30000/metrics", "ready", "sglang", 2412.5, 1.9e7, 48.0, 3.0,
                                0.62, None), log_path="/home/op/.gpudeck/jobs/sglang-0/job.log"),
        JobStatus("gen", "generate", "running", [], [], pid=4200, pgid=4200, pids=[4200], attempt=2,
                  started_at=t - 3600,
                  progress=Progress(123_456, 914_000, 35_000_000, 21.4, 2390.0, (914_000 - 123_456) / 21.4, t,
                                    {"cut_at_max_tokens": 12, "empty_answer": 3, "errors": 0}),
                  log_path="/home/op/.gpudeck/jobs/gen/job.log", first_started_at=t - 7200,
                  plan=JobPlan("/data/gen/plan.json", 12_000.0, 44_160.0, 268.0, t - 7200, t - 7300)),
        JobStatus("extract", "command", "failed", [2, 3], ["GPU-a2", "GPU-a3"], attempt=3, exit_code=137,
                  started_at=t - 900, ended_at=t - 60,
                  progress=Progress(4_000, 914_000, None, None, None, None, t - 60, {})),
    ]
    a_alerts = [
        Alert("shared_gpu", "GPU 3: jobs gen, sglang-0 share it", gpu=3, since=t),
        Alert("unowned_gpu_process", "GPU 2: pid 4242 holds 54.1 GiB and belongs to no job", gpu=2, pid=4242,
              since=t),
        Alert("job_died", "job extract died (exit code 137) on attempt 3", job="extract", since=t),
    ]
    host_a = Host("gpu-a", 37.0, 64, 210 * 2**30, 1024 * 2**30, 12.3, 11.0, 10.0,
                  [Disk("/data", 4 * 2**40, 30 * 2**40)])
    host_b = Host("gpu-b", 3.0, 32, 20 * 2**30, 512 * 2**30, 0.4, 0.3, 0.2, [Disk("/data", 2**40, 8 * 2**40)])
    b_jobs = [JobStatus("audit", "command", "exited", [], [], attempt=1, exit_code=0, started_at=t - 5000,
                        ended_at=t - 4000)]
    history = History("gpu-a", [Sample(t - 15 * k, [], [97.0 - k, 90.0 + k % 3 * 3, 0.0, 30.0 + 2 * k], {"sglang-0": 2000.0 + 40 * (k % 7), "gen": 2300.0 - 30 * (k % 5)},
                                       {"gen": 123_456 - 2_000 * k}) for k in range(12, 0, -1)])
    return [
        history,
        Snapshot("gpu-a", 10, t, host_a, a_gpus, a_jobs, a_alerts),
        Snapshot("gpu-b", 4, t - 300, host_b, [Gpu(0, "GPU-b0", "NVIDIA L40S", 0.0, 46_068.0, 0.0, 30.0, 35.0, [])],
                 b_jobs, []),
        ("down", "gpu-b", "link lost: no word from the agent for 45 s", t - 240, 8.0),
    ]


def pinned_timeline() -> dict[str, list[dict]]:
    """The night both nodes' events.jsonl tell, as the agents answer ``events``."""
    t = PINNED_NOW

    def ev(node, ago, seq, kind, message, job=None, gpu=None, key=None, **details):
        return {"t": t - ago, "seq": seq, "node": node, "kind": kind, "message": message, "job": job, "gpu": gpu,
                "key": key, "details": details}

    throttle = "gpu_health:throttle:3:hw_slowdown"
    return {
        "gpu-a": [
            ev("gpu-a", 6 * 3600, 101, "died", "job extract died (exit code 137) on attempt 1", "extract"),
            ev("gpu-a", 6 * 3600 - 10, 102, "restarted", "job extract restarted: attempt 2, restart 1 of 5; "
               "reason: failed (exit code 137)", "extract", reason="failed"),
            ev("gpu-a", 5 * 3600, 103, "gpu_health", "GPU 3: clocks slowed down (hw_slowdown) (job gen)", "gen", 3,
               throttle),
            ev("gpu-a", 5 * 3600 - 2400, 104, "resolved", "resolved after 2400 s: GPU 3: clocks slowed down "
               "(hw_slowdown) (job gen)", "gen", 3, throttle, of="gpu_health"),
            ev("gpu-a", 3600, 105, "died", "job extract died (exit code 137) on attempt 3", "extract"),
            ev("gpu-a", 3590, 106, "gave_up", "job extract: gave up after 2 restart(s) (max_restarts 2); last: "
               "failed (exit code 137)", "extract"),
            ev("gpu-a", 3580, 107, "notified", "gave_up sent to slack https://hooks…/…", "extract", of=106),
        ],
        "gpu-b": [
            ev("gpu-b", 4000, 40, "finished", "job audit finished (exit code 0) on attempt 1", "audit"),
            ev("gpu-b", 900, 41, "temperature", "GPU 0 at 87 C (limit 85 C)", None, 0, "temperature:0"),
        ],
    }


def feed_pinned(app) -> None:
    """Post the pinned events to the app as the transport would."""
    from gpudeck.console.messages import HistoryReceived, NodeWentDown, SnapshotReceived
    from gpudeck.remote.link import NodeError

    for ev in pinned_events():
        if isinstance(ev, History):
            app.post_message(HistoryReceived(ev))
        elif isinstance(ev, Snapshot):
            app.post_message(SnapshotReceived(ev))
        else:
            _, node, reason, since, retry = ev
            app.post_message(NodeWentDown(node, NodeError(node, reason), since, retry))


def compare_snapshot(name: str, text: str, svg: Optional[str] = None) -> None:
    """Compare the screen with the stored one; GPUDECK_UPDATE_SNAPSHOTS=1 stores it."""
    SNAPSHOTS.mkdir(exist_ok=True)
    txt_path = SNAPSHOTS / f"{name}.txt"
    if UPDATE_SNAPSHOTS or not txt_path.exists():
        txt_path.write_text(text)
        if svg is not None:
            (SNAPSHOTS / f"{name}.svg").write_text(svg)
        if not UPDATE_SNAPSHOTS:
            raise AssertionError(f"no stored snapshot {txt_path.name}: stored it now; look at it and run again")
        return
    expected = txt_path.read_text()
    if text != expected:
        (SNAPSHOTS / f"{name}.actual.txt").write_text(text)
        raise AssertionError(f"screen differs from {txt_path} (see {name}.actual.txt; "
                             f"GPUDECK_UPDATE_SNAPSHOTS=1 to accept)\n--- expected:\n{expected}\n--- actual:\n{text}")
    if svg is not None:
        svg_path = SNAPSHOTS / f"{name}.svg"
        if svg_path.exists() and svg_path.read_text() != svg:
            (SNAPSHOTS / f"{name}.actual.svg").write_text(svg)
            raise AssertionError(f"colours differ from {svg_path} (text is the same); see {name}.actual.svg")


def event_of(node: str, d: dict) -> Any:
    """A row of the events view from an event as a node's answer holds it (its fields checked
    as ``ops.ReadEvents().answer`` checks them)."""
    from gpudeck.agents.contract.plain import from_dict
    from gpudeck.agents.contract.wire import Event
    from gpudeck.console.timeline import event_row

    return event_row(node, from_dict(Event, {"node": node, "message": "", **d}))
