"""App-wide messages, named as past events.

The transport's events arrive as the first four; a newer snapshot of a node replaces one
still queued (``can_replace``), so a slow screen never works through a backlog. The rest
are the answers to the operator's actions and the log follower's chunks.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from textual.message import Message

from gpudeck.agents.protocol import Hello, History, KillVerdict, LaunchResult, Snapshot


class SnapshotReceived(Message):
    """A node's agent sent its once-a-tick snapshot."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotReceived) and message.snapshot.node == self.snapshot.node


class HistoryReceived(Message):
    """A node's agent sent what it recorded while the console was away."""

    def __init__(self, history: History) -> None:
        super().__init__()
        self.history = history


class NodeWentUp(Message):
    """A node's agent said hello."""

    def __init__(self, node: str, hello: Hello) -> None:
        super().__init__()
        self.node, self.hello = node, hello


class NodeWentDown(Message):
    """A node cannot be read; the reconnect loop tries again in ``retry_in_s``."""

    def __init__(self, node: str, reason: str, since: float, retry_in_s: float) -> None:
        super().__init__()
        self.node, self.reason, self.since, self.retry_in_s = node, reason, since, retry_in_s


class JobActionFinished(Message):
    """The agent answered a kill, relaunch or launch: a KillVerdict or a LaunchResult."""

    def __init__(self, job: str, op: str, result: Union[KillVerdict, LaunchResult]) -> None:
        super().__init__()
        self.job, self.op, self.result = job, op, result


class JobActionFailed(Message):
    """A kill, relaunch or launch could not be done; ``error`` says why, for the operator."""

    def __init__(self, job: str, op: str, error: str) -> None:
        super().__init__()
        self.job, self.op, self.error = job, op, error


class LogFetched(Message):
    """More of a job's log: the tail (``reset``) or what was appended since."""

    def __init__(self, job: str, text: str, reset: bool, path: Optional[str] = None) -> None:
        super().__init__()
        self.job, self.text, self.reset, self.path = job, text, reset, path


class LogFetchFailed(Message):
    """The log could not be read this time; the follower tries again."""

    def __init__(self, job: str, error: str) -> None:
        super().__init__()
        self.job, self.error = job, error
