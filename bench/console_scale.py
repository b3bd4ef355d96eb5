"""The console at fleet scale: 256 nodes x 8 GPUs and 512 jobs, one full update a second.

What it measures, in this process, on a headless Textual app of the real console:

1. the time to apply one full update (CPU time of the UI thread, so that other processes
   on a busy machine do not count): 256 snapshots folded into FleetState, the visible
   view brought up to date, and the screen repainted through Textual's own repaint path
   (layout, compositor, the terminal bytes), for the fleet view and the jobs view;
2. the same update through a plain DataTable (one row per GPU), two ways: the naive full
   refresh (clear, then add every row) and update_cell on the cells that changed inside
   one batch_update;
3. the CPU share at one full update a second for ``--seconds`` (CPU time of this process
   over wall time): the console with snapshots posted as messages, as the transport does,
   and the naive DataTable. The console twice: every node's snapshot at once (the baseline,
   the easy case: one redraw a second), and each node's snapshot at its own phase of the
   second, as real agents tick out of phase (the console paces its redraws by their cost,
   console/pacing.py); with the redraws it made per second.

Every snapshot is built before measuring starts. Prints the figures, the ratio last.

    python bench/console_scale.py [--nodes 256] [--gpus 8] [--jobs-per-node 2] [--rounds 12] [--seconds 20]
                                  [--unpaced] [--spread-only] [--charts]

``--charts``: the charts alone (console/chart.py): the memory of the coarse series after the
greeting's 12 hours on every node, what a snapshot round costs with them, one chart built and
laid out per range (the state's figures, then the cells), the overview's full update with its
chart at 24h; and, when plotext and textual-plotext can be imported, the same chart drawn by
textual-plotext's ``Plot`` at the same size (the baseline). The ratio last.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpudeck.agents.contract.jobs import JobSpec  # noqa: E402
from gpudeck.agents.contract.wire import Disk, Engine, Gpu, GpuProcess, Host, JobStatus, Progress, Snapshot
from gpudeck.remote.fleet import Fleet, Node  # noqa: E402

SIZE = (160, 50)


def make_fleet(nodes: int, jobs_per_node: int) -> Fleet:
    ns = [Node(name=f"node{i:03d}", host=f"node{i:03d}") for i in range(nodes)]
    jobs = []
    for i in range(nodes):
        for k in range(jobs_per_node):
            name = f"n{i:03d}-{'sglang' if k % 2 == 0 else 'gen'}{k // 2}"
            if k % 2 == 0:
                jobs.append(JobSpec(name=name, kind="sglang-server", node=ns[i].name, model="/models/m",
                                    port=30000 + k, gpus=[0, 1, 2, 3]))
            else:
                jobs.append(JobSpec(name=name, kind="command", node=ns[i].name, command=["true"], gpus=[4, 5, 6, 7]))
    return Fleet(path="bench-fleet.toml", nodes=ns, jobs=jobs)


def make_round(fleet: Fleet, r: int, gpus: int, rng: random.Random, show_procs: bool = True) -> list[Snapshot]:
    t = 1_764_500_000.0 + r
    out = []
    by_node: dict[str, list[JobSpec]] = {}
    for j in fleet.jobs:
        by_node.setdefault(j.node, []).append(j)
    for n, node in enumerate(fleet.nodes):
        specs = by_node.get(node.name, [])
        gpu_list = []
        for g in range(gpus):
            owner = next((s for s in specs if g in s.gpus), None)
            procs = [GpuProcess(pid=10000 + n * 10 + g, used_mib=70_000 + rng.random() * 5000,
                                job=owner.name if owner else None)]
            gpu_list.append(Gpu(index=g, uuid=f"GPU-{n}-{g}", name="NVIDIA H200", mem_used_mib=procs[0].used_mib + 500,
                                mem_total_mib=143_771.0, util_pct=rng.uniform(60, 100), temp_c=rng.uniform(45, 80),
                                power_w=rng.uniform(300, 700), processes=procs if show_procs else []))
        jobs = []
        for s in specs:
            if s.kind == "sglang-server":
                eng = Engine(url=f"http://127.0.0.1:{s.port}/metrics", state="ready", flavor="sglang",
                             tokens_per_s=rng.uniform(2000, 3000), running=float(rng.randint(20, 64)),
                             queued=float(rng.randint(0, 10)), kv_usage=rng.random(), accept_length=None)
                jobs.append(JobStatus(name=s.name, kind=s.kind, state="running", gpus=s.gpus, pid=20000 + n,
                                      attempt=1, engine=eng))
            else:
                done = 10_000 + r * 40 + n
                prog = Progress(done=done, total=914_000, tokens=done * 300, rate_per_s=rng.uniform(35, 45),
                                tokens_per_s=rng.uniform(9000, 12000), eta_s=(914_000 - done) / 40.0,
                                updated_at=t, quality={"cut_at_max_tokens": r // 3, "empty_answer": 0})
                jobs.append(JobStatus(name=s.name, kind=s.kind, state="running", gpus=s.gpus, pid=30000 + n,
                                      attempt=1, progress=prog))
        host = Host(hostname=node.name, cpu_pct=rng.uniform(5, 60), cpu_count=64, mem_used_bytes=200 * 2**30,
                    mem_total_bytes=1024 * 2**30, load1=rng.uniform(1, 20), load5=5.0, load15=5.0,
                    disks=[Disk(path="/data", free_bytes=10 * 2**40, total_bytes=30 * 2**40)])
        out.append(Snapshot(node=node.name, seq=r + 1, t=t, host=host, gpus=gpu_list, jobs=jobs))
    return out


# ---------------------------------------------------------------- the console


async def console_update_times(fleet: Fleet, rounds: list[list[Snapshot]], view: str) -> tuple[list[float], int]:
    from gpudeck.console.app import make_app

    app = make_app(fleet, connect=False, tick_s=0, initial_view=view, freeze_startup=True)  # as `gpudeck up` runs
    times = []
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app.screen
        table = screen.table(view)
        for snaps in rounds:
            t0 = time.thread_time()
            for s in snaps:
                app.state.apply(s)
            app.refresh_views()
            screen._on_timer_update()  # Textual's own repaint: layout, compositor, terminal bytes
            times.append(time.thread_time() - t0)
            await pilot.pause()
        rows = table.row_count
    return times[2:], rows  # the first rounds build the rows and the layout


async def console_cpu_share(fleet: Fleet, rounds: list[list[Snapshot]], seconds: float, view: str,
                            spread: bool = False, unpaced: bool = False) -> tuple[float, float]:
    """Snapshots posted as messages, as the transport does, once a second: all at once, or
    (``spread``) each node's at its own phase of the second. The CPU share, and the redraws
    per second. ``unpaced``: a redraw 50 ms after any snapshot, whatever it costs (the
    console before pacing)."""
    from gpudeck.console.app import make_app
    from gpudeck.console.messages import SnapshotReceived

    options = {"redraw_share": float("inf")} if unpaced else {}
    app = make_app(fleet, connect=False, initial_view=view, freeze_startup=True, **options)
    phases = [random.Random(f"phase-{n.name}").random() if spread else 0.0 for n in fleet.nodes]
    order = sorted(range(len(fleet.nodes)), key=lambda i: phases[i])
    async with app.run_test(size=SIZE) as pilot:
        for s in rounds[0]:
            app.post_message(SnapshotReceived(s))
        await pilot.pause(0.5)
        wall0, cpu0, redraws0 = time.perf_counter(), time.process_time(), app.pacer.redraws
        n = 0
        while time.perf_counter() - wall0 < seconds:
            snaps = rounds[1 + n % (len(rounds) - 1)]
            for i in order:  # (all at once: every phase is 0)
                await asyncio.sleep(max(0.0, wall0 + n + phases[i] - time.perf_counter()))
                app.post_message(SnapshotReceived(snaps[i]))
            n += 1
            await asyncio.sleep(max(0.0, wall0 + n - time.perf_counter()))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        redraws = app.pacer.redraws - redraws0
    return cpu / wall, redraws / wall


# ---------------------------------------------------------------- the baseline: a plain DataTable


def gpu_cells(s: Snapshot) -> list[tuple[str, tuple]]:
    out = []
    for g in s.gpus:
        holder = ", ".join(p.job or f"pid {p.pid}" for p in g.processes)
        out.append((f"{s.node}/{g.index}", (s.node, f"GPU{g.index}", f"{g.mem_used_mib / 1024:.1f}/{g.mem_total_mib / 1024:.1f}",
                                            f"{g.util_pct:.0f}%", f"{g.temp_c:.0f}C", f"{g.power_w:.0f}W", holder)))
    return out


class _PlainTable:
    """The baseline: one plain DataTable row per GPU, updated either naively (clear, then add
    every row) or with update_cell on the cells that changed, in one batch_update."""

    COLUMNS = ("node", "gpu", "memory", "util", "temp", "power", "held by")

    def __init__(self, app, table, first: list[Snapshot]) -> None:
        self.app, self.table = app, table
        self.keys = table.add_columns(*self.COLUMNS)
        rows = [c for s in first for c in gpu_cells(s)]
        for key, cells in rows:
            table.add_row(*cells, key=key)
        self.current = dict(rows)

    def update(self, snaps: list[Snapshot], naive: bool) -> None:
        rows = [c for s in snaps for c in gpu_cells(s)]
        if naive:
            self.table.clear()
            for key, cells in rows:
                self.table.add_row(*cells, key=key)
        else:
            with self.app.batch_update():
                for key, cells in rows:
                    for i, (a, b) in enumerate(zip(self.current[key], cells)):
                        if a != b:
                            self.table.update_cell(key, self.keys[i], b)
                    self.current[key] = cells


def _plain_app():
    from textual.app import App, ComposeResult
    from textual.widgets import DataTable

    class Plain(App):
        def compose(self) -> ComposeResult:
            yield DataTable(id="t")

    return Plain()


async def datatable_update_times(rounds: list[list[Snapshot]], naive: bool) -> list[float]:
    from textual.widgets import DataTable

    app = _plain_app()
    times = []
    async with app.run_test(size=SIZE) as pilot:
        plain = _PlainTable(app, app.query_one(DataTable), rounds[0])
        await pilot.pause()
        for snaps in rounds[1:]:
            t0 = time.thread_time()
            plain.update(snaps, naive)
            app.screen._on_timer_update()
            times.append(time.thread_time() - t0)
            await pilot.pause()
    return times[1:]


async def datatable_cpu_share(rounds: list[list[Snapshot]], seconds: float, naive: bool) -> float:
    """The baseline at one full update a second; its deferred work (column widths on idle)
    counts here, where the per-update timing above may miss it."""
    from textual.widgets import DataTable

    app = _plain_app()
    async with app.run_test(size=SIZE) as pilot:
        plain = _PlainTable(app, app.query_one(DataTable), rounds[0])
        await pilot.pause(0.5)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        n = 0
        while time.perf_counter() - wall0 < seconds:
            plain.update(rounds[1 + n % (len(rounds) - 1)], naive)
            n += 1
            await asyncio.sleep(max(0.0, wall0 + n - time.perf_counter()))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return cpu / wall


def ms(xs: list[float]) -> str:
    return f"median {1000 * statistics.median(xs):6.1f} ms  p90 {1000 * sorted(xs)[int(0.9 * (len(xs) - 1))]:6.1f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--no-processes", action="store_true",
                    help="snapshots without GPU processes: the fleet view without its process rows (the rows "
                         "the console showed before it had them)")
    ap.add_argument("--jobs-per-node", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=12, help="full updates timed per measurement")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the CPU-share run")
    ap.add_argument("--unpaced", action="store_true",
                    help="the console before its redraws were paced: a redraw 50 ms after any snapshot")
    ap.add_argument("--charts", action="store_true", help="the charts' cost: coarse series, a chart per range, "
                    "the overview with its chart, and textual-plotext at the same size when it can be imported")
    ap.add_argument("--spread-only", action="store_true",
                    help="only the CPU share of the console, snapshots at once and spread (no per-update "
                         "timings, no DataTable)")
    args = ap.parse_args()

    import textual
    rng = random.Random(7)
    fleet = make_fleet(args.nodes, args.jobs_per_node)
    t0 = time.perf_counter()
    rounds = [make_round(fleet, r, args.gpus, rng, not args.no_processes) for r in range(max(args.rounds + 2, 8))]
    print(f"gpudeck console at scale: {args.nodes} nodes x {args.gpus} GPUs, {len(fleet.jobs)} jobs "
          f"(textual {textual.__version__}, screen {SIZE[0]}x{SIZE[1]}; snapshots built in "
          f"{time.perf_counter() - t0:.1f} s, not measured)")

    if args.spread_only:
        return spread_only(fleet, rounds, args)
    if args.charts:
        return charts(fleet, rounds, args)
    fleet_t, fleet_rows = asyncio.run(console_update_times(fleet, rounds, "fleet"))
    jobs_t, job_rows = asyncio.run(console_update_times(fleet, rounds, "jobs"))
    print(f"full update, console fleet view ({fleet_rows} rows):  {ms(fleet_t)}")
    print(f"full update, console jobs view  ({job_rows} rows):   {ms(jobs_t)}")
    cells_t = asyncio.run(datatable_update_times(rounds[: args.rounds + 1], naive=False))
    print(f"full update, DataTable update_cell on changed cells ({args.nodes * args.gpus} rows): {ms(cells_t)}")
    naive_t = asyncio.run(datatable_update_times(rounds[: args.rounds + 1], naive=True))
    print(f"full update, DataTable naive clear + add_row ({args.nodes * args.gpus} rows):       {ms(naive_t)}")
    share_fleet, _ = asyncio.run(console_cpu_share(fleet, rounds, args.seconds, "fleet", unpaced=args.unpaced))
    print(f"CPU share at 1 full update/s, console fleet view:  {100 * share_fleet:5.1f}% of one core (goal <= 30%)")
    share_jobs, _ = asyncio.run(console_cpu_share(fleet, rounds, args.seconds, "jobs", unpaced=args.unpaced))
    print(f"CPU share at 1 full update/s, console jobs view:   {100 * share_jobs:5.1f}% of one core")
    spread_fleet, per_s = asyncio.run(console_cpu_share(fleet, rounds, args.seconds, "fleet", spread=True,
                                                        unpaced=args.unpaced))
    print(f"CPU share, snapshots spread over the second, fleet view: {100 * spread_fleet:5.1f}% of one core "
          f"({per_s:.1f} redraws/s; goal <= 10%)")
    share_naive = asyncio.run(datatable_cpu_share(rounds, args.seconds, naive=True))
    print(f"CPU share at 1 full update/s, DataTable naive:     {100 * share_naive:5.1f}% of one core")
    worst = max(statistics.median(fleet_t), statistics.median(jobs_t))
    print(f"goal <= 50 ms per full update: console worst view {1000 * worst:.1f} ms "
          f"({'met' if worst <= 0.050 else 'NOT met'}); goal <= 30% CPU: "
          f"{'met' if max(share_fleet, share_jobs) <= 0.30 else 'NOT met'}")
    print(f"ratio, time per full update: DataTable naive / console = {statistics.median(naive_t) / worst:.1f}x, "
          f"DataTable update_cell / console = {statistics.median(cells_t) / worst:.1f}x; "
          f"CPU share: DataTable naive / console = {share_naive / max(share_fleet, share_jobs):.1f}x; "
          f"console fleet view, spread / at once = {spread_fleet / share_fleet:.2f}x")
    return 0


def greeting(fleet: Fleet, node: str, now: float, rng: random.Random):
    """What a node sends a console that connects: 11 hours of minute means, then an hour of
    samples (a sample every 10 s here: the coarse series sees a minute alike)."""
    from gpudeck.agents.contract.wire import History, Sample

    jobs = [j.name for j in fleet.jobs if j.node == node]
    times = [now - 12 * 3600 + 60 * k + 30 for k in range(660)] + [now - 3600 + 10 * k for k in range(360)]
    return History(node, [Sample(t, [70_000.0] * 8, [rng.uniform(60, 100) for _ in range(8)],
                                 {j: rng.uniform(2000, 3000) for j in jobs}, {j: int(t - now + 50_000) for j in jobs})
                          for t in times])


async def overview_update_times(fleet: Fleet, rounds: list[list[Snapshot]], histories: list) -> list[float]:
    from gpudeck.console.app import make_app

    app = make_app(fleet, connect=False, tick_s=0, initial_view="overview", freeze_startup=True)
    times = []
    async with app.run_test(size=SIZE) as pilot:
        for h in histories:
            app.state.apply_history(h)
        await pilot.pause()
        app.screen.chart_range = "24h"
        for snaps in rounds:
            t0 = time.thread_time()
            for s in snaps:
                app.state.apply(s)
            app.refresh_views()
            app.screen._on_timer_update()
            times.append(time.thread_time() - t0)
            await pilot.pause()
        assert app.screen.query_one("#overview-chart").chart.range == "24h"
    return times[2:]


def charts(fleet: Fleet, rounds: list[list[Snapshot]], args) -> int:
    import tracemalloc

    from gpudeck.console import chart
    from gpudeck.console.state import FleetState

    now = rounds[0][0].t
    rng = random.Random(11)
    histories = [greeting(fleet, n.name, now, rng) for n in fleet.nodes]
    state = FleetState(fleet, clock=lambda: rounds[-1][0].t)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for h in histories:
        state.apply_history(h)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    total = sum(st.size_diff for st in after.compare_to(before, "filename"))
    arrays = [a for c in [*state._coarse.values(), *state._node_coarse.values()] for a in (c._slot, *c._means)]
    coarse = sum(sys.getsizeof(a) for a in arrays) + sys.getsizeof(next(iter(state._coarse.values()))) * (
        len(state._coarse) + len(state._node_coarse))
    fine = statistics.mean(_deep_size(s) for s in state._series.values())
    print(f"the greeting's 12 h on every node: {total / 2**20:.1f} MiB allocated in all; the coarse series "
          f"({len(state._coarse)} jobs + {len(state._node_coarse)} nodes, a minute a bucket for 12 h) "
          f"{coarse / 2**20:.2f} MiB; a job's 15 s series (240 buckets, 5 figures) {fine / 2**10:.0f} KiB, so one per "
          f"GPU ({len(fleet.nodes) * args.gpus}) would be {len(fleet.nodes) * args.gpus * fine / 2**20:.0f} MiB")
    applied = []
    for snaps in rounds[1:]:
        t0 = time.thread_time()
        for s in snaps:
            state.apply(s)
        applied.append(time.thread_time() - t0)
    print(f"one round of {len(rounds[0])} snapshots folded into the state (15 s and coarse series): {ms(applied)}")
    width, height = SIZE[0] - 2, 20
    key = f"{fleet.jobs[1].node}/{fleet.jobs[1].name}"
    built: dict[str, list[float]] = {}
    drawn: dict[str, list[float]] = {}
    for r in chart.RANGE_NAMES:
        for _ in range(args.rounds):
            t0 = time.thread_time()
            d = state.job_detail(key, chart_range=r, chart_width=width - chart.GUTTER)
            t1 = time.thread_time()
            chart.draw(d.chart, width, height, chart.picker_text(r))
            t2 = time.thread_time()
            built.setdefault(r, []).append(t1 - t0)
            drawn.setdefault(r, []).append(t2 - t1)
        print(f"chart {r:>3} at {width}x{height}: built (state) {ms(built[r])}; laid out (cells) {ms(drawn[r])}")
    ours = statistics.median(built["24h"]) + statistics.median(drawn["24h"])
    plot = plotext_times(d.chart, width, height, args.rounds)
    if plot is not None:
        print(f"the same 24h chart by textual-plotext's Plot at {width}x{height} (build + Text.from_ansi): {ms(plot)}")
    over = asyncio.run(overview_update_times(fleet, rounds, histories))
    print(f"full update, overview with its chart at 24h ({args.nodes} nodes x {args.gpus} GPUs): {ms(over)}")
    if plot is not None:
        print(f"ratio, one 24h chart: textual-plotext / hand-made = {statistics.median(plot) / ours:.1f}x")
    return 0


def _deep_size(series) -> int:
    """A Series' bytes: its dict, the lists in it and their floats."""
    cells = series._buckets.values()
    return sys.getsizeof(series._buckets) + sum(sys.getsizeof(c) + 24 * len(c) for c in cells)


