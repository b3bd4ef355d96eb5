"""The console driven with Pilot against a real local agent and real command jobs.

Each test writes a fleet file of shell jobs with its own agent home, opens the console on
it and waits for what the operator would see. No mocks: the agent is `python -m gpudeck.agents`
over pipes, the jobs are processes, kill really kills.
"""

from __future__ import annotations

import pytest

from gpudeck.agents.contract import ops
from gpudeck.console.actions import JobOp
from gpudeck.console.app import make_app
from gpudeck.console.screens.confirm import ConfirmScreen
from gpudeck.console.screens.help import HelpScreen
from gpudeck.console.screens.describe import DescribeScreen
from support.tui import (answer, closed_port, confirm_dialog, describe, job_row, notifications_text, progress_script,
                         screen_text, shell_job, wait_for_text, wait_until, write_fleet)
from support import pid_alive

pytestmark = pytest.mark.system  # the console over real agents and their jobs

SIZE = (120, 40)


def app_on(tmp_path, home, jobs, extra: str = "", **options):
    fleet = write_fleet(tmp_path, home, jobs, extra)
    app = make_app(fleet, grace_s=2.0, log_poll_s=0.2, **options)
    app.animation_level = "none"
    return app


async def launched(pilot, *names: str) -> None:
    """Launch jobs through the console itself (the `l` key's path) and wait until they run."""
    app = pilot.app
    await wait_until(pilot, lambda: all(job_row(app, n) and job_row(app, n).state != "unknown" for n in names),
                     what="the agent's first snapshot")
    for n in names:
        app.run_job_action(JobOp.LAUNCH, n, quiet=True)
    await wait_until(pilot, lambda: all(job_row(app, n).state == "running" for n in names), what=f"{names} running")


async def test_jobs_view_shows_tokens_done_and_eta(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("gen", progress_script())])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await launched(pilot, "gen")
        row = await wait_until(pilot, lambda: (r := job_row(app, "gen")) and r.eta_s is not None and
                               r.tokens_per_s and r.done and r, what="tokens/s, done and an ETA")
        first_done = row.done
        await wait_until(pilot, lambda: job_row(app, "gen").done > first_done, what="done climbing")
        # the screen is redrawn at its own pace (console/pacing.py): wait for it to show the state
        text = await wait_until(pilot, lambda: (t := screen_text(app)) and "ETA" in t.splitlines()[0] and any(
            ln.startswith("gen ") and "/100.0k" in ln for ln in t.splitlines()) and t, what="the figures drawn")
        line = next(ln for ln in text.splitlines() if ln.startswith("gen "))
        assert "running" in line and "/100.0k" in line and "cut 2" in line
        assert "tok/s" in text.splitlines()[0] and "ETA" in text.splitlines()[0]


async def test_fleet_view_shows_the_node_and_why_no_gpus(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("idle", "sleep 600")])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("1")
        text = await wait_for_text(pilot, "● local")
        assert "NODE / GPU" in text
        assert "no GPUs: NVML polling is switched off for this node" in text


async def test_unreachable_node_is_greyed_with_reason_and_since(tmp_path, fleet_home):
    port = closed_port()
    extra = f'[[nodes]]\nname = "far"\nhost = "127.0.0.1"\nport = {port}\nconnect_timeout = 3\n'
    app = app_on(tmp_path, fleet_home, [shell_job("idle", "sleep 600"),
                                        shell_job("remote-job", "sleep 600", node="far")], extra,
                 initial_view="fleet")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        text = await wait_for_text(pilot, "✗ far  unreachable since")
        line = next(ln for ln in text.splitlines() if "✗ far" in ln)
        assert "retry in" in line and "refused" in line
        await wait_for_text(pilot, "nodes 1/2")
        await pilot.press("4")
        text = await wait_for_text(pilot, "node far unreachable")
        # its job is listed with the state the console cannot know
        await pilot.press("2")
        text = await wait_for_text(pilot, "remote-job")
        assert job_row(app, "remote-job").stale


