"""The gpudeck console: a Textual app over a FleetClient.

The transport runs in one async worker on the app's own event loop (asyncssh needs that:
a thread worker would give it a fresh loop and lose the connections). Its events become
messages; snapshots fold into one FleetState (as they arrive); the screens render that state
once a second, and after snapshots at most as often as a redraw's cost allows (``pacing.py``:
redraws within 5% of the wall time, every ``refresh_s`` at the most); a key is drawn at once. Attributes go down, messages come up: the screens are
handed the FleetState, and ask for what only the app does (act on a job, open it, follow
its log) with the messages of ``messages``; what a job key does is ``actions``. Operator
actions (kill, relaunch, launch) and the log follower are workers, and every answer or
error comes back as a message and is shown.

A chart over a range the node keeps (6h, 24h, 7d) asks for its page of the node's history
(``HistoryWanted``): one ``ReadHistory`` at the range's resolution in a worker, its answer
kept in the state per job (or per node, for a node's chart of its GPUs) and range
(``apply_history_page``), asked again when it is old.

Each node's timeline is read by a follower of its own (a worker started when the node comes
up, ended when its link is gone): what happened before the console opened first, then what
comes after the last seq read, the next read armed only after the last one returned. The
backlog makes the opening "since you last looked" line (``since.py``; the last look per
fleet is kept by ``looked.py``); each live event that matters is one notification and one
bell.

A job of a lost node with ``on_node_lost = "move"`` is moved to a spare by the console too,
as ``gpudeck watch fleet`` moves it: one ``LostNodeMover`` (``fleetwatch.py``: the same rule, the
same move) is fed the transport's events, and a worker runs its round every ``move_check_s``,
the next armed after the last returned; each move is a notification, and the job's row says
where it moved from. A read-only console moves nothing.

``make_app`` builds the app for the CLI and for the tests alike.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Optional

from textual import work
from textual.app import App
from textual.css.query import NoMatches
from textual.timer import Timer
from textual.worker import Worker, WorkerState

from ..agents.contract import ops
from ..agents.contract.errors import OperatorError
from ..agents.contract.vocab import ShownState
from ..agents.contract.wire import History, Snapshot
from .fleetwatch import LostNodeMover
from .moving import MoveFailed, move_job, spare_for
from .placements import PlacementStore, moved
from .chart import RANGES, RESOLUTION
from .actions import (Confirm, JobOp, Notice, Refuse, failure_notice, outcome_notice, plan_job_action,
                                     plan_process_adopt, plan_process_kill, adopt_name, job_request)
from .bindings import bindings
from .config import ConsoleConfig
from .describe import describe
from .looked import LookedStore, fleet_key
from .reload import FleetFileWatch, reload_lines
from .notices import NoticeLine
from .pacing import RedrawPacer
from .messages import (DescribeRequested, DoctorFailed, DoctorFinished, DoctorRequested, EventsFetched, EventsFetchFailed,
                                      HistoryPageFailed, HistoryPageFetched, HistoryReceived, HistoryWanted,
                                      JobActionFailed, JobActionFinished, JobActionRequested, JobOpened, LogFetched,
                                      LogFetchFailed, LogFollowCancelled, LogFollowRequested, NodeWentDown,
                                      NodeWentUp, PlansCompared, PlansCompareRequested, ProcessAdoptRequested,
                                      ProcessKillRequested, SnapshotReceived)
from .screens.confirm import ConfirmScreen
from .screens.doctor import DoctorScreen
from .screens.error import ErrorScreen
from .screens.help import HelpScreen
from .screens.command_line import CommandLine
from .screens.describe import DescribeScreen
from .screens.main import MainScreen
from .screens.plans import PlansScreen
from .rows import EventRow
from .since import summarize
from .state import FleetState
from .timeline import Timeline, event_row, live_notice
from .widgets.log_panel import LogPanel
from ..remote.client import AgentError, AgentFailed, FleetClient, NodeDown, NodeUp, RequestFailed
from ..remote.fleet import Fleet, FleetError

__all__ = ["ConsoleConfig", "GpuDeckApp", "describe_error", "make_app"]

# `:` commands (k9s's), and the other words typed for them
COMMANDS = ("jobs", "fleet", "events", "alerts", "overview", "logs", "doctor", "plans", "help", "q")
ALIASES = {"job": "jobs", "nodes": "fleet", "node": "fleet", "gpus": "fleet", "event": "events", "alert": "alerts",
           "log": "logs", "plan": "plans", "quit": "q", "q!": "q", "qa": "q", "wq": "q", "x": "q"}
OPERATOR_ERRORS = (OperatorError, RequestFailed, asyncio.TimeoutError, OSError)
LIVE_NOTICES = 5  # live events told one by one per read; past that, one notice counts the rest
DOCTOR_TIMEOUT_S = 600.0  # a node's answer to `d`: its checks run in turn, the imports each up to 120 s


class GpuDeckApp(NoticeLine, App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "gpudeck"
    ENABLE_COMMAND_PALETTE = True  # ctrl+p: jump to a node or job, run what the keys run

    # q and F10 quit, ? and F1 help, `:` the command line; ctrl+c (a priority binding: Textual's own
    # ctrl+c copies text or says to press ctrl+q) quits as in k9s and nvitop (console/keymap.py)
    BINDINGS = bindings("app")

    def __init__(self, config: ConsoleConfig, client: FleetClient) -> None:
        super().__init__()
        self.config = config
        self.client = client
        self.state = FleetState(config.fleet, clock=config.clock, spark_bucket_s=config.spark_bucket_s,
                                timeline=Timeline(config.events_kept), reads_history=config.connect)
        self.state.expect(config.nodes or [n.name for n in client.nodes_in_use()])
        self.fleet_name = config.fleet_name or _fleet_name(config.fleet)
        self.verdicts: list[tuple[str, str, str]] = []  # (job, op, what the operator was told)
        self.move_news: list[str] = []  # what the automatic move said as it went (watch fleet's lines)
        self.pacer = RedrawPacer(config.refresh_s, config.redraw_share, config.refresh_most_s)
        self._refresh_timer: Optional[Timer] = None  # the next paced redraw, when one is armed
        self._autostart = set(config.autostart)
        self._following: Optional[str] = None
        self._down: set[str] = set()
        self.looked = LookedStore(config.looked_file)
        self._fleet_key = fleet_key(config.fleet.path)
        self._since = 0.0  # "since you last looked" starts here: set at mount
        self._backlog_from = 0.0  # the first read of each node asks for the events after this
        self._awaiting_backlog: set[str] = set()  # nodes whose first read the opening summary waits for
        self._events_failing: set[str] = set()
        self.placements = PlacementStore()  # where this laptop's moves put jobs (console/placements.py)
        self.mover = LostNodeMover(client, grace_s=config.grace_s, store=self.placements, clock=config.clock) \
            if config.connect and config.auto_move and not config.read_only else None
        if config.keymap:  # the user's [keys] (console/userconfig.py), by binding id
            self.set_keymap(dict(config.keymap))

    def get_default_screen(self) -> MainScreen:
        return MainScreen(self.state, self.fleet_name, self.config.read_only, self.config.initial_view)

    def action_interrupt(self) -> None:
        """ctrl+c: quit, with the exit code of an interrupted command (130), as the terminal's
        SIGINT gives before the app has the keyboard (console/commands/common.py)."""
        from .commands.common import EXIT_INTERRUPTED

        self.exit(return_code=EXIT_INTERRUPTED)

    def on_mount(self) -> None:
        if self.config.tick_s:  # clocks and "unreachable for ...": paced like the rest
            self.set_interval(self.config.tick_s, self.schedule_refresh)
        if self.config.connect:
            self._open_timeline()
            self._show_moves()
            self.watch_fleet()
            if self.mover is not None:
                self.look_for_lost_nodes()
        if self.config.connect and self.config.fleet_poll_s and self.config.fleet.path is not None:
            self.fleet_file = FleetFileWatch(self.config.fleet.path, self._read_fleet_file,
                                             (str(self.placements.path),))
            self.set_interval(self.config.fleet_poll_s, self._look_at_fleet_file, name="fleet file")
        if self.config.screenshot:
            self._started = time.monotonic()
            self.set_interval(0.5, self._maybe_screenshot)
        self.call_after_refresh(self.refresh_views)

    def _maybe_screenshot(self) -> None:
        waited = time.monotonic() - self._started
        least, most = self.config.screenshot_wait_s
        totals = self.state.totals()
        ready = totals.tokens_per_s is not None and totals.slowest_eta_s is not None
        if (ready and waited >= least) or waited >= most:
            path = os.path.abspath(self.config.screenshot or "gpudeck.svg")
            self.save_screenshot(os.path.basename(path), os.path.dirname(path))
            self.exit()

    async def on_unmount(self) -> None:
        if self.state.timeline.summary is not None:  # the operator was told: this look counts
            self._record_look()
        await self.client.close()  # the agents exit; their jobs keep running

    # ------------------------------------------------------------ transport -> messages

    @work(group="watch", exclusive=True, exit_on_error=False, name="fleet watch")
    async def watch_fleet(self) -> None:
        await self.client.watch(self._on_fleet_event)

    def _on_fleet_event(self, node: str, event: Any) -> None:
        if self.mover is not None:
            self.mover.nodes(node, event)
        if isinstance(event, Snapshot):
            self.post_message(SnapshotReceived(event))
        elif isinstance(event, History):
            self.post_message(HistoryReceived(event))
        elif isinstance(event, NodeUp):
            self.post_message(NodeWentUp(event.node, event.hello, event.copy))
        elif isinstance(event, NodeDown):
            self.post_message(NodeWentDown(event.node, event.error, event.since, event.retry_in_s))

    def on_snapshot_received(self, message: SnapshotReceived) -> None:
        self.state.apply(message.snapshot)
        if self._autostart:
            self._start_demo_jobs(message.snapshot)
        self.schedule_refresh()

    def on_history_received(self, message: HistoryReceived) -> None:
        self.state.apply_history(message.history)
        self.schedule_refresh()

    # ------------------------------------------------------------ the charts' history

    def on_history_wanted(self, message: HistoryWanted) -> None:
        node, job, rng = message.node, message.job, message.range
        if self.state.history_asking(node, job, rng):  # asked twice before the first was seen: one read
            return
        now = self.config.clock()
        if not self.config.connect:
            self.state.history_failed(node, job, rng, "not connected", now)
            return
        self.state.history_asked(node, job, rng, now)
        what = job if job is not None else f"{node}'s GPUs"
        self.run_worker(self._read_history(node, job, rng, now), group=f"history:{node}/{job or ''}/{rng}",
                        exclusive=True, exit_on_error=False, name=f"history of {what} ({rng})")

    async def _read_history(self, node: str, job: Optional[str], rng: str, now: float) -> None:
        since, resolution = now - RANGES[rng], RESOLUTION[rng]
        op = ops.ReadHistory(since=since, resolution=resolution, job=job) if job is not None else \
            ops.ReadHistory(since=since, resolution=resolution, gpus_only=True)  # a node's chart: its GPUs
        try:
            page = await self.client.request(op, node=node, timeout=30.0, connect=False)
        except OPERATOR_ERRORS as exc:
            self.post_message(HistoryPageFailed(node, job, rng, describe_error(exc)))
        else:
            self.post_message(HistoryPageFetched(node, job, rng, page, now))

    def on_history_page_fetched(self, message: HistoryPageFetched) -> None:
        self.state.apply_history_page(message.node, message.job, message.range, message.page, message.at)
        self.schedule_refresh()

    def on_history_page_failed(self, message: HistoryPageFailed) -> None:
        self.state.history_failed(message.node, message.job, message.range, message.error, self.config.clock())
        self.schedule_refresh()

    def on_node_went_up(self, message: NodeWentUp) -> None:
        self._follow_events(message.node)
        self._show_copy(message.node, message.copy)
        if message.node in self._down:
            self._down.discard(message.node)
            self.notify(f"node {message.node} is back", timeout=5)

    def on_node_went_down(self, message: NodeWentDown) -> None:
        self._backlog_read(message.node)  # the opening summary does not wait for a node that is down
        self.state.mark_unreachable(message.node, message.error, message.since, message.retry_in_s)
        if message.node not in self._down:
            self._down.add(message.node)
            what = "its agent failed" if isinstance(message.error, AgentFailed) else "unreachable"
            self.notify(message.error.reason, title=f"node {message.node} {what}", severity="error", timeout=10)
        self.schedule_refresh()

    # ------------------------------------------------------------ the automatic move

    @work(group="automove", exclusive=True, exit_on_error=False, name="automatic move")
    async def look_for_lost_nodes(self) -> None:
        """Move the jobs of lost nodes to spares, as `gpudeck watch fleet` does (fleetwatch.py)."""
        assert self.mover is not None
        while True:
            await asyncio.sleep(self.config.move_check_s)
            fleet = self.client.fleet
            for done in await self.mover.round(self._say_move):
                m = done.move
                if done.report is not None:
                    self._tell(m.job, JobOp.MOVE, Notice("\n".join(done.lines()), f"node {m.src} lost: moved {m.job} "
                                                                                  f"to {m.dest}", "warning", 15))
                else:
                    self._tell(m.job, JobOp.MOVE, failure_notice(JobOp.MOVE, m.job, "\n".join(done.lines())))
            if self.client.fleet is not fleet:  # moved here, or by another gpudeck of this laptop
                self.state.set_fleet(self.client.fleet)
                self._show_moves()
                self.schedule_refresh()

    # ------------------------------------------------------------ current with the fleet file

    def _read_fleet_file(self, path: str) -> Fleet:
        """The fleet file as it runs: read again, with this laptop's moves (placements.json)."""
        from ..remote.fleet import load_fleet

        return self.client.adjust(load_fleet(path))

    def _look_at_fleet_file(self) -> None:
        """Every ``fleet_poll_s``: a change of the fleet file (or of a move, made from another
        terminal) is applied once it parsed and settled (console/reload.py); a mistake is said
        once, and the last good version stays in use."""
        found = self.fleet_file.poll()
        if found is None:
            return
        if found.error is not None:  # the file by its name (the header's): what and where first on the line
            where = self.fleet_file.path
            error = found.error.replace(f"{where}:", f"{os.path.basename(where)}:")
            self.notify(f"{error}\nthe last good version stays in use", title="fleet file not reloaded",
                        severity="error", timeout=20, markup=False, keep=True)
            return
        self.run_worker(self._apply_fleet(found.fleet), group="fleet reload", exclusive=False,
                        exit_on_error=False, name="fleet reload")

    async def _apply_fleet(self, fleet: Fleet) -> None:
        old = self.client.fleet
        failed = await self.client.apply_fleet(fleet)
        fleet = self.client.fleet
        self.state.set_fleet(fleet)
        self.state.expect(n.name for n in self.client.nodes_in_use())  # a node added shows as connecting
        for node in list(self.client.configured):
            self._show_copy(node, self.client.copy_of(node))
        self._show_moves()

        def running(job: str) -> Optional[str]:
            return next((node for node, j in self.state.jobs() if j.name == job and ShownState(j.state).alive), None)

        lines = reload_lines(old, fleet, running, failed)
        self.notify("\n".join(lines) or "nothing the console shows changed", title="fleet file reloaded",
                    severity="warning" if failed else "information", timeout=10, markup=False)
        self.schedule_refresh()

    def _say_move(self, line: str) -> None:
        self.move_news.append(line)
        self.notify(line, title="automatic move", severity="warning", timeout=10, markup=False)

    def _show_moves(self) -> None:
        """The jobs' rows say where they moved from (placements.json, as the fleet runs now)."""
        self.state.set_moves(moved(self.client.fleet, self.placements.of(self.client.fleet.path)))

    # ------------------------------------------------------------ the nodes' timelines

    def _open_timeline(self) -> None:
        now = self.config.clock()
        self._since = self.looked.since(self._fleet_key, now)
        self._backlog_from = min(self._since, now - 8 * 3600.0)  # the events view shows 8 h at least
        if self.looked.warning:
            self.notify(self.looked.warning, title="last look forgotten", severity="warning", timeout=8,
                        markup=False)
        self._awaiting_backlog = set(self.state.nodes)
        self.set_timer(self.config.summary_wait_s, self._tell_summary)

    def _follow_events(self, node: str) -> None:
        """One follower per node; a new one (the node came back) replaces the old."""
        self.run_worker(self._read_events(node), group=f"events:{node}", exclusive=True, exit_on_error=False,
                        name=f"events of {node}")

    async def _read_events(self, node: str) -> None:
        after = self.state.timeline.after.get(node)
        delay = self.config.events_poll_s
        while True:
            backlog = after is None
            ask = ops.ReadEvents(since=self._backlog_from, limit=self.config.events_kept) if after is None else \
                ops.ReadEvents(after_seq=after, limit=self.config.events_kept)
            try:
                reply = await self.client.request(ask, node=node, timeout=15.0, connect=False)
            except (AgentError, RequestFailed, OSError, asyncio.TimeoutError) as exc:
                link = self.client.links.get(node)
                if link is None or link.closed:  # down: the node's next NodeWentUp starts a new follower
                    return
                self.post_message(EventsFetchFailed(node, describe_error(exc), backlog))
                delay = min(delay * 2, 15.0)
            else:
                rows = tuple(event_row(node, e) for e in reply.events)
                last = after
                after = max([reply.seq, after or 0] + [r.seq for r in rows])
                if backlog or rows or after != last:  # a quiet second posts nothing
                    self.post_message(EventsFetched(node, rows, after, backlog))
                delay = self.config.events_poll_s
            await asyncio.sleep(delay)

    def on_events_fetched(self, message: EventsFetched) -> None:
        timeline = self.state.timeline
        new = timeline.add(message.events)
        timeline.followed(message.node, message.seq)
        self._events_failing.discard(message.node)
        if message.backlog:
            self._backlog_read(message.node)
        else:
            self._tell_live(new)
        if new:
            self.state.version += 1
            self.schedule_refresh()

    def on_events_fetch_failed(self, message: EventsFetchFailed) -> None:
        if message.backlog:
            self._backlog_read(message.node)
        if message.node not in self._events_failing:  # once until it reads again
            self._events_failing.add(message.node)
            self.notify(message.error, title=f"events of {message.node} cannot be read", severity="warning",
                        timeout=6, markup=False)

    def _backlog_read(self, node: str) -> None:
        if node in self._awaiting_backlog:
            self._awaiting_backlog.discard(node)
            if not self._awaiting_backlog:
                self._tell_summary()

    def _tell_summary(self) -> None:
        """"Since you last looked", once: when every node's backlog is in, or after
        ``summary_wait_s`` with what came (the nodes not heard from are named)."""
        timeline = self.state.timeline
        if timeline.summary is not None or not self.config.connect:
            return
        text = summarize(timeline.rows(), self._since, self.config.clock())
        missing = sorted(self._awaiting_backlog)
        if missing:
            text += f" (not heard from {', '.join(missing)} yet)"
        timeline.summary, timeline.summary_at = text, self.config.clock()
        self.state.version += 1
        self.notify(text, title="since you last looked", timeout=15, markup=False)
        self._record_look()
        self.schedule_refresh()

    def _record_look(self) -> None:
        why = self.looked.record(self._fleet_key, self.config.clock())
        if why is not None:
            self.notify(why, title="last look not kept", severity="warning", timeout=8, markup=False)

    def _tell_live(self, rows: list[EventRow]) -> None:
        """One notification and one bell per live event that matters; a burst (a node back
        after a long while) is told for its first few, then counted."""
        notices = [(r, n) for r in rows if (n := live_notice(r)) is not None]
        for _, n in notices[:LIVE_NOTICES]:
            self.notify(n.text, title=n.title or "", severity=n.severity, timeout=n.timeout,  # type: ignore[arg-type]
                        markup=False)
            if self.config.bell:
                self.bell()
        if len(notices) > LIVE_NOTICES:
            self.notify(f"… and {len(notices) - LIVE_NOTICES} more: the events view (e) lists them",
                        severity="warning", timeout=10, markup=False)

    # ------------------------------------------------------------ state -> screens

    def schedule_refresh(self) -> None:
        """Draw soon: what arrives until then is drawn together, and redraws come no more often
        than their cost allows (``pacing.py``)."""
        if self._refresh_timer is None:
            self._refresh_timer = self.set_timer(self.pacer.delay(time.monotonic()), self._paced_refresh,
                                                 name="paced redraw")

    def _paced_refresh(self) -> None:
        self._refresh_timer = None  # (this timer's own callback: it ends by itself)
        self.refresh_views()

    def refresh_views(self) -> None:
        """Draw the state now, and measure what it costs, painting included."""
        if self._refresh_timer is not None:  # drawn now: the armed redraw has nothing left to show
            self._refresh_timer.stop()
            self._refresh_timer = None
        self.pacer.drawing(time.monotonic())
        began = time.thread_time()  # CPU time: other processes on a busy machine are not our cost
        for screen in self.screen_stack:
            # a screen still composing (a slow machine at start-up), or already closing, is
            # skipped: the next refresh draws it
            if isinstance(screen, (MainScreen, DescribeScreen)) and screen.is_mounted and screen.composed:
                try:
                    screen.show_state(self.state)
                except NoMatches:
                    self.schedule_refresh()
        self.call_after_refresh(self._painted, began)

    def _painted(self, began: float) -> None:
        self.pacer.measured(time.thread_time() - began)

    # ------------------------------------------------------------ operator actions

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.config.read_only, dict(self._keymap)))

    def on_job_opened(self, message: JobOpened) -> None:
        row = self.state.job_row(message.job)
        if row is None:
            self.notify(f"job {message.job} is not in any snapshot yet", severity="warning", timeout=4)
            return
        self._describe(row)

    def on_describe_requested(self, message: DescribeRequested) -> None:
        self._describe(message.row)

    def _describe(self, row: Any) -> None:
        """The describe screen of a row: every field whole, found again in the state at each redraw."""
        from .rows import AlertRow, EventRow, JobRow

        if isinstance(row, JobRow):
            node, name = row.node, row.acts_on  # a folded run of pending tasks opens its first task
            row = next((r for r in self.state.job_rows() if r.node == node and name in (r.name, r.target)), row)

            def find(state: FleetState) -> Any:
                return next((r for r in state.job_rows() if r.node == node and name in (r.name, r.target)), None)
        elif isinstance(row, AlertRow):
            key = row.key

            def find(state: FleetState) -> Any:
                return next((r for r in state.alert_rows() if r.key == key), None)
        elif isinstance(row, EventRow):  # an event is what it was
            event = row

            def find(state: FleetState) -> Any:
                return event
        else:  # a node, a GPU, a process
            key = row.key

            def find(state: FleetState) -> Any:
                return next((r for r in state.fleet_rows() if r.key == key), None)
        self.push_screen(DescribeScreen(self.state, find, describe(row, self.state), self.fleet_name,
                                        self.config.read_only))

    # ------------------------------------------------------------ the command line (`:`)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> Optional[bool]:
        if action == "command_line":  # over the views and a describe, not over a question or a dialog
            return isinstance(self.screen, (MainScreen, DescribeScreen))
        return True

    def action_command_line(self) -> None:
        """`:`: k9s's command line; every letter typed is text until enter or escape."""
        self.push_screen(CommandLine(self.command_candidates()), self.run_command)

    def command_candidates(self) -> list[str]:
        jobs = sorted({r.acts_on for r in self.state.job_rows()})
        return [*COMMANDS, *(f"logs {j}" for j in jobs), *(f"doctor {n}" for n in self.state.nodes)]

    def run_command(self, text: Optional[str]) -> None:
        """What `:` runs: a view, a job's log, a node's doctor, the plans, help, quit."""
        words = (text or "").split()
        if not words:
            return
        verb, args = words[0].lower(), words[1:]
        verb = ALIASES.get(verb, verb)
        if verb == "q":
            self.exit()
            return
        if verb == "help":
            self.action_help()
            return
        if verb not in COMMANDS or (args and verb not in ("logs", "doctor")):
            self.notify(f":{text} is no command; the commands: {', '.join(':' + c for c in COMMANDS)} "
                        f"(tab completes)", title="command line", severity="warning", timeout=6, markup=False)
            return
        main = self._back_to_views()
        if verb == "doctor":
            node = args[0] if args else main.selected_node()
            if node is None or node not in self.state.nodes:
                self.notify(f"no node {node!r} in this fleet: :doctor NODE (tab completes)" if node else
                            "select a node first, or :doctor NODE", severity="warning", timeout=5, markup=False)
                return
            self.post_message(DoctorRequested(node))
        elif verb == "plans":
            main.action_plans()
        elif verb == "logs" and args:
            if self.state.job_row(args[0]) is None:
                self.notify(f"no job {args[0]!r} in this fleet: :logs JOB (tab completes)", severity="warning",
                            timeout=5, markup=False)
                return
            main.log_job = args[0]
            if main.active == "logs":
                main.sync_log_follow()
            else:
                main.action_view("logs")
        else:
            main.action_view(verb)

    def _back_to_views(self) -> MainScreen:
        """Close what is over the views (a describe): a command shows a view or opens a dialog over it."""
        while not isinstance(self.screen, MainScreen) and len(self.screen_stack) > 1:
            self.pop_screen()
        assert isinstance(self.screen, MainScreen)
        return self.screen

    def on_job_action_requested(self, message: JobActionRequested) -> None:
        """Kill, relaunch or launch a job; destructive ones ask first. A launch or relaunch reads
        the fleet file again first: it runs what the file says now, and a relaunch shows the change."""
        op, job = message.op, message.job
        if op in (JobOp.RELAUNCH, JobOp.LAUNCH) and self.config.connect and not self.config.read_only:
            self.reload_then_plan(op, job)
        else:
            self._plan_job_action(op, job)

    @work(group="actions", exit_on_error=False, name="fleet reload")
    async def reload_then_plan(self, op: JobOp, job: str) -> None:
        try:
            await self.client.reload_fleet()
        except FleetError as exc:
            self.notify(f"the fleet file has a mistake; nothing sent: {exc}", severity="error", timeout=8)
            return
        except OPERATOR_ERRORS as exc:
            self.post_message(JobActionFailed(job, op, describe_error(exc)))
            return
        self.state.set_fleet(self.client.fleet)
        for node in list(self.client.configured):  # the configure of each node said it again
            self._show_copy(node, self.client.copy_of(node))
        self._show_moves()
        self._plan_job_action(op, job, tuple(self.client.spec_changes.get(job, ())))

    def _show_copy(self, node: str, copy: Optional[ops.CopyDiff]) -> None:
        """How this file's jobs differ from another copy's of its fleet on ``node``: on the node's
        line (FleetState.set_copy) until a configure says they agree; a notice when it appears."""
        from .formatting import copy_text

        view = self.state.nodes.get(node)
        before = view.copy if view is not None else None
        self.state.set_copy(node, copy)
        text = copy_text(copy)
        if text and copy != before:
            self.notify(text, title=f"node {node}: this file's jobs differ from another copy's", severity="warning",
                        timeout=10, markup=False)
        self.schedule_refresh()

    def _plan_job_action(self, op: JobOp, job: str, changes: tuple[str, ...] = ()) -> None:
        row = self.state.job_row(job)
        refused = self.client.refused.get(row.node) if row is not None and not self.config.read_only else None
        if refused is not None:  # another fleet owns this file's jobs there: a change needs --take-over
            self.notify(f"{row.node}: {refused.reason}", severity="warning", timeout=6)
            return
        dest = spare_for(self.client.fleet, job) if op is JobOp.MOVE else None
        plan = plan_job_action(op, job, row, read_only=self.config.read_only, grace_s=self.config.grace_s,
                               changes=changes, dest=dest)
        if isinstance(plan, Refuse):
            self.notify(plan.message, severity="warning", timeout=4)
        elif isinstance(plan, Confirm):
            self._confirm(op, job, plan)
        else:
            self.run_job_action(op, job)

    def _confirm(self, op: JobOp, job: str, plan: Confirm) -> None:
        def answered(confirmed: Optional[bool]) -> None:
            if confirmed:
                self.run_job_action(op, job)
            else:
                self.notify(f"{op} of {job} cancelled", timeout=3)

        self.push_screen(ConfirmScreen(plan.title, plan.question, plan.yes), answered)

    def on_process_kill_requested(self, message: ProcessKillRequested) -> None:
        """Kill a GPU process that belongs to no job, after asking."""
        node, pid = message.node, message.pid
        plan = plan_process_kill(node, pid, read_only=self.config.read_only, grace_s=self.config.grace_s)
        if isinstance(plan, Refuse):
            self.notify(plan.message, severity="warning", timeout=4)
            return

        def answered(confirmed: Optional[bool]) -> None:
            if confirmed:
                self.run_process_kill(node, pid)
            else:
                self.notify(f"kill of pid {pid} cancelled", timeout=3)

        self.push_screen(ConfirmScreen(plan.title, plan.question, plan.yes), answered)

    @work(group="actions", exit_on_error=False, name="process kill")
    async def run_process_kill(self, node: str, pid: int) -> None:
        what = f"pid {pid} on {node}"
        if not self.config.connect:
            self.post_message(JobActionFailed(what, JobOp.KILL, "this console is not connected to the fleet"))
            return
        self.notify(f"kill {what}…", timeout=3)
        try:
            verdict = await self.client.request(ops.KillPid(pid=pid, grace_s=self.config.grace_s), node=node)
        except OPERATOR_ERRORS as exc:
            self.post_message(JobActionFailed(what, JobOp.KILL, describe_error(exc)))
            return
        self.post_message(JobActionFinished(what, JobOp.KILL, verdict))

    def on_process_adopt_requested(self, message: ProcessAdoptRequested) -> None:
        """Adopt a GPU process that belongs to no job, after asking; the start the console saw goes
        with the request, so a pid reused since is refused."""
        node, pid = message.node, message.pid
        view = self.state.nodes.get(node)
        seen = next((p for g in (view.snapshot.gpus if view is not None and view.snapshot is not None else [])
                     for p in g.processes if p.pid == pid), None)
        command = seen.command if seen is not None else None
        name = adopt_name(pid, command)
        plan = plan_process_adopt(node, pid, name, command, read_only=self.config.read_only)
        if isinstance(plan, Refuse):
            self.notify(plan.message, severity="warning", timeout=4)
            return
        started = seen.started_at if seen is not None else None

        def answered(confirmed: Optional[bool]) -> None:
            if confirmed:
                self.run_process_adopt(node, pid, name, started)
            else:
                self.notify(f"adopt of pid {pid} cancelled", timeout=3)

        self.push_screen(ConfirmScreen(plan.title, plan.question, plan.yes), answered)

    @work(group="actions", exit_on_error=False, name="process adopt")
    async def run_process_adopt(self, node: str, pid: int, name: str, started_at: Optional[float]) -> None:
        if not self.config.connect:
            self.notify("this console is not connected to the fleet", title=f"adopt pid {pid} failed",
                        severity="error", timeout=20)
            return
        try:
            r = await self.client.request(ops.Adopt(pid=pid, job=name, started_at=started_at), node=node)
        except OPERATOR_ERRORS as exc:
            self.notify(describe_error(exc), title=f"adopt pid {pid} failed", severity="error", timeout=20)
            return
        gpus = f"GPU {', '.join(map(str, r.gpus))}" if r.gpus else "no GPU"
        text = f"pid {r.pid} on {node} is job {r.job} ({gpus})"
        self.verdicts.append((r.job, "adopt", text))
        # the answer to the operator's key: kept on the notice line as a kill's verdict is
        self.notify(text, title=f"adopted pid {pid}", timeout=15, keep=True)
        self.schedule_refresh()

    def _node_of(self, job: str) -> Optional[str]:
        """The node of a job the fleet file does not declare (an adopted one), from its row; None
        for a declared job (the client routes it)."""
        if any(j.name == job for j in self.client.fleet.jobs):
            return None
        row = self.state.job_row(job)
        return row.node if row is not None else None

    @work(group="actions", exit_on_error=False, name="job action")
    async def run_job_action(self, op: str, job: str, quiet: bool = False) -> None:
        """Send ``op`` (a JobOp or its name) for ``job`` now, without asking."""
        job_op = JobOp(op)
        if not self.config.connect:
            self.post_message(JobActionFailed(job, job_op, "this console is not connected to the fleet"))
            return
        if not quiet:
            self.notify(f"{job_op} {job}…", timeout=3)
        if job_op is JobOp.MOVE:
            await self._move(job)
            return
        try:
            result = await self.client.request(job_request(job_op, job, self.config.grace_s), node=self._node_of(job))
        except OPERATOR_ERRORS as exc:
            self.post_message(JobActionFailed(job, job_op, describe_error(exc)))
            return
        self.post_message(JobActionFinished(job, job_op, result))

    async def _move(self, job: str) -> None:
        """A move to the first free spare (console/moving.py); the fleet as it runs afterwards."""
        dest = spare_for(self.client.fleet, job)
        if dest is None:
            self.post_message(JobActionFailed(job, JobOp.MOVE, "no spare node is free"))
            return
        try:
            report = await move_job(self.client, job, dest, self.config.grace_s, self.placements)
        except MoveFailed as exc:
            self.post_message(JobActionFailed(job, JobOp.MOVE, "\n".join([*exc.done, str(exc)])))
            return
        except OPERATOR_ERRORS as exc:
            self.post_message(JobActionFailed(job, JobOp.MOVE, describe_error(exc)))
            return
        self.state.set_fleet(self.client.fleet)
        self._show_moves()
        self.post_message(JobActionFinished(job, JobOp.MOVE, report))

    def on_job_action_finished(self, message: JobActionFinished) -> None:
        self._tell(message.job, message.op, outcome_notice(message.op, message.job, message.result))
        self.schedule_refresh()

    def on_job_action_failed(self, message: JobActionFailed) -> None:
        self._tell(message.job, message.op, failure_notice(message.op, message.job, message.error))

    def _tell(self, job: str, op: JobOp, notice: Notice) -> None:
        self.verdicts.append((job, op, notice.text))
        self.notify(notice.text, title=notice.title or "", severity=notice.severity,  # type: ignore[arg-type]
                    timeout=notice.timeout, keep=True)

    def _start_demo_jobs(self, snap: Snapshot) -> None:
        for j in snap.jobs:
            if j.name in self._autostart:
                self._autostart.discard(j.name)
                if not ShownState(j.state).alive:
                    self.run_job_action(JobOp.LAUNCH, j.name, quiet=True)

    # ------------------------------------------------------------ a node's doctor, the plans compared

    def on_doctor_requested(self, message: DoctorRequested) -> None:
        """`d`: the node's checks in a screen at once, filled when the node answers."""
        node = message.node
        screen = DoctorScreen(node)
        self.push_screen(screen)
        if not self.config.connect:
            screen.show_error("this console is not connected to the fleet")
            return
        self.run_worker(self._doctor(node), group=f"doctor:{node}", exclusive=True, exit_on_error=False,
                        name=f"doctor of {node}")

    async def _doctor(self, node: str) -> None:
        from .commands.doctor import doctor_op

        try:
            op = doctor_op(self.client.fleet.node(node))
            report = await self.client.request(op, node=node, timeout=DOCTOR_TIMEOUT_S, connect=False)
        except OPERATOR_ERRORS as exc:
            self.post_message(DoctorFailed(node, describe_error(exc)))
        else:
            self.post_message(DoctorFinished(node, report))

    def _doctor_screen(self, node: str) -> Optional[DoctorScreen]:
        return next((s for s in reversed(self.screen_stack) if isinstance(s, DoctorScreen) and s.node == node
                     and not s.done), None)

    def on_doctor_finished(self, message: DoctorFinished) -> None:
        from .commands.doctor import counts

        screen = self._doctor_screen(message.node)
        if screen is not None:
            screen.show_report(message.report)
            return
        worst = message.report.worst.value  # closed meanwhile: the summary as a notice
        severity = {"ok": "information", "warn": "warning"}.get(worst, "error")
        self.notify(f"{counts(message.report)} (:doctor {message.node} shows the lines)", title=f"doctor of {message.node}",
                    severity=severity, timeout=10)  # type: ignore[arg-type]

    def on_doctor_failed(self, message: DoctorFailed) -> None:
        screen = self._doctor_screen(message.node)
        if screen is not None:
            screen.show_error(message.error)
        else:
            self.notify(message.error, title=f"doctor of {message.node} failed", severity="error", timeout=10,
                        markup=False)

    def on_plans_compare_requested(self, message: PlansCompareRequested) -> None:
        """`p`: the fleet file's [[plans]] side by side, read again now (a plan written since counts)."""
        if not isinstance(self.screen, PlansScreen):
            self.push_screen(PlansScreen(self.fleet_name))
        self._compare_plans()

    @work(thread=True, group="plans", exclusive=True, exit_on_error=False, name="plans compared")
    def _compare_plans(self) -> None:
        """A thread: the plan.json files are read here, and the fleet file (plain files, no asyncssh)."""
        from .commands.plan import Comparison, compare_plans
        from ..remote.fleet import load_fleet

        fleet = self.config.fleet
        try:
            plans = load_fleet(fleet.path).plans if fleet.path is not None else fleet.plans
        except FleetError as exc:
            self.post_message(PlansCompared(Comparison(len(fleet.plans), error=f"the fleet file has a mistake: {exc}")))
            return
        self.post_message(PlansCompared(compare_plans(plans, fleet.path)))

    def on_plans_compared(self, message: PlansCompared) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, PlansScreen):
                screen.show(message.comparison)

    # ------------------------------------------------------------ logs

    def on_log_follow_requested(self, message: LogFollowRequested) -> None:
        """Show the job's tail, then what is appended; one followed log at a time."""
        if (self._following == message.job and not message.restart) or not self.config.connect:
            return
        self._following = message.job
        self._follow(message.job)

    def on_log_follow_cancelled(self, message: LogFollowCancelled) -> None:
        self._following = None
        self.workers.cancel_group(self, "logs")

    @work(group="logs", exclusive=True, exit_on_error=False, name="log follower")
    async def _follow(self, job: str) -> None:
        offset: Optional[int] = None
        delay = self.config.log_poll_s
        while True:
            try:
                if offset is None:
                    chunk = await self.client.request(ops.Logs(job=job, lines=self.config.log_lines), timeout=15.0,
                                                      node=self._node_of(job))
                    self.post_message(LogFetched(job, chunk, reset=True))
                else:
                    chunk = await self.client.request(ops.Logs(job=job, offset=offset), timeout=15.0,
                                                      node=self._node_of(job))
                    if chunk.text:
                        self.post_message(LogFetched(job, chunk, reset=False))
                offset, delay = chunk.offset, self.config.log_poll_s
            except RequestFailed as exc:
                if exc.usage:  # the node judged the request wrong (no such job): it stays wrong
                    self.post_message(LogFetchFailed(job, describe_error(exc), final=True))
                    return
                self.post_message(LogFetchFailed(job, describe_error(exc)))
                delay = min(delay * 2, 15.0)
            except OPERATOR_ERRORS as exc:
                self.post_message(LogFetchFailed(job, describe_error(exc)))
                delay = min(delay * 2, 15.0)
            await asyncio.sleep(delay)

    def _log_panels(self, job: str) -> list[LogPanel]:
        return [p for screen in self.screen_stack for p in screen.query(LogPanel) if p.job == job]

    def on_log_fetched(self, message: LogFetched) -> None:
        path = message.chunk.path if message.reset else None  # the tail says where the log is
        for panel in self._log_panels(message.job):
            panel.feed(message.chunk.text, message.reset, path)

    def on_log_fetch_failed(self, message: LogFetchFailed) -> None:
        if message.final and self._following == message.job:
            self._following = None  # a later request for it starts a follower again
        for panel in self._log_panels(message.job):
            panel.fetch_failed(message.error, message.final)

    # ------------------------------------------------------------ errors nobody expected

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state != WorkerState.ERROR:
            return
        err = event.worker.error
        self.push_screen(ErrorScreen(f"{event.worker.name} stopped",
                                     f"{type(err).__name__}: {err}\n\nThis is a bug in gpudeck: please report it "
                                     f"with what you were doing."))


def describe_error(exc: BaseException) -> str:
    """What the operator reads: the node, and what went wrong there."""
    if isinstance(exc, RequestFailed):
        return f"node {exc.node}: {exc}"
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__


def _fleet_name(fleet: Fleet) -> str:
    if fleet.path is None:
        return "this machine"
    return os.path.basename(fleet.path)


def make_app(fleet: Fleet, *, client: Optional[FleetClient] = None, **options: Any) -> GpuDeckApp:
    """The console on ``fleet``: the CLI's `up` and `demo` and the tests all start here."""
    # a read-only console is a look: never refused for, nor taking, another fleet's jobs
    client = client or FleetClient(fleet, reading=bool(options.get("read_only")))
    client.adjust = _with_placements  # a fleet file read again keeps this laptop's moved jobs where they run
    return GpuDeckApp(ConsoleConfig(fleet=fleet, **options), client)


def _with_placements(fleet: Fleet) -> Fleet:
    from .placements import PlacementStore, apply
    return apply(fleet, PlacementStore().of(fleet.path))
