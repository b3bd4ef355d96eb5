"""What the nodes send, into the console's state: the transport's events as messages, the
charts' pages of history, the nodes' timelines ("since you last looked", the live events told),
the automatic move of a lost node's jobs, and the fleet file read again when it changes.

Part of ``GpuDeckApp`` (console/app.py), which mixes ``Feeds`` in: its handlers and workers
run on the app (attributes go down, messages come up)."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any, Optional

from textual import work

from ..agents.contract import ops
from ..agents.contract.vocab import ShownState
from ..agents.contract.wire import History, Snapshot
from ..remote.client import AgentError, AgentFailed, FleetClient, NodeDown, NodeUp, RequestFailed
from ..remote.fleet import Fleet
from .actions import OPERATOR_ERRORS, JobOp, Notice, describe_error, failure_notice
from .chart import RANGES, RESOLUTION
from .config import ConsoleConfig
from .looked import LookedStore
from .automove import LostNodeMover
from .messages import (EventsFetched, EventsFetchFailed, HistoryPageFailed, HistoryPageFetched, HistoryReceived,
                       HistoryWanted, NodeWentDown, NodeWentUp, SnapshotReceived)
from .placements import PlacementStore, moved
from .reload import FleetFileWatch, reload_lines
from .rows import EventRow
from .since import summarize
from .state import FleetState
from .timeline import event_row, live_notice

if TYPE_CHECKING:
    from textual.app import App

    _AppPart = App[None]
else:
    _AppPart = object

LIVE_NOTICES = 5  # live events told one by one per read; past that, one notice counts the rest


class Feeds(_AppPart):
    """The app's feeds: set up by ``GpuDeckApp.__init__`` and ``on_mount``."""

    config: ConsoleConfig
    client: FleetClient
    state: FleetState
    mover: Optional[LostNodeMover]
    placements: PlacementStore
    looked: LookedStore
    move_news: list[str]
    fleet_file: FleetFileWatch
    _down: set[str]
    _fleet_key: str
    _since: float
    _backlog_from: float
    _awaiting_backlog: set[str]
    _events_failing: set[str]
    _autostart: set[str]  # the demo's jobs, launched once their node answers (app_actions.py)

    if TYPE_CHECKING:  # the other parts of GpuDeckApp
        def schedule_refresh(self) -> None: ...
        def _start_demo_jobs(self, snap: Snapshot) -> None: ...
        def _tell(self, job: str, op: JobOp, notice: Notice) -> None: ...
        def notify(self, message: str, *, title: str = "", severity: Any = "information",
                   timeout: Optional[float] = None, markup: bool = True, keep: bool = False) -> None: ...

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
        """Move the jobs of lost nodes to spares, as `gpudeck watch fleet` does (automove.py)."""
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