async def test_logs_view_tails_then_follows(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("gen", progress_script(step_s=0.05))])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await launched(pilot, "gen")
        await pilot.press("3")
        panel = app.screen.query_one("#log-panel")
        await wait_until(pilot, lambda: "item 1" in panel.text, what="the log's tail")
        seen = len(panel.log_widget.lines)
        await wait_until(pilot, lambda: len(panel.log_widget.lines) > seen + 5, what="the log growing (follow)")
        assert "log of gen" in screen_text(app) and "following" in screen_text(app)


async def test_alerts_view_shows_a_job_that_died(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("crash", "echo boom; exit 3")])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_until(pilot, lambda: job_row(app, "crash") and job_row(app, "crash").state == "not_started",
                         what="the job declared")
        app.run_job_action(JobOp.LAUNCH, "crash", quiet=True)
        await wait_until(pilot, lambda: job_row(app, "crash").state == "failed", what="the job failing")
        await pilot.press("4")
        text = await wait_for_text(pilot, "job crash died (exit code 3)")
        assert "Alerts (1)" in text


async def test_kill_asks_first_then_shows_the_verdict(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("gen", progress_script())])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await launched(pilot, "gen")
        pid = job_row(app, "gen").pid
        await pilot.press("ctrl+k")  # k9s's kill
        await confirm_dialog(pilot, "the confirm dialog")
        assert "Kill job gen on local?" in screen_text(app)
        await answer(pilot, "n")  # no: nothing happens
        assert job_row(app, "gen").state == "running" and pid_alive(pid)
        await pilot.press("f9")  # htop's
        await confirm_dialog(pilot, "the confirm dialog")
        await answer(pilot, "y")
        verdict = await wait_until(pilot, lambda: next((v for j, op, v in app.verdicts if op == "kill"), None),
                                   what="the agent's verdict")
        assert verdict.startswith("stopped in") and "held no GPU memory" in verdict
        await wait_until(pilot, lambda: verdict in notifications_text(app), what="the verdict shown")
        await wait_until(pilot, lambda: job_row(app, "gen").state == "killed", what="the job shown killed")
        assert not pid_alive(pid)


async def test_relaunch_resumes_where_the_job_stopped(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("gen", progress_script())])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await launched(pilot, "gen")
        await wait_until(pilot, lambda: (job_row(app, "gen").done or 0) >= 5, what="some progress")
        await pilot.press("ctrl+k")
        await confirm_dialog(pilot, "the confirm dialog")
        await answer(pilot, "y")
        await wait_until(pilot, lambda: job_row(app, "gen").state == "killed", what="the job killed")
        stopped_at = job_row(app, "gen").done
        await pilot.press("r")  # not running: no question asked
        await wait_until(pilot, lambda: any(op == "relaunch" for _, op, _ in app.verdicts), what="the relaunch")
        await wait_until(pilot, lambda: "relaunched gen" in notifications_text(app), what="the relaunch told")
        await wait_until(pilot, lambda: job_row(app, "gen").attempt == 2 and job_row(app, "gen").state == "running",
                         what="attempt 2 running")
        await wait_until(pilot, lambda: job_row(app, "gen").done > stopped_at, what="progress after the relaunch")
        # a running job is killed first: that asks
        await pilot.press("r")
        await confirm_dialog(pilot, "the relaunch question")
        text = screen_text(app)
        assert "Relaunch job gen on local?" in text and "It is running:" in text
        await pilot.press("escape")


