"""The command palette's gpudeck commands (ctrl+p): jump to a node or a job by name, and run
what the keys run (open, kill, relaunch, launch a job; the views; sort; a node's doctor; the
plans compared). Destructive ones go through the same confirmation and read-only refusal as
their keys: they post the same messages."""

from __future__ import annotations

from functools import partial
from typing import Callable, Iterator, Protocol, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.message import Message

from ..actions import JOB_OPS
from ..messages import DoctorRequested, JobActionRequested, JobOpened, PlansCompareRequested
from ..state import FleetState

Command = tuple[str, Callable[[], object], str]  # (what is typed, what runs, what it does)


class _MainScreen(Protocol):
    """What the commands use of the MainScreen (not imported: it imports this module)."""

    fleet_state: FleetState
    read_only: bool

    def action_view(self, view: str) -> None: ...
    def action_sort_picker(self) -> None: ...
    def action_sort(self) -> None: ...
    def action_reverse(self) -> None: ...
    def focus_row(self, view: str, key: str) -> bool: ...
    def post_message(self, message: Message) -> bool: ...


class FleetCommands(Provider):
    """Nodes, jobs and the screen's actions, matched on what the operator types."""

    def _commands(self) -> Iterator[Command]:
        # only MainScreen.COMMANDS names this provider: the screen it runs on is that one
        screen = cast(_MainScreen, self.screen)
        state = screen.fleet_state
        for view in ("overview", "fleet", "jobs", "logs", "alerts"):
            yield f"view {view}", partial(screen.action_view, view), f"show the {view} view"
        yield ("view events", partial(screen.action_view, "events"),
               "the nodes' timeline: deaths, restarts, GPU health, ... since you last looked (e)")
        yield "sort: by a column", screen.action_sort_picker, "pick the column to sort the view by (F6)"
        yield "sort: next key", screen.action_sort, "sort the view by its next key (s)"
        yield "sort: reverse", screen.action_reverse, "reverse the view's sort (S)"
        yield ("plans: compare", partial(screen.post_message, PlansCompareRequested()),
               "the fleet file's [[plans]] side by side: days, dollars, bytes; the cheaper and the faster (p, :plans)")
        for node in state.nodes:
            yield f"node {node}", partial(screen.focus_row, "fleet", f"node:{node}"), "jump to it in the fleet view"
            yield (f"doctor {node}", partial(screen.post_message, DoctorRequested(node)),
                   "check the node before a run: python, torch, driver, models, disk, S3, clock, limits "
                   "(:doctor NODE, D)")
        for row in state.job_rows():
            name = row.name
            yield f"job {name}", partial(screen.focus_row, "jobs", row.key), f"jump to it in the jobs view ({row.node})"
            yield (f"open {name}", partial(screen.post_message, JobOpened(name)),
                   "describe it: every field, its chart and log (enter, d)")
            if screen.read_only:
                continue
            for op in JOB_OPS:
                yield (f"{op.value} {name}", partial(screen.post_message, JobActionRequested(op, name)),
                       f"{op.label.lower()} the job ({op.key}; asks first where the key does)")

    async def discover(self) -> Hits:
        for text, run, help in self._commands():
            if not text.startswith(("open ", "kill ", "relaunch ", "launch ", "move ", "ack ")):
                yield DiscoveryHit(text, run, help=help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, run, help in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), run, text=text, help=help)
