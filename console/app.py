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
as ``gpudeck watch fleet`` moves it: one ``LostNodeMover`` (``automove.py``: the same rule, the
same move) is fed the transport's events, and a worker runs its round every ``move_check_s``,
the next armed after the last returned; each move is a notification, and the job's row says
where it moved from. A read-only console moves nothing.

``make_app`` builds the app for the CLI and for the tests alike.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from typing import Any, Optional

from textual import work
from textual.app import App
from textual.css.query import NoMatches
from textual.timer import Timer
from textual.worker import Worker, WorkerState

from ..agents.contract import ops
from ..remote.client import FleetClient, RequestFailed
from ..remote.fleet import Fleet
from .actions import OPERATOR_ERRORS, describe_error
from .app_actions import Actions
from .app_feeds import Feeds
from .automove import LostNodeMover
from .bindings import bindings
from .config import ConsoleConfig
from .describe import describe
from .looked import LookedStore, fleet_key
from .messages import (DescribeRequested, DoctorRequested, JobOpened, LogFetched, LogFetchFailed, LogFollowCancelled,
                       LogFollowRequested)
from .notices import NoticeLine
from .pacing import RedrawPacer
from .placements import PlacementStore
from .reload import FleetFileWatch
from .screens.command_line import CommandLine
from .screens.describe import DescribeScreen
from .screens.error import ErrorScreen
from .screens.help import HelpScreen
from .screens.main import MainScreen
from .state import FleetState
from .timeline import Timeline
from .widgets.log_panel import LogPanel

__all__ = ["ConsoleConfig", "GpuDeckApp", "describe_error", "make_app"]

# `:` commands (k9s's), and the other words typed for them
COMMANDS = ("jobs", "fleet", "events", "alerts", "overview", "logs", "doctor", "plans", "help", "q")
ALIASES = {"job": "jobs", "nodes": "fleet", "node": "fleet", "gpus": "fleet", "event": "events", "alert": "alerts",
           "log": "logs", "plan": "plans", "quit": "q", "q!": "q", "qa": "q", "wq": "q", "x": "q"}


class GpuDeckApp(Feeds, Actions, NoticeLine, App[None]):
    """The console. Its parts: ``Feeds`` (app_feeds.py: what the nodes send, into the state) and
    ``Actions`` (app_actions.py: what the operator's keys ask of the nodes); here the screens,
    the redraws, the command line and the log follower."""


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
        if self.config.freeze_startup:
            self.call_after_refresh(gc.freeze)

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

    # ------------------------------------------------------------ help, describe

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