async def test_launch_key_asks_first_then_starts_the_job_and_errors_are_shown(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("idle", "sleep 600")])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_until(pilot, lambda: job_row(app, "idle") and job_row(app, "idle").state == "not_started",
                         what="the job declared")
        await pilot.press("L")  # shift-l: a launch takes GPUs and starts spending, so it asks, as kill does
        await confirm_dialog(pilot, "the launch question")
        assert "Launch job idle on local?" in screen_text(app) and "attempt 1" in screen_text(app)
        await answer(pilot, "n")
        await wait_until(pilot, lambda: "launch of idle cancelled" in notifications_text(app), what="cancelled")
        assert job_row(app, "idle").state == "not_started"
        await pilot.press("L")
        await confirm_dialog(pilot, "the launch question")
        await answer(pilot, "y")
        await wait_until(pilot, lambda: job_row(app, "idle").state == "running", what="the job launched")
        await pilot.press("L")  # already running: the agent refuses, and the operator reads why
        await confirm_dialog(pilot, "the launch question")
        await answer(pilot, "y")
        await wait_until(pilot, lambda: "launch idle failed" in notifications_text(app), what="the error shown")
        assert "already running" in notifications_text(app)


async def test_l_opens_the_selected_jobs_log_as_in_k9s(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("alpha", "echo alpha says hello; sleep 600"),
                                        shell_job("beta", "echo beta says hello; sleep 600")], initial_view="jobs")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await launched(pilot, "alpha", "beta")
        table = app.screen.table("jobs")
        await pilot.press("down")  # beta
        await wait_until(pilot, lambda: getattr(table.cursor_row, "name", None) == "beta", what="the cursor on beta")
        await pilot.press("l")  # the log, not a launch
        await wait_until(pilot, lambda: app.screen.active == "logs", what="the logs view")
        panel = app.screen.query_one("#log-panel")
        await wait_until(pilot, lambda: "beta says hello" in panel.text, what="beta's log")
        assert panel.job == "beta" and not isinstance(app.screen, ConfirmScreen)


async def test_enter_describes_the_job_and_l_shows_its_chart_and_log(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("gen", progress_script())])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await launched(pilot, "gen")
        await describe(pilot)
        text = await wait_for_text(pilot, "job gen on local")
        said = {ln.split()[0] + " " + ln.split()[1]: ln for ln in text.splitlines() if len(ln.split()) > 2}
        assert "sh -c" in said["command line"] and "on local" in said["fleet file"], text
        await pilot.press("l")  # its chart and log
        text = await wait_for_text(pilot, "item 1")
        assert "running  command on local  ·  attempt 1" in text
        assert "log of gen" in text
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, DescribeScreen), what="back to the views")


async def test_filter_and_sort(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("alpha", "sleep 600"), shell_job("beta", "sleep 600"),
                                        shell_job("gamma", "exit 1")], initial_view="jobs")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        table = app.screen.table("jobs")
        await wait_until(pilot, lambda: table.row_count == 3, what="three jobs")
        await pilot.press("slash")
        await pilot.press("b", "e")
        await wait_until(pilot, lambda: [r.name for r in table.rows()] == ["beta"], what="the filter applied")
        await pilot.press("enter")  # keep the filter, back to the table
        assert "Jobs [/be]" in screen_text(app) and "filter 'be' (esc clears)" in screen_text(app)
        await pilot.press("escape")  # escape in the table clears it too
        await wait_until(pilot, lambda: table.row_count == 3, what="the filter cleared")
        await pilot.press("slash", "b", "escape")  # and escape in the filter bar
        await wait_until(pilot, lambda: table.row_count == 3 and not app.screen.filters["jobs"],
                         what="the filter cleared again")
        app.run_job_action(JobOp.LAUNCH, "gamma", quiet=True)
        await wait_until(pilot, lambda: job_row(app, "gamma").state == "failed", what="gamma failed")
        await pilot.press("E")  # shift-e: STATE, failed jobs first
        await wait_until(pilot, lambda: table.rows()[0].name == "gamma", what="sorted by state")
        assert "by state" in screen_text(app) and "STATE▲" in screen_text(app)
        await pilot.press("E")  # again: reversed, failed jobs last
        await wait_until(pilot, lambda: table.rows()[-1].name == "gamma", what="the sort reversed")
        assert "STATE▼" in screen_text(app)


async def test_help_and_quit(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("idle", "sleep 600")])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        assert "kill the selected job" in screen_text(app) and "ctrl+k F9" in screen_text(app)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), what="the help closed")
        await wait_until(pilot, lambda: "local" in app.client.links, what="the agent connected")
        agent = app.client.links["local"].process
        await pilot.press("q")
    assert agent.returncode is not None  # quitting closed the agent; jobs keep running


