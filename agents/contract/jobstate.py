"""A job's ``state.json`` in its directory on the node (``<home>/jobs/<name>/``): what the local
backend knows of the job between agents (its attempt, pid, state, the kill under way, the
attempts before). :func:`read_state` is its one reader; the supervisor writes it
(agents/jobs/supervisor.py)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from .vocab import JobState
from .plain import ProtocolError, from_dict, to_plain
from .wire import AttemptSpan, KillVerdict

STATE_FILE = "state.json"

MAX_ATTEMPTS_KEPT = 500  # a job's attempts kept in its state.json (the spend of older ones is not counted)


@dataclass
class JobRecord:
    """state.json: what the supervisor knows of a job between agents."""

    name: str
    state: JobState = JobState.PENDING
    attempt: int = 0
    pid: Optional[int] = None
    pgid: Optional[int] = None
    create_time: Optional[float] = None
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    exit_code: Optional[int] = None
    kill_requested: bool = False
    kill_started_at: Optional[float] = None  # a kill under way: when it began (unix time) ...
    kill_grace_s: Optional[float] = None  # ... and its grace; an agent that dies mid-kill leaves both
    last_kill: Optional[KillVerdict] = None
    argv: list[str] = field(default_factory=list)  # the command line of this attempt
    start_ticks: Optional[int] = None  # the leader's start in clock ticks since boot (killing.start_ticks)
    token: Optional[str] = None  # in the environment of every process of the attempt (contain.py)
    cgroup: Optional[str] = None  # the attempt's cgroup, in cgroup mode
    first_started_at: Optional[float] = None  # the run's first start (first_start_of): what plans and costs count from
    adopted: bool = False  # this attempt is a process gpudeck did not start (supervisor.adopt_process)
    fenced: Optional[str] = None  # state fenced: where the job went ("the job moved to node b at …")
    gpus: int = 0  # the GPUs this attempt holds (its spec's, at its launch): its spend (console/cost.py)
    past: list[AttemptSpan] = field(default_factory=list)  # the attempts before this one, the last MAX_ATTEMPTS_KEPT

    def span(self) -> Optional[AttemptSpan]:
        """This attempt as a span; None before the first launch."""
        if not self.attempt:
            return None
        return AttemptSpan(attempt=self.attempt, started_at=self.started_at, ended_at=self.ended_at,
                           state=self.state, exit_code=self.exit_code, gpus=self.gpus)

    def spans(self) -> list[AttemptSpan]:
        """Every attempt kept, this one last."""
        now = self.span()
        return [*self.past, now] if now is not None else list(self.past)

    def carried(self) -> list[AttemptSpan]:
        """What the next attempt's record keeps: these spans, this one's included (one never
        settled, its end not known, as lost with no end: it counts for no dollars)."""
        spans = self.spans()
        if spans and spans[-1].state is not None and spans[-1].state.alive:
            import dataclasses
            spans[-1] = dataclasses.replace(spans[-1], state=JobState.LOST, ended_at=None)
        return spans[-MAX_ATTEMPTS_KEPT:]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = to_plain(self)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "JobRecord":
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in d.items() if k in known}
        values["state"] = JobState(values.get("state", JobState.PENDING))
        kill = values.get("last_kill")
        try:
            values["last_kill"] = from_dict(KillVerdict, kill) if isinstance(kill, dict) else None
        except ProtocolError:  # a verdict of a form this version does not read: not shown, not fatal
            values["last_kill"] = None
        past = []
        for span in values.get("past") or []:
            try:
                past.append(from_dict(AttemptSpan, span))
            except ProtocolError:  # a span this version does not read: left out of the spend, not fatal
                continue
        values["past"] = past
        return cls(**values)


def read_state(path: "str | os.PathLike[str]") -> JobRecord:
    """The record in a job's state.json; ValueError says what is wrong with it (OSError: it
    cannot be read). Fields this version does not know are left, as a verdict or an attempt of a
    form it does not read."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    try:
        return JobRecord.from_dict(doc)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