def plotext_times(c, width: int, height: int, n: int):
    """textual-plotext's Plot (what its PlotextPlot renders) on the chart's first two panels."""
    try:
        from rich.text import Text
        from textual_plotext.plot import Plot
    except ImportError:
        return None
    xs = list(range(len(c.panels[0].values)))
    out = []
    for _ in range(n):
        t0 = time.thread_time()
        p = Plot()
        p.plotsize(width, height)
        p._set_size(width, height)
        p.subplots(2, 1)
        for i, panel in enumerate(c.panels[:2]):
            p.subplot(i + 1, 1)
            pts = [(x, v) for x, v in zip(xs, panel.values) if v is not None]
            p.plot([x for x, _ in pts], [v for _, v in pts], marker="braille")
            if panel.plan:
                plan = [(x, v) for x, v in zip(xs, panel.plan) if v is not None]
                p.plot([x for x, _ in plan], [v for _, v in plan], marker="braille")
            p.title(panel.title)
        Text.from_ansi(p.build())
        out.append(time.thread_time() - t0)
    return out


def spread_only(fleet: Fleet, rounds: list[list[Snapshot]], args) -> int:
    """The console's CPU share with every snapshot at once (the baseline) and spread, per view."""
    ratios = []
    for view in ("fleet", "jobs"):
        once, once_rate = asyncio.run(console_cpu_share(fleet, rounds, args.seconds, view, unpaced=args.unpaced))
        spread, spread_rate = asyncio.run(console_cpu_share(fleet, rounds, args.seconds, view, spread=True,
                                                            unpaced=args.unpaced))
        print(f"CPU share, {view} view: at once {100 * once:5.1f}% of one core ({once_rate:.1f} redraws/s), "
              f"spread {100 * spread:5.1f}% ({spread_rate:.1f} redraws/s; goal <= 10%)")
        ratios.append(f"{view} {spread / once:.2f}x")
    print(f"ratio, CPU share spread / at once{' (unpaced)' if args.unpaced else ''}: {', '.join(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
