"""What the console shows at the sizes terminals come in (80x24 up), on the pinned fleet of
the snapshot tests: nothing connected, the clock and every figure pinned. The newest event
on screen, the header's figures at 80 columns, the sorted column kept and marked, notices
that cover no figures, ctrl+c, a banner that says what the events are, a job's charts on one
time window, the overview's chart on a job with a rate, long log lines scrolled sideways."""

from __future__ import annotations

import dataclasses
import re
import time

import pytest

from gpudeck.agents.contract.wire import LogChunk, Snapshot
from gpudeck.console.app import make_app
from gpudeck.console.chart import GUTTER
from gpudeck.console.cost import dollars
from gpudeck.console.messages import EventsFetched, LogFetched, SnapshotReceived
from gpudeck.console.since import summarize
from support.tui import event_of as event_row
from gpudeck.console.widgets.cells import BLOCKS
from support.tui import PINNED_NOW, describe, feed_pinned, pinned_events, pinned_fleet, screen_text, wait_until

EVENT_SIZES = [(80, 24), (120, 40), (200, 60)]


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def pinned_app(**kw):
    app = make_app(kw.pop("fleet", None) or pinned_fleet(), connect=False, clock=lambda: PINNED_NOW, tick_s=0, **kw)
    app.animation_level = "none"
    return app


async def settle(pilot, cond=lambda app: True, what="the pinned state on screen"):
    await wait_until(pilot, lambda: pilot.app.state.totals().nodes_total == 2 and
                     pilot.app.state.nodes["gpu-b"].error is not None and cond(pilot.app), what=what)
    pilot.app.refresh_views()
    await pilot.pause()


def on_screen(app, widget, text: str) -> bool:
    """``text`` is drawn inside ``widget``'s region, above the footer (the screen's last line)."""
    lines = screen_text(app).splitlines()
    top, bottom = widget.region.y, min(widget.region.bottom, len(lines) - 1)
    return any(text in lines[y] for y in range(top, bottom))


def state_events(n: int, start: float) -> tuple:
    return tuple(event_row("gpu-a", {"t": start + i, "seq": i + 1, "kind": "state", "job": "gen",
                                     "message": f"job gen: state change {i}"}) for i in range(n))


# ---------------------------------------------------------------- item 2: the newest event


