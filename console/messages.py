"""App-wide messages, typed, dataclass-style: attributes go down, messages come up.

The transport's events arrive as the first four; a newer snapshot of a node replaces one
still queued (``can_replace``), so a slow screen never works through a backlog. The nodes'
timelines come as ``EventsFetched``. Screens
ask the app for what only the app does (act on a job, open it, follow its log) with the
requests; the answers to the operator's actions and the log follower's chunks come last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from textual.message import Message

from ..agents.contract.ops import CopyDiff, DoctorReport, HistoryPage
from ..agents.contract.wire import Hello, History, LogChunk, Snapshot
from ..remote.link import NodeError
from .actions import JobOp, JobOutcome
from .rows import EventRow

if TYPE_CHECKING:
    from .commands.plan import Comparison

# ---------------------------------------------------------------- the transport


@dataclass
class SnapshotReceived(Message):
    """A node's agent sent its once-a-tick snapshot."""

    snapshot: Snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotReceived) and message.snapshot.node == self.snapshot.node


@dataclass
class HistoryReceived(Message):
    """A node's agent sent what it recorded while the console was away."""

    history: History


@dataclass
class NodeWentUp(Message):
    """A node's agent said hello."""

    node: str
    hello: Hello
    copy: Optional[CopyDiff] = None  # how this file's jobs differ from another copy's there (None: they do not)


@dataclass
class NodeWentDown(Message):
    """A node cannot be read; the reconnect loop tries again in ``retry_in_s``."""

    node: str
    error: NodeError  # ``.reason``: why, without the node's name
    since: float
    retry_in_s: float


@dataclass
class EventsFetched(Message):
    """A node's new events (oldest first), read up to ``seq``. ``backlog``: the first read of
    this node in this session, what happened before the console opened (the opening summary
    tells it; no bell)."""

    node: str
    events: tuple[EventRow, ...]
    seq: int
    backlog: bool


@dataclass
class EventsFetchFailed(Message):
    """A node's events could not be read this time; the follower tries again."""

    node: str
    error: str
    backlog: bool


@dataclass
class HistoryPageFetched(Message):
    """A node answered ``ReadHistory`` for ``job``'s chart over ``range`` (chart.RANGES); ``job``
    None: the node's own chart (its GPUs)."""

    node: str
    job: Optional[str]
    range: str
    page: HistoryPage
    at: float  # when it was asked


@dataclass
class HistoryPageFailed(Message):
    """A node could not answer ``ReadHistory`` for a chart (its history is off, it is down)."""

    node: str
    job: Optional[str]
    range: str
    error: str


# ---------------------------------------------------------------- screens ask the app


@dataclass
class HistoryWanted(Message):
    """A chart over ``range`` of ``job`` on ``node`` needs the node's history (picked, or old);
    ``job`` None: the node's own chart (its GPUs)."""

    node: str
    job: Optional[str]
    range: str



@dataclass
class JobActionRequested(Message):
    """The operator pressed a job key on ``job``; the app asks first if it must, then acts."""

    op: JobOp
    job: str


@dataclass
class ProcessKillRequested(Message):
    """The operator pressed kill on a GPU process that belongs to no job."""

    node: str
    pid: int


@dataclass
class ProcessAdoptRequested(Message):
    """The operator pressed adopt on a GPU process that belongs to no job."""

    node: str
    pid: int


@dataclass
class JobOpened(Message):
    """The operator opened ``job`` (the palette's "open JOB"): the app describes it."""

    job: str


@dataclass
class DescribeRequested(Message):
    """The operator asked for a row whole (`enter` or `d` on it): the app shows its describe."""

    row: Any


@dataclass
class LogFollowRequested(Message):
    """A panel shows ``job``'s log: send its tail, then what is appended. ``restart``: send
    the tail again even if this job is already followed (a new panel shows it)."""

    job: str
    restart: bool = False


@dataclass
class LogFollowCancelled(Message):
    """No panel on screen shows a log any more: stop reading it."""


@dataclass
class DoctorRequested(Message):
    """The operator asked for ``node``'s checks before a run (`d`, or the palette): the app
    shows the doctor's screen and sends ``ops.Doctor``."""

    node: str


@dataclass
class PlansCompareRequested(Message):
    """The operator asked for the fleet file's [[plans]] side by side (`p`, or the palette)."""


# ---------------------------------------------------------------- answers


@dataclass
class JobActionFinished(Message):
    """The agent answered a kill (a KillVerdict), a relaunch or a launch (a LaunchResult)."""

    job: str
    op: JobOp
    result: JobOutcome


@dataclass
class JobActionFailed(Message):
    """A kill, relaunch or launch could not be done; ``error`` says why, for the operator."""

    job: str
    op: JobOp
    error: str


@dataclass
class DoctorFinished(Message):
    """A node answered ``ops.Doctor``: a line per check."""

    node: str
    report: DoctorReport


@dataclass
class DoctorFailed(Message):
    """The doctor's checks of ``node`` could not be had (the node is down, the agent refused,
    no answer in time); ``error`` says why, for the operator."""

    node: str
    error: str


@dataclass
class PlansCompared(Message):
    """The fleet file's [[plans]] read and set side by side, or why they cannot be."""

    comparison: "Comparison"


@dataclass
class LogFetched(Message):
    """More of a job's log: the tail (``reset``) or what was appended since."""

    job: str
    chunk: LogChunk
    reset: bool


@dataclass
class LogFetchFailed(Message):
    """The log could not be read this time; the follower tries again, unless ``final``: the
    node refused the request itself (an unknown job), which asking again cannot change."""

    job: str
    error: str
    final: bool = False