async def test_read_only_turns_off_the_destructive_keys(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("gen", progress_script())], read_only=True)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        # jobs launched by someone else (a console that is not read-only)
        await wait_until(pilot, lambda: job_row(app, "gen") and job_row(app, "gen").state == "not_started",
                         what="the job declared")
        await app.client.request(ops.Launch(job="gen"))
        await wait_until(pilot, lambda: job_row(app, "gen").state == "running", what="the job running")
        pid = job_row(app, "gen").pid
        for key in ("ctrl+k", "f9", "r", "L", "A"):
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmScreen)
        assert app.verdicts == []
        assert "READ-ONLY" in screen_text(app).splitlines()[0]
        assert job_row(app, "gen").state == "running" and pid_alive(pid)
        # keys that do nothing are not offered: not in the footer, not in the help
        app.clear_notifications()  # the notice line covers the footer meanwhile
        footer = await wait_until(pilot, lambda: "Filter" in (ln := screen_text(app).splitlines()[-1]) and ln,
                                  what="the footer")
        assert "Filter" in footer and not any(word in footer for word in ("Kill", "Relaunch", "Launch"))
        assert not {"ctrl+k", "f9", "r", "L", "A", "m", "a"} & set(app.screen.active_bindings)
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        text = screen_text(app)
        assert "read-only" in text and "kill the selected job" not in text and "relaunch:" not in text
        assert "launch a job" not in text


async def test_sparkline_is_backfilled_from_the_agents_history_after_a_reconnect(tmp_path, fleet_home):
    import time

    jobs = [shell_job("gen", progress_script())]
    first = app_on(tmp_path, fleet_home, jobs, spark_bucket_s=0.5)
    async with first.run_test(size=SIZE, notifications=True) as pilot:
        await launched(pilot, "gen")
        await wait_until(pilot, lambda: sum(v is not None for v in job_row(first, "gen").spark) >= 8,
                         what="a few seconds of tokens/s")
    # the console went away (a laptop asleep); the job and the agent's history did not
    assert job_row(first, "gen").state == "running"
    gone = time.time()
    second = app_on(tmp_path, fleet_home, jobs, spark_bucket_s=0.5)
    async with second.run_test(size=SIZE, notifications=True) as pilot:
        def from_before() -> int:
            d = second.state.job_detail("local/gen", spark_width=60)
            if d is None:
                return 0
            end = int(second.state.clock() // 0.5)
            return sum(1 for i, v in enumerate(d.spark) if v is not None and (end - 59 + i + 1) * 0.5 < gone - 0.5)

        await wait_until(pilot, lambda: from_before() >= 3, what="sparkline points from before the reconnect")
        row = await wait_until(pilot, lambda: (r := job_row(second, "gen")) and r.state == "running" and r,
                               what="the job adopted")
        assert row.attempt == 1  # the same run, seen again


async def test_slash_in_the_logs_view_searches_and_n_jumps(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("gen", progress_script(step_s=0.05))])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await launched(pilot, "gen")
        await pilot.press("3")
        panel = app.screen.query_one("#log-panel")
        await wait_until(pilot, lambda: "item 12" in panel.text, what="a dozen items in the log")
        await pilot.press("slash")
        await pilot.press(*"item 1")
        await pilot.press("enter")
        await wait_until(pilot, lambda: panel.term == "item 1" and len(panel.matches()) >= 4,
                         what="the lines holding 'item 1' found")
        first = panel.match
        assert first is not None and "item 1" in panel.log_widget.lines[first]
        await pilot.press("n")
        await wait_until(pilot, lambda: panel.match is not None and panel.match != first, what="n to the next match")
        assert "item 1" in panel.log_widget.lines[panel.match]
        text = await wait_for_text(pilot, "search 'item 1'")
        assert "n/N" in text
        await pilot.press("escape")
        await wait_until(pilot, lambda: panel.term == "", what="escape to clear the search")


