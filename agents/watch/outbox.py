"""Notifications that survive the watcher: ``<home>/outbox/``, one JSON file per message and
target, written atomically, removed (durably) once the target took it.

One sender thread per target posts that target's messages oldest first, one at a time, so
they arrive in order; a target that fails is retried with backoff (1 s doubling to 5 min)
and holds up only itself; the tick never waits for any of them. A watcher killed with
kill -9 leaves its pending files; the next one sends them. The outbox is bounded: past
``MAX_PENDING`` files a target's oldest message is dropped, and the log says so.

A message is removed after the receiver answered 2xx; a kill in between those two would send
it again, so each carries an id (``X-Gpudeck-Message-Id`` and ``id`` in the JSON format) a
receiver can use to drop a repeat. An agent that exits on its own (a newer agent taking the
node over: every time the last console leaves, the detached watcher does) first lets a message
under way be answered and removed, for at most ``QUIESCE_S`` (:meth:`Outbox.quiesce`), so
the one taking over does not send it again.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

from ..contract.ops import OutboxStatus, TargetStatus
from ..contract.vocab import EventKind
from ..contract.watching import NotifyTarget
from ..contract.notify import deliver
from ..contract.atomic import atomic_write_json, fsync_dir
from ..contract.clock import SYSTEM, Clock

log = logging.getLogger("agents")

OUTBOX = "outbox"
MAX_PENDING = int(os.environ.get("GPUDECK_OUTBOX_MAX", "1000"))
BACKOFF_MIN_S, BACKOFF_MAX_S = 1.0, 300.0
QUIESCE_S = 5.0  # an exiting agent waits this long at most for a message under way (the takeover's grace is 10 s)


class Outbox:
    def __init__(self, home: Path, on_event: Optional[Callable[..., Any]] = None, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.dir = Path(home) / OUTBOX
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.on_event = on_event  # (EventKind, message, **details): the timeline
        self._senders: dict[str, "Sender"] = {}
        self._lock = threading.Lock()
        self._last = 0

    # ------------------------------------------------------------ files

    def _name(self, target_id: str) -> str:
        with self._lock:
            self._last = max(self._last + 1, time.time_ns())
            return f"{self._last:020d}-{target_id}.json"

    def pending(self, target_id: Optional[str] = None) -> list[Path]:
        try:
            names = sorted(n for n in os.listdir(self.dir) if n.endswith(".json")
                           and (target_id is None or n.endswith(f"-{target_id}.json")))
        except OSError:
            return []
        return [self.dir / n for n in names]

    def put(self, targets: list[NotifyTarget], event: dict[str, Any]) -> int:
        """Queue ``event`` for each target that wants it; returns how many."""
        n = 0
        for target in targets:
            if not target.wants(EventKind(event["kind"])):
                continue
            mine = self.pending(target.id)
            for old in mine[:max(0, len(mine) - MAX_PENDING + 1)]:
                log.warning("outbox: %d messages wait for %s; dropping the oldest", len(mine), target.label)
                old.unlink(missing_ok=True)
            try:
                atomic_write_json(self.dir / self._name(target.id),
                                  {"id": uuid.uuid4().hex, "target": target.id, "event": event})
            except OSError as exc:
                log.warning("outbox: cannot queue a %s message for %s: %s", event["kind"], target.label, exc)
                continue
            n += 1
            sender = self._senders.get(target.id)
            if sender is not None:
                sender.wake.set()
        return n

    def done(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        fsync_dir(str(self.dir))

    # ------------------------------------------------------------ senders

    def serve(self, targets: list[NotifyTarget]) -> None:
        """One sender per target from now on; senders of targets no longer configured stop
        (their messages stay on disk, bounded, for a configuration that names them again)."""
        wanted = {t.id: t for t in targets}
        for tid, sender in list(self._senders.items()):
            if tid not in wanted or sender.target != wanted[tid]:
                sender.stop()
                del self._senders[tid]
        for tid, target in wanted.items():
            if tid not in self._senders:
                self._senders[tid] = Sender(self, target)

    def stop(self) -> None:
        for sender in self._senders.values():
            sender.stop()
        self._senders.clear()

    def quiesce(self, timeout_s: float = QUIESCE_S) -> bool:
        """Before this process exits: no sender starts another message, and a message under way
        has up to ``timeout_s`` to be answered and removed. True when no sender is left running
        (False: one was cut off; its message stays, and the next agent sends it again with its id)."""
        senders = list(self._senders.values())
        self.stop()
        deadline = time.monotonic() + timeout_s
        for sender in senders:
            sender.join(max(0.0, deadline - time.monotonic()))
        return not any(sender.running for sender in senders)

    def status(self) -> OutboxStatus:
        per = {tid: len(self.pending(tid)) for tid in self._senders}
        return OutboxStatus(pending=sum(per.values()), targets=[
            TargetStatus(target=s.target.label, pending=per.get(tid, 0), failing=s.failing,
                         in_flight_s=round(self.clock.time() - s.in_flight_since, 1) if s.in_flight_since else None)
            for tid, s in self._senders.items()])


def next_backoff(backoff: float) -> float:
    """The wait before a failed target's next attempt, after a wait of ``backoff`` (0 after a
    success): 1 s, doubling, at most 5 min."""
    return min(max(BACKOFF_MIN_S, backoff * 2), BACKOFF_MAX_S)


class Sender:
    """A target's thread: its oldest message, until it is taken; then the next."""

    def __init__(self, outbox: Outbox, target: NotifyTarget) -> None:
        self.outbox, self.target = outbox, target
        self.wake = threading.Event()
        self._stop = threading.Event()
        self.failing: Optional[str] = None  # why the last attempt failed, while it does
        self.in_flight_since: Optional[float] = None  # a request under way since
        self._thread = threading.Thread(target=self._run, name=f"notify-{target.id}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.wake.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            files = self.outbox.pending(self.target.id)
            if not files:
                self.wake.wait(30.0)
                self.wake.clear()
                continue
            path = files[0]
            try:
                msg = json.loads(path.read_text())
                event, mid = msg["event"], msg["id"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("outbox: %s cannot be read (%s); dropped", path.name, exc)
                path.unlink(missing_ok=True)
                continue
            if self._stop.is_set():  # stopped meanwhile: this message is the next agent's
                break
            self.in_flight_since = self.outbox.clock.time()
            try:
                why = deliver(self.target, event, mid)
            finally:
                self.in_flight_since = None
            if why is None:
                self.outbox.done(path)
                backoff, self.failing = 0.0, None
                self._note(EventKind.NOTIFIED, f"{event['kind']} sent to {self.target.label}", event)
                continue
            if self.failing is None:  # once per outage in the log and the timeline, not every retry
                log.warning("notify: %s failed: %s; retrying with backoff", self.target.label, why)
                self._note(EventKind.NOTIFY_FAILED, f"{event['kind']} to {self.target.label}: {why} (retrying)", event)
            self.failing = why
            backoff = next_backoff(backoff)
            self._stop.wait(backoff)

    def _note(self, kind: EventKind, message: str, event: dict[str, Any]) -> None:
        if self.outbox.on_event is not None:
            try:
                self.outbox.on_event(kind, message, job=event.get("job"), gpu=event.get("gpu"),
                                     of=event.get("seq"))
            except Exception:  # noqa: BLE001 -- the timeline must never stop a sender
                log.exception("outbox: cannot record %s", kind)