@pytest.mark.parametrize("size", EVENT_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_newest_event_is_on_screen_and_end_pagedown_and_g_reach_it(size):
    """The backlog fills the view, its newest row the kill's verdict; the opening summary then
    comes over the table, and a live event after it. The newest row is on screen, above the
    footer, each time; after Home, each of End, PageDown (pressed until the cursor stops) and G
    brings it back."""
    app = pinned_app(initial_view="events")
    async with app.run_test(size=size) as pilot:
        feed_pinned(app)
        await settle(pilot)
        verdict = event_row("gpu-a", {"t": PINNED_NOW - 60, "seq": 151, "kind": "action", "job": "gen",
                                      "message": "kill gen: freed 54.1 GiB in 1.8 s"})
        app.post_message(EventsFetched("gpu-a", state_events(150, PINNED_NOW - 3600) + (verdict,), 151, True))
        table = app.screen.query_one("#events-table")
        await wait_until(pilot, lambda: table.row_count == 151, what="the backlog listed")
        await wait_until(pilot, lambda: on_screen(app, table, "freed 54.1 GiB in 1.8 s"),
                         what="the newest event on screen, followed")
        app.state.timeline.summary = ("since 08:00: gen died twice and was restarted 3 times; GPU 3 on gpu-a throttled "
                                      "for 40 min; GPU 0 on gpu-b hot for 15 min (still); audit finished")
        app.state.version += 1
        app.refresh_views()
        summary = app.screen.query_one("#events-summary")
        await wait_until(pilot, lambda: summary.region.height > 0 and table.region.y > summary.region.y,
                         what="the summary over the table")
        await wait_until(pilot, lambda: on_screen(app, table, "freed 54.1 GiB in 1.8 s"),
                         what="the newest event still on screen under the summary")
        await pilot.press("end")  # already on it: it stays in view
        assert on_screen(app, table, "freed 54.1 GiB in 1.8 s")
        live = event_row("gpu-a", {"t": PINNED_NOW, "seq": 152, "kind": "state", "job": "gen",
                                   "message": "job gen: running -> killed (attempt 2)"})
        app.post_message(EventsFetched("gpu-a", (live,), 152, False))
        await wait_until(pilot, lambda: on_screen(app, table, "running -> killed"), what="a live event, followed")
        for key in ("end", "pagedown", "G"):
            await pilot.press("home")
            await wait_until(pilot, lambda: not on_screen(app, table, "running -> killed"),
                             what="Home: the first rows")
            while table.cursor_key != live.key:
                before = table.cursor_key
                await pilot.press(key)
                await wait_until(pilot, lambda: table.cursor_key != before, what=f"{key} moving the cursor")
            await wait_until(pilot, lambda: on_screen(app, table, "running -> killed"),
                             what=f"{key}: the newest event on screen")


# ---------------------------------------------------------------- item 8: 80x24


def feed_simulated(app) -> None:
    """The pinned fleet as the demo's nodes say it: GPUs simulated (gpu-b stays down)."""
    feed_pinned(app)
    for ev in pinned_events():
        if isinstance(ev, Snapshot) and ev.node == "gpu-a":
            app.post_message(SnapshotReceived(dataclasses.replace(ev, gpus_simulated=True)))


async def test_the_header_keeps_the_alert_count_and_the_dollars_at_80_columns():
    """A priced fleet of simulated GPUs, read-only: the widest header there is. At 80 columns
    the alerts and both dollar figures stay whole; the jobs count and the clock go first."""
    app = pinned_app(fleet=pinned_fleet(price_per_hour=36), read_only=True, initial_view="jobs")
    async with app.run_test(size=(80, 24)) as pilot:
        feed_simulated(app)
        await settle(pilot, lambda app: app.state.totals().gpus_simulated)
        totals = app.state.totals()
        assert totals.priced and totals.alerts == 4 and totals.spent and totals.to_finish
        head = screen_text(app).splitlines()[0]
        assert "RO" in head and "SIM" in head and "tok/s" in head
        assert "▲4" in head and f"{dollars(totals.spent)} +{dollars(totals.to_finish)}" in head, head
        assert "…" not in head and len(head.rstrip()) <= 80
    wide = pinned_app(fleet=pinned_fleet(price_per_hour=36), read_only=True)
    async with wide.run_test(size=(200, 24)) as pilot:  # room for it all: the long form and the clock
        feed_simulated(wide)
        await settle(pilot, lambda app: app.state.totals().gpus_simulated)
        head = screen_text(wide).splitlines()[0]
        assert "READ-ONLY" in head and "to finish" in head and "▲ 4 alerts" in head and "12:00:00" in head
        assert "jobs 2/4" in head and "(simulated)" in head


def table_head(app, table_id: str) -> str:
    """The header line of a table as drawn."""
    table = app.screen.query_one(f"#{table_id}")
    return screen_text(app).splitlines()[table.region.y]


async def test_at_80_columns_the_jobs_view_keeps_node_gpus_and_attempt():
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(80, 24)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        head = table_head(app, "jobs-table")
        assert head.split() == ["JOB▲", "NODE", "STATE", "GPUS", "ATT", "TOK/S", "DONE", "ETA", "FLAGS"], head
        gen = next(ln for ln in screen_text(app).splitlines() if ln.startswith("gen "))
        assert gen.split()[:5] == ["gen", "gpu-a", "running", "-", "2"]


async def test_a_moved_job_says_where_it_moved_from_in_its_row_and_its_details():
    from gpudeck.console.placements import Placement

    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(240, 40)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        app.state.set_moves({"audit": Placement("gpu-b", "gpu-a", "gpu-a", "001764496800000-gpu-b-0a1b2c3d",
                                                PINNED_NOW - 7200)})
        app.refresh_views()
        await pilot.pause()
        # the flags' column is what the others leave: on a wide screen the row says it all
        audit = next(ln for ln in screen_text(app).splitlines() if ln.startswith("audit "))
        assert audit.split()[:2] == ["audit", "gpu-b"] and audit.rstrip().endswith("moved from gpu-a 10:00"), audit
        # on a narrower one, that it moved, first, in whole words; the describe says from where and when
        await pilot.resize_terminal(120, 40)
        await wait_until(pilot, lambda: any(ln.startswith("audit ") and ln.rstrip().endswith("- moved…")
                                            for ln in screen_text(app).splitlines()), what="the row at 120 columns")
        table = app.screen.table("jobs")
        table.move_cursor_to_key(next(r.key for r in table.rows() if r.name == "audit"))
        await describe(pilot)
        await wait_until(pilot, lambda: "moved from gpu-a 10:00" in screen_text(app), what="the move in its describe")
        text = screen_text(app)  # and its placement whole: from where, to where, when, the move's attempt id
        assert "moved from gpu-a to gpu-b at 2025-11-30 10:00:00" in text and "001764496800000-gpu-b-0a1b2c3d" in text


async def test_the_sorted_column_stays_on_a_narrow_screen_and_its_marker_says_up_or_down_as_k9s_does():
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(80, 24)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        table = app.screen.table("jobs")
        seen = {}
        for key, sort in (("O", "node"), ("E", "state"), ("K", "tokens/s"), ("H", "eta"), ("P", "progress")):
            await pilot.press(key)  # k9s: the column's shift+letter
            await wait_until(pilot, lambda: app.screen.sorts["jobs"] == sort and
                             ("▲" in table_head(app, "jobs-table") or "▼" in table_head(app, "jobs-table")),
                             what=f"the sort by {sort} marked")
            seen[sort] = table_head(app, "jobs-table").split()
        assert "NODE▲" in seen["node"]
        assert "STATE▲" in seen["state"]
        assert "TOK/S▼" in seen["tokens/s"]  # the fastest first: descending, as a spreadsheet marks it
        assert "ETA▼" in seen["eta"]  # the longest ETA first
        assert "PROGRES▲" in seen["progress"]  # kept on screen although narrow screens drop it first
        assert "sort progress ▲" in screen_text(app)
        await pilot.press("K")  # tokens/s, the fastest first
        await wait_until(pilot, lambda: "TOK/S▼" in table_head(app, "jobs-table"), what="tokens/s: ▼")
        await pilot.press("K")  # the same letter again: the slowest first now
        await wait_until(pilot, lambda: "TOK/S▲" in table_head(app, "jobs-table"), what="tokens/s reversed: ▲")
        assert "sort tokens/s ▲" in screen_text(app) and "by tokens/s ▲" in screen_text(app)
        names = [r.name for r in table.rows()]
        assert names.index("gen") < names.index("sglang-0")  # 2,390 before 2,412 tok/s: ascending


async def test_notices_cover_no_figures_one_at_a_time_on_the_footer_line():
    """A node going down, a job dying, a kill's verdict and the opening summary, told at once
    over the fleet view at 80x24: everything above the footer line stays as it was, and the
    newest notice is on that line, its title and text on one line."""
    app = pinned_app(initial_view="fleet")
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        feed_pinned(app)
        await settle(pilot)
        before = screen_text(app).splitlines()
        app.notify("node gpu-b: link lost: no word from the agent for 45 s", title="node gpu-b unreachable",
                   severity="error", timeout=10)
        app.notify("job extract died (exit code 137) on attempt 3", title="gpu-a: died (extract)", severity="error",
                   timeout=10, markup=False)
        app.notify("since 04:00: extract died twice, was restarted and gave up", title="since you last looked",
                   timeout=15, markup=False)
        app.notify("freed 54.1 GiB in 1.8 s", title="killed gen [b]", timeout=15)
        await wait_until(pilot, lambda: "killed gen [b]: freed 54.1 GiB in 1.8 s" in screen_text(app).splitlines()[-1],
                         what="the newest notice on the footer's line")
        after = screen_text(app).splitlines()
        assert after[:-1] == before[:-1]  # the memory and HELD BY columns, every figure, uncovered
        assert "extract died" not in screen_text(app)  # one at a time: the newest replaced the others


@pytest.mark.parametrize("where", ["jobs view", "filter bar", "help"])
async def test_ctrl_c_quits_as_in_k9s_and_nvitop(where):
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(80, 24)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        if where == "filter bar":
            await pilot.press("slash", "g")
            await wait_until(pilot, lambda: app.screen.filters["jobs"] == "g", what="typing a filter")
        elif where == "help":
            await pilot.press("question_mark")
            await wait_until(pilot, lambda: "gpudeck help" in screen_text(app), what="the help")
        await pilot.press("ctrl+c")
        await wait_until(pilot, lambda: not app.is_running, what="ctrl+c quitting")


async def test_the_events_banner_says_what_the_rows_under_it_show():
    """Launches and kills since the last look, and no deaths: the line over the events says
    them, counted, and what the table lists, never "nothing happened"."""
    app = pinned_app(initial_view="events")
    async with app.run_test(size=(120, 40)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        since = PINNED_NOW - 4 * 3600
        said = [("launch", "launch gen: attempt 1, pid 4200"), ("kill", "kill gen: freed 54.1 GiB in 1.8 s"),
                ("launch", "launch gen: attempt 2, pid 4321"), ("kill", "kill extract: stopped in 0.4 s")]
        rows = tuple(event_row("gpu-a", {"t": since + 600 * (i + 1), "seq": i + 1, "kind": "action", "job": "gen",
                                         "message": message, "details": {"action": action}})
                     for i, (action, message) in enumerate(said))
        rows += (event_row("gpu-a", {"t": since + 3000, "seq": 5, "kind": "state", "job": "gen",
                                     "message": "job gen: running -> killed (attempt 2)"}),)
        app.post_message(EventsFetched("gpu-a", rows, 5, True))
        await wait_until(pilot, lambda: len(app.state.timeline) == 5, what="the events read")
        app.state.timeline.summary = summarize(app.state.timeline.rows(), since, PINNED_NOW)  # as the app says it
        app.refresh_views()
        banner = await wait_until(pilot, lambda: (t := str(app.screen.query_one("#events-summary").content)) and t,
                                  what="the banner")
        assert "nothing happened" not in banner
        assert banner.startswith("since 08:00: 4 operator actions and 1 state change"), banner
        assert "listed: 5 events, 08:10 to 08:50: 4 operator actions and 1 state change" in banner
        await wait_until(pilot, lambda: "listed: 5 events" in screen_text(app), what="the banner on screen")
        await pilot.press("slash", *"extract", "enter")  # a filter: the banner counts what is left
        await wait_until(pilot, lambda: "listed: 1 event, 08:40: 1 operator action" in screen_text(app),
                         what="the banner counting the filtered rows")


def chart_columns(app, chart) -> dict[str, set[int]]:
    """Per chart of a JobChart (by the start of its title), the columns its bars are drawn in,
    right of the value axis and over the time axis."""
    area = chart.content_region  # inside its padding and its bottom border
    lines = screen_text(app).splitlines()[area.y:area.bottom]
    out: dict[str, set[int]] = {}
    title = None
    for line in lines:
        text = line[area.x:area.right]
        if text[GUTTER - 1:GUTTER] == "└":
            break  # the time axis
        if text[GUTTER - 1:GUTTER] not in ("┤", "│"):
            title = "tokens/s" if text.startswith("gen ") else text.split()[0]
            out[title] = set()
        elif title is not None:
            out[title] |= {x for x, ch in enumerate(text[GUTTER:]) if ch in BLOCKS[1:]}
    return out


async def open_details(pilot, job: str, done: bool = True) -> str:
    app = pilot.app
    app.screen.table("jobs").move_cursor_to_key(f"gpu-a/{job}")
    await describe(pilot, tab="log")
    want = "done  123.5k / 914.0k" if done else "gen  tokens/s"
    return await wait_until(pilot, lambda: want in (t := screen_text(app)) and t, what="the chart")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_charts_of_a_job_share_one_time_window(size):
    """gen's tokens/s and done were read at the same moments (the pinned history): their bars
    stand in the same columns, over one time axis. At 80x24 the details leave the chart 4
    rows: tokens/s and the time axis fit, done does not (the axis is kept over a panel)."""
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=size) as pilot:
        feed_pinned(app)
        await settle(pilot)
        await open_details(pilot, "gen", done=size == (120, 40))
        charts = chart_columns(app, app.screen.query_one("#job-chart"))
        assert "└┬" in screen_text(app)  # the time axis
        if size == (80, 24):
            assert set(charts) == {"tokens/s"} and charts["tokens/s"], charts
            return
        assert set(charts) == {"tokens/s", "done"} and charts["tokens/s"], charts
        assert charts["done"] == charts["tokens/s"]


async def test_the_details_say_the_finish_in_words_with_no_literal_dim():
    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(120, 40)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        text = await open_details(pilot, "gen")
        assert "(dim)" not in text
        done = next(line for line in text.splitlines() if "done  123.5k / 914.0k" in line)
        assert "plan ─ 3h 20m, now 12h 16m  finish in 10h 16m at the current rate" in done


async def test_the_overview_chart_opens_on_a_job_with_a_tokens_per_second_series():
    """Sorted by name, the first jobs (audit, extract) never had a rate: the chart opens on gen,
    the first that has; once the operator moves the cursor, the chart follows it (to audit,
    which exited: its title says so, with no rate now)."""
    app = pinned_app()
    async with app.run_test(size=(120, 40)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        await wait_until(pilot, lambda: "gen  tokens/s  now 2,390" in screen_text(app), what="gen's chart")
        jobs = app.screen.table("overview")
        assert jobs.cursor_key == "gpu-a/gen" and [r.name for r in jobs.rows()][0] == "audit"
        await pilot.press("home")
        await wait_until(pilot, lambda: "audit  tokens/s  exited at" in screen_text(app), what="the chart following")
        app.refresh_views()
        await pilot.pause()
        assert jobs.cursor_key == "gpu-b/audit"  # the operator's choice stays


async def test_long_log_lines_scroll_sideways_with_the_arrow_keys_as_the_help_says():
    app = pinned_app(initial_view="logs")
    async with app.run_test(size=(80, 24)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        panel = app.screen.query_one("#log-panel")
        await wait_until(pilot, lambda: panel.job is not None, what="the logs view on a job")
        long = "step 1200 loss 1.234 " + "x" * 60 + " THE-END-OF-THE-LINE"
        chunk = LogChunk(panel.job, long + "\n", len(long) + 1, "/logs/gen.log")
        app.post_message(LogFetched(panel.job, chunk, reset=True))
        await wait_until(pilot, lambda: "step 1200 loss" in screen_text(app), what="the long line")
        assert "THE-END-OF-THE-LINE" not in screen_text(app)  # not wrapped: cut at the right edge
        log = panel.log_widget
        for _ in range(300):  # one column a press: to the end of the line, and no further
            if log.max_scroll_x and log.scroll_x >= log.max_scroll_x:
                break
            await pilot.press("right")
        await pilot.pause()
        assert "THE-END-OF-THE-LINE" in screen_text(app) and panel.log_widget.scroll_x > 0
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: "gpudeck help" in screen_text(app), what="the help")
        from gpudeck.console.screens.help import key_rows
        assert any(keys == "← →" and what == "scroll a log sideways: long lines are not wrapped"
                   for _, keys, what in key_rows(False, {}))


async def test_the_details_list_each_server_and_the_uploads_the_job_reports():
    """A generate job's details: what waits to go to S3 and since when, and one line a server,
    the ones down first, each with its counts and, when down, since when and why."""
    from gpudeck.agents.contract.wire import ServerHealth, Uploads

    app = pinned_app(initial_view="jobs")
    async with app.run_test(size=(160, 50)) as pilot:
        feed_pinned(app)
        await settle(pilot)
        snap = next(e for e in pinned_events() if isinstance(e, Snapshot) and e.node == "gpu-a")
        servers = [ServerHealth("http://10.0.0.1:30000", "ok", 4, 1200, 0),
                   ServerHealth("http://10.0.0.2:30000", "resting", 0, 800, 9, "ConnectError: refused",
                                PINNED_NOW - 420)]
        uploads = Uploads(pending=3, uploaded=41, failures=2, last_error="S3 PutObject: SlowDown",
                          pending_bytes=3 * 2**20, oldest_pending_at=PINNED_NOW - 600,
                          last_upload_at=PINNED_NOW - 90)
        jobs = [dataclasses.replace(j, progress=dataclasses.replace(j.progress, servers=servers, uploads=uploads))
                if j.name == "gen" else j for j in snap.jobs]
        app.post_message(SnapshotReceived(dataclasses.replace(snap, seq=snap.seq + 1, jobs=jobs)))
        await wait_until(pilot, lambda: app.state.job_rows() and any(r.name == "gen" and r.servers_down == 1
                                                                     for r in app.state.job_rows()),
                         what="the job's servers in the state")
        text = await open_details(pilot, "gen")
        lines = [" ".join(ln.split()) for ln in text.splitlines()]
        up = next(ln for ln in lines if ln.startswith("uploads "))
        assert "3 waiting (3.1 MB), the oldest for 10m 00s" in up, up
        assert "41 uploaded" in up and "last 1m 30s ago" in up, up
        assert "2 failed attempts" in up and "SlowDown" in up, up
        at = next(i for i, ln in enumerate(lines) if ln.startswith("servers "))
        assert lines[at] == "servers 1 of 2 resting or failing", lines[at:at + 3]
        assert lines[at + 1].startswith("http://10.0.0.2:30000 resting 800 ok 9 failed 0 in flight down for 7m"), \
            lines[at + 1]
        assert lines[at + 1].endswith("ConnectError: refused"), lines[at + 1]
        assert lines[at + 2] == "http://10.0.0.1:30000 ok 1,200 ok 0 failed 4 in flight", lines[at + 2]


# ---------------------------------------------------------------- columns shrink by rules, not by cutting words


LONG_NAME = "generate-the-whole-corpus"  # 25 characters: wider than the JOB column's 14
LONG_WAIT = "waiting for extract-the-big-one to finish"


def feed_long(app) -> None:
    """The pinned fleet with what a table cannot hold at its width: simulated GPUs of long names
    (a B200 and an RTX PRO 6000 Blackwell Server Edition), a job with a long name on eight GPUs,
    a job waiting for another, a moved job, and dollars too small for their columns."""
    from gpudeck.console.placements import Placement

    feed_pinned(app)
    snap = next(e for e in pinned_events() if isinstance(e, Snapshot) and e.node == "gpu-a")
    names = ["B200 (simulated)", "B200 (simulated)", "NVIDIA RTX PRO 6000 Blackwell Server Edition (simulated)",
             "NVIDIA RTX PRO 6000 Blackwell Server Edition"]
    gpus = [dataclasses.replace(g, name=n) for g, n in zip(snap.gpus, names)]
    jobs = []
    for j in snap.jobs:
        if j.name == "gen":
            j = dataclasses.replace(j, name=LONG_NAME, gpus=list(range(8)),
                                    progress=dataclasses.replace(j.progress, useful=900, useful_of=1000))
        elif j.name == "extract":
            j = dataclasses.replace(j, waiting=LONG_WAIT)
        jobs.append(j)
    app.post_message(SnapshotReceived(dataclasses.replace(snap, seq=snap.seq + 1, gpus=gpus, jobs=jobs,
                                                          gpus_simulated=True)))
    app.state.set_moves({"audit": Placement("gpu-b", "gpu-a", "gpu-a", "001764496800000-gpu-b-0a1b2c3d",
                                            PINNED_NOW - 7200)})


def cells_of(app, table_id: str) -> list[tuple[object, dict[str, str]]]:
    """Each row of a table as drawn, cut at its columns: (row, {column label: cell text})."""
    table = app.screen.query_one(f"#{table_id}")
    lines = screen_text(app).splitlines()
    widths = table.column_widths(table.size.width)
    out = []
    for i, row in enumerate(table.rows()):
        y = table.region.y + 1 + i - int(table.scroll_y)
        if not table.region.y < y < table.region.bottom:
            continue
        line, x, cut = lines[y], table.region.x, {}
        for col, w in zip(table.columns, widths):
            if w:
                cut[col.label] = line[x:x + w].strip()
                x += w + table.GAP
        out.append((row, cut))
    return out


def whole_words(shown: str, full: str) -> bool:
    """``shown`` holds only whole words of ``full``: each word of it is one of ``full``'s, or ends
    in an ellipsis after a whole word, or counts what was left out (``+2``)."""
    words = set(full.split())
    return all(w in words or (w.endswith("…") and w[:-1] in words) or (w.startswith("+") and w[1:].isdigit())
               for w in shown.split())


async def test_at_80x24_the_header_name_state_gpus_tokens_and_done_are_never_cut():
    app = pinned_app(fleet=pinned_fleet(price_per_hour=0.05), initial_view="jobs")
    async with app.run_test(size=(80, 24)) as pilot:
        feed_long(app)
        await settle(pilot, lambda app: any(r.name == LONG_NAME for r in app.state.job_rows()))
        head = screen_text(app).splitlines()[0]
        assert "…" not in head and len(head.rstrip()) <= 80 and "tok/s" in head and "▲4" in head, head
        rows = cells_of(app, "jobs-table")
        assert {"audit", "extract", LONG_NAME, "sglang-0"} <= {r.name for r, _ in rows}
        for row, cut in rows:
            assert cut["JOB"] == row.name, cut  # the column widened to the longest name
            assert cut["STATE"].startswith(row.state.value) and "…" not in cut["STATE"], cut
            assert "…" not in cut["GPUS"] and "…" not in cut["TOK/S"] and "…" not in cut["DONE"], cut
        gen = next(cut for row, cut in rows if row.name == LONG_NAME)
        assert gen["GPUS"] == "0-7" and gen["TOK/S"] == "2,390" and gen["DONE"] == "123.5k/914.0k", gen
        await pilot.press("1")
        await wait_until(pilot, lambda: "MEMORY" in screen_text(app), what="the fleet view")
        for row, cut in cells_of(app, "fleet-table"):
            if hasattr(row, "index") and "MEMORY" in cut:  # a GPU
                assert cut["MEMORY"].endswith(f"{row.mem_used_gib:.1f}/{row.mem_total_gib:.1f}G"), cut


@pytest.mark.parametrize("size", [(120, 40), (200, 60)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_flags_gpu_names_and_dollars_are_never_cut_in_a_word(size):
    from gpudeck.console.widgets.cells import short_gpu_name

    app = pinned_app(fleet=pinned_fleet(price_per_hour=0.05), initial_view="jobs")
    async with app.run_test(size=size) as pilot:
        feed_long(app)
        await settle(pilot, lambda app: any(r.name == LONG_NAME and r.cost_per_useful for r in app.state.job_rows()))
        rows = cells_of(app, "jobs-table")
        money = re.compile(r"^(\$[\d,]+(\.\d+)?(/[kM]|[kM])?|—|-)$")
        for row, cut in rows:
            full = " ".join([*(row.flags), *([row.moved] if row.moved else [])])
            assert "FLAGS" in cut and whole_words(cut["FLAGS"], full or "-"), (cut["FLAGS"], full)
            for label in ("$/MTOK", "$/USEFUL"):
                if label in cut:
                    assert money.match(cut[label]), cut
        if size == (200, 60):  # the dollar columns are shown: the meaningful digits kept
            gen = next(cut for row, cut in rows if row.name == LONG_NAME)
            assert gen["$/MTOK"] == "$5.8/k" and gen["$/USEFUL"] == "$0.72/M", gen
        flags = {row.name: cut["FLAGS"] for row, cut in rows}
        assert flags["extract"].startswith("waiting"), flags  # a flag too long: whole words, then …
        assert flags["audit"].startswith("moved"), flags
        await pilot.press("1")
        await wait_until(pilot, lambda: "B200·sim" in screen_text(app), what="the fleet view")
        gpu_rows = [(row, cut) for row, cut in cells_of(app, "fleet-table") if hasattr(row, "index")]
        assert len(gpu_rows) >= 4
        for row, cut in gpu_rows:
            shown = cut["NODE / GPU"].split(" ", 1)[1]  # after "GPU0"
            short = short_gpu_name(row.name)
            apart = (shown.replace("·sim", " ·sim"), short.replace("·sim", " ·sim"))  # the mark as a word
            assert "…" not in shown and whole_words(*apart), (shown, short)
            assert shown.endswith("·sim") == row.name.endswith("(simulated)"), shown
        assert any(cut["NODE / GPU"].endswith("GPU0 B200·sim") for _, cut in gpu_rows)
        assert any(cut["NODE / GPU"].endswith("RTX PRO 6000·sim") for _, cut in gpu_rows)