async def test_the_command_palette_jumps_to_a_job_and_runs_its_keys(tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("idle", "sleep 600"), shell_job("other", "sleep 600")])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_for_text(pilot, "other")
        await pilot.press("ctrl+p")
        await pilot.press(*"job other")
        await wait_for_text(pilot, "jump to it in the jobs view")
        await pilot.press("enter")
        await wait_until(pilot, lambda: getattr(app.screen.query_one("#jobs-table").cursor_row, "name", None)
                         == "other", what="the cursor on job other in the jobs view")
        await pilot.press("ctrl+p")
        await pilot.press(*"launch other")
        await wait_for_text(pilot, "launch other")
        await pilot.press("enter")
        await confirm_dialog(pilot, "the launch question")
        await answer(pilot, "y")
        await wait_until(pilot, lambda: job_row(app, "other") is not None and job_row(app, "other").alive,
                         timeout=60, what="other launched through the palette")


async def test_relaunch_after_an_edit_of_the_fleet_file_shows_the_change_and_runs_the_new_version(
        tmp_path, fleet_home):
    app = app_on(tmp_path, fleet_home, [shell_job("gen", "echo first; exit 3")])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_until(pilot, lambda: job_row(app, "gen") and job_row(app, "gen").state != "unknown",
                         what="the agent's first snapshot")
        app.run_job_action(JobOp.LAUNCH, "gen", quiet=True)
        await wait_until(pilot, lambda: job_row(app, "gen").state == "failed", what="the job failed")
        write_fleet(tmp_path, fleet_home, [shell_job("gen", "echo fixed; exec sleep 60")])  # the fix, in the file
        await pilot.press("2")
        await pilot.press("r")
        await confirm_dialog(pilot, "the relaunch question")
        text = screen_text(app)
        assert "The fleet file changed since gen on local last launched" in text, text
        assert "command: sh -c 'echo first; exit 3' -> sh -c 'echo fixed; exec" in text, text
        await pilot.press("y")
        await wait_until(pilot, lambda: job_row(app, "gen").attempt == 2 and job_row(app, "gen").state == "running",
                         what="attempt 2 running")
        log = fleet_home / "jobs" / "gen" / "job.log"
        await wait_until(pilot, lambda: "fixed" in log.read_text(), what="the file's version ran")


async def test_a_kill_verdict_stays_on_screen_over_news_of_the_fleet(tmp_path, fleet_home):
    """The answer to the operator's own key is not replaced by an event's notice while it is
    shown (the demo's plan-drift news used to push a kill's verdict off the footer line)."""
    app = app_on(tmp_path, fleet_home, [shell_job("gen", progress_script())])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await launched(pilot, "gen")
        app.run_job_action(JobOp.KILL, "gen", quiet=True)
        verdict = await wait_until(pilot, lambda: next((v for j, op, v in app.verdicts if op == "kill"), None),
                                   what="the agent's verdict")
        await wait_until(pilot, lambda: verdict in notifications_text(app), what="the verdict shown")
        app.notify("job generate: planned 3h, now 10d", title="plan drift")  # news of the fleet
        await pilot.pause()
        assert verdict in notifications_text(app) and "planned 3h" not in notifications_text(app)
        app.notify("node gpu-b unreachable", severity="error")  # an error still gets through
        await wait_until(pilot, lambda: "gpu-b unreachable" in notifications_text(app), what="the error shown")


async def test_a_adopts_the_selected_gpu_process_of_no_job_after_asking(tmp_path, fleet_home):
    """The `a` key on a process gpudeck did not start, on the stand-in GPUs (agents/simgpu.py):
    the question names it, yes adopts it, and it is a job from then on."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from gpudeck.console.actions import adopt_name
    from gpudeck.console.rows import ProcRow
    from support.core import env_with_repo
    from support.stranger import STRANGER
    from support.wait import wait_for

    script, work = tmp_path / "stranger.py", tmp_path / "work"
    script.write_text(STRANGER)
    work.mkdir()
    stranger = subprocess.Popen([sys.executable, str(script), str(fleet_home), str(work)], cwd=work,
                                start_new_session=True, env=env_with_repo())
    try:
        wait_for(lambda: list((fleet_home / "simgpu").glob(f"{stranger.pid}-*.json")), 60,
                 what="the stranger to hold its GPU")
        box = (f'[[nodes]]\nname = "box"\nlocal = true\nhome = {json.dumps(str(fleet_home))}\n'
               f'simulate_gpus = "2xTest GPU:16"\n')
        app = app_on(tmp_path, fleet_home, [], box, initial_view="fleet")
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            table = app.screen.table("fleet")

            def its_row(job=None):
                return next((r for r in table.rows() if isinstance(r, ProcRow) and r.pid == stranger.pid
                             and r.job == job), None)

            await wait_until(pilot, its_row, what="the stranger's GPU process, of no job")
            # the opening summary first: its notice would take the line the answer is read from
            await wait_until(pilot, lambda: app.state.timeline.summary is not None, what="the opening summary")
            for _ in range(20):  # down to it, as the operator would
                if table.cursor_row == its_row():
                    break
                await pilot.press("down")
            assert table.cursor_row == its_row(), screen_text(app)
            name = adopt_name(stranger.pid, its_row().command)
            await pilot.press("a")
            from rich.text import Text

            dialog = await confirm_dialog(pilot, "the adopt question")
            # the question as asked (on the screen it wraps where the temporary path's length says)
            text = " ".join(Text.from_markup(dialog.question).plain.split())
            assert f"Adopt process {stranger.pid}" in text and f"on box as job {name}?" in text, text
            assert f"Adopt process {stranger.pid}" in screen_text(app)
            await answer(pilot, "y")
            await wait_until(pilot, lambda: f"adopted pid {stranger.pid}: pid {stranger.pid} on box is job {name} "
                                            f"(GPU 1)" in notifications_text(app), what="the adoption told")
            row = await wait_until(pilot, lambda: (r := job_row(app, name)) and r.state == "running" and r,
                                   what="the adopted job running")
            assert row.node == "box" and row.pid == stranger.pid and "adopted" in row.flags, row
            await wait_until(pilot, lambda: its_row(job=name), what="its GPU process owned by the job")
            assert its_row() is None
            await pilot.press("2")
            await wait_until(pilot, lambda: any(ln.startswith(f"{name} ") and "adopted" in ln
                                                for ln in screen_text(app).splitlines()), what="its row drawn")
    finally:
        try:
            os.killpg(stranger.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stranger.wait()


async def test_an_ended_jobs_chart_shows_no_rate_now(tmp_path, fleet_home):
    """A job that reported tokens/s and exited: its chart says it ended and shows the last rate
    as the last, never as a "now" figure."""
    script = ('i=0; while [ $i -lt 100 ]; do i=$((i+1)); printf \'{"done": %d, "total": 1000, "tokens": %d}\' '
              '$i $((i*250)) > "$GPUDECK_PROGRESS_FILE.tmp"; mv "$GPUDECK_PROGRESS_FILE.tmp" '
              '"$GPUDECK_PROGRESS_FILE"; sleep 0.1; done')
    app = app_on(tmp_path, fleet_home, [shell_job("gen", script)])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await launched(pilot, "gen")
        await wait_until(pilot, lambda: (r := job_row(app, "gen")) and r.tokens_per_s, what="a rate while it runs")
        await wait_until(pilot, lambda: job_row(app, "gen").state not in ("running", "starting"), what="gen ended")
        await describe(pilot, tab="log")
        title = await wait_until(pilot, lambda: (c := app.screen.query_one("#job-chart").chart) and c.panels
                                 and c.panels[0].title, what="the chart drawn")
        state = job_row(app, "gen").state
        assert title.startswith(f"gen  tokens/s  {state} at ") and ", no rate now  last " in title, title
        assert " now " not in title.replace("no rate now", ""), title
