"""Restart policies: a job that ends by itself (or stalls) is started again, with backoff,
within a budget, never while an operator's kill or launch is under way.

Per job, in ``<home>/jobs/<name>/restarts.json`` (so a new watcher goes on counting):
restarts so far, when the next is due, and whether it gave up. The rules:

- ``restart = "on-failure"``: a job that failed (non-zero exit) or was lost; ``"always"``:
  also one that exited 0. A job an operator killed is never restarted, nor a generate or
  extract job that exited 4 (its verdict on its data: contract/jobs.py ``final_exit``).
- Before restart *n* (counting from 0) it waits ``restart_backoff_s * 2**n``, at most 10 min.
- A restart whose attempt made no progress (its done count did not move since the attempt
  began) counts twice: a crash loop spends the budget twice as fast. Past ``max_restarts``
  it gives up, says so once (``gave_up``) and leaves the job as it is.
- ``restart_on_stall``: a running job whose progress has not moved that long is killed with
  the verified kill and restarted at once (the same budget); not while it says it is
  compiling or loading (its progress.json's ``phase``), up to 30 min of that phase
  (agents/contract/stall.py).
- Every restart is the backend's ``relaunch`` (the next attempt, which resumes from its own
  done-set), written to the audit log with its reason. An operator's own launch starts
  the count afresh.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..contract.vocab import AuditAction, EventKind, JobState, RestartPolicy
from ..contract.jobs import JobSpec, final_exit
from ..contract.stall import engine_quiet_since, quiet_since
from ..contract.wire import JobStatus
from ..contract.clock import SYSTEM, Clock
from ..jobs.backend import JobBackend, JobError

log = logging.getLogger("agents")

BACKOFF_CAP_S = 600.0
STATE_FILE = "restarts.json"


@dataclass
class RestartState:
    restarts: int = 0  # counted: a restart without progress counts 2
    count: int = 0  # restarts made
    next_at: Optional[float] = None  # when the next restart is due (unix time)
    reason: Optional[str] = None  # why it is due
    weight: int = 1  # what the due restart will count
    gave_up: bool = False
    gave_up_at: Optional[float] = None  # when it gave up (unix time): its alert's since
    acked: Optional[float] = None  # when an operator acknowledged the gave_up (`gpudeck ack`): no alert since
    note: Optional[str] = None
    attempt: int = 0  # the attempt this state last saw
    ours: int = 0  # the attempt our last restart started
    done_at_start: Optional[int] = None  # progress when that attempt was first seen
    seen_state: Optional[str] = None  # the job's state at the last tick (transitions make events)


class RestartEngine:
    def __init__(self, jobs: JobBackend, emit: Callable[..., Any], started_at: Optional[float] = None,
                 clock: Clock = SYSTEM) -> None:
        self.jobs = jobs
        self.emit = emit  # (EventKind, message, job=..., notify=..., **details)
        self.clock = clock  # the tick brings its own now; an operator's ack reads this one
        self.started_at = started_at or clock.time()
        self._states: dict[str, RestartState] = {}
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    # ------------------------------------------------------------ state on disk

    def state(self, name: str) -> RestartState:
        st = self._states.get(name)
        if st is None:
            st = RestartState()
            try:
                doc = self.jobs.read_note(name, STATE_FILE)
                if doc is not None:
                    st = RestartState(**{k: v for k, v in doc.items() if k in RestartState.__dataclass_fields__})
            except (OSError, ValueError, TypeError) as exc:
                log.warning("job %s: unreadable %s (%s); counting restarts from 0", name, STATE_FILE, exc)
            self._states[name] = st
        return st

    def _save(self, name: str, st: RestartState) -> None:
        # a full disk: an alert (agents/sense/writes.py), the state stays in memory
        self.jobs.write_note(name, STATE_FILE, dataclasses.asdict(st))

    def fields(self, name: str, spec: Optional[JobSpec]) -> dict[str, Any]:
        """The restart fields of the job's JobStatus."""
        if spec is None:
            return {}
        policy = spec.restart_policy
        if policy is RestartPolicy.NEVER and name not in self._states:
            return {"restart": policy}
        st = self.state(name)
        return {"restart": policy, "restarts": st.restarts, "max_restarts": spec.max_restarts,
                "next_restart_at": st.next_at, "restart_note": st.note}

    # ------------------------------------------------------------ each tick

    def tick(self, now: float, jobs: list[JobStatus], changes: dict[str, Optional[float]]) -> None:
        for j in jobs:
            if j.state is JobState.PENDING:
                continue
            spec = self.jobs.spec_of(j.name)
            with self._lock:
                st = self.state(j.name)
                dirty = self._follow(j, st)
                if spec is not None and j.name not in self._busy and not st.gave_up:
                    dirty = self._apply(j, spec, st, now, changes.get(j.name)) or dirty
                if dirty:
                    self._save(j.name, st)

    def _follow(self, j: JobStatus, st: RestartState) -> bool:
        """A new attempt, a new state: the events they make. True when ``st`` changed."""
        done = j.progress.done if j.progress is not None else None
        dirty = False
        if j.attempt != st.attempt:
            if j.attempt != st.ours and st.attempt:  # an operator launched it: a fresh budget
                st.restarts = st.count = 0
                st.gave_up, st.gave_up_at, st.acked, st.note = False, None, None, None
            elif j.attempt == st.ours and st.next_at is not None and j.name not in self._busy:
                # our restart started this attempt, but its watcher died before it wrote so
                # (a kill -9 between the relaunch and its save): count it now, never reset
                st.count += 1
                st.restarts += st.weight
                st.note = f"restarted: {st.reason or 'restart'} (counted by the next watcher)"
            st.attempt, st.done_at_start, st.next_at = j.attempt, done, None
            dirty = True
        elif st.done_at_start is None and done is not None:
            st.done_at_start, dirty = done, True
        state = j.state.value
        if state == st.seen_state or j.state is JobState.STARTING:
            return dirty
        first = st.seen_state is None
        old, st.seen_state = st.seen_state, state
        fresh = not first or (j.ended_at or 0) >= self.started_at - 5  # an old ending is no news
        if fresh:
            self.emit(EventKind.STATE, f"job {j.name}: {old or 'unknown'} -> {state} (attempt {j.attempt})",
                      job=j.name, attempt=j.attempt, state=state)
            how = f"exit code {j.exit_code}" if j.exit_code is not None else "no exit code: lost"
            if j.state is JobState.FENCED:
                self.emit(EventKind.ACTION, f"job {j.name} stopped for good on attempt {j.attempt}, fenced: "
                                            f"{j.fenced or 'it was moved to another node'}; no restart here",
                          job=j.name, attempt=j.attempt, action="fenced")
            elif j.state in (JobState.FAILED, JobState.LOST):
                self.emit(EventKind.DIED, f"job {j.name} died ({how}) on attempt {j.attempt}", job=j.name,
                          attempt=j.attempt, exit_code=j.exit_code)
            elif j.state is JobState.EXITED:
                p = j.progress
                what = f", {p.done}/{p.total} done" if p is not None and p.total is not None else ""
                self.emit(EventKind.FINISHED, f"job {j.name} finished (exit code 0) on attempt {j.attempt}{what}",
                          job=j.name, attempt=j.attempt)
        return True

    def _apply(self, j: JobStatus, spec: JobSpec, st: RestartState, now: float, changed: Optional[float]) -> bool:
        policy = spec.restart_policy
        done = j.progress.done if j.progress is not None else None
        if st.next_at is not None and st.ours == j.attempt + 1 and not j.state.alive:
            # a restart was under way (its kill done, by this watcher's adoption if the one that
            # began it died in the kill's grace) and the relaunch never came: finish it
            self._start(j.name, spec, st, j.attempt)
            return True
        no_progress = done is not None and st.done_at_start is not None and done <= st.done_at_start
        if policy.wants(j.state) and final_exit(spec, j.exit_code):
            # a worker's verdict on its data (extract's audit, generate's min_useful_pct): a new
            # attempt would say the same; never restarted
            note = f"not restarted: exit code {j.exit_code} is the worker's verdict on its data (see its log)"
            if st.note == note:
                return False
            st.note = note
            return True
        if policy.wants(j.state):
            if st.next_at is None:
                how = f"exit code {j.exit_code}" if j.exit_code is not None else "lost, no exit code"
                return self._schedule(j, spec, st, now, f"{j.state.value} ({how})", 2 if no_progress else 1)
            if now >= st.next_at:
                self._start(j.name, spec, st, j.attempt)
            return False
        stall_s = spec.stall_restart_s
        if stall_s and j.state is JobState.RUNNING and j.progress is not None and j.started_at:
            # a job that says it is compiling (or loading) is left alone, up to a cap (contract/stall.py)
            since = quiet_since(j.progress, changed, now, started_at=j.started_at)
        elif stall_s and j.state in (JobState.RUNNING, JobState.STARTING) and j.progress is None:
            since = engine_quiet_since(j.engine, now)  # an engine's load that still moves is never a stall
        else:
            since = None
        if stall_s and since is not None and now - since > stall_s:
            self.emit(EventKind.STALLED, f"job {j.name}: no progress for {now - since:.0f} s "
                                         f"(restart_on_stall {spec.restart_on_stall}): killing and restarting",
                      job=j.name, key=f"stall-restart:{j.name}")
            if self._schedule(j, spec, st, now, f"stalled for {now - since:.0f} s", 2 if no_progress else 1,
                              delay=0.0) and not st.gave_up:
                self._start(j.name, spec, st, j.attempt)
            return True
        return False

    def _schedule(self, j: JobStatus, spec: JobSpec, st: RestartState, now: float, reason: str, weight: int,
                  delay: Optional[float] = None) -> bool:
        if st.restarts + weight > spec.max_restarts:
            st.gave_up, st.gave_up_at, st.next_at = True, now, None
            st.note = f"gave up after {st.count} restart(s): {reason}"
            self.jobs.audit(AuditAction.RESTART_GAVE_UP, j.name, reason=reason, restarts=st.restarts,
                           max_restarts=spec.max_restarts)
            self.emit(EventKind.GAVE_UP, f"job {j.name}: gave up after {st.count} restart(s) "
                                         f"(max_restarts {spec.max_restarts}); last: {reason}", job=j.name)
            return True
        backoff = min(spec.restart_backoff_s * 2 ** st.count, BACKOFF_CAP_S) if delay is None else delay
        st.next_at, st.reason, st.weight = now + backoff, reason, weight
        st.note = f"restart in {backoff:.0f} s: {reason}" if backoff else f"restarting: {reason}"
        return True

    def _start(self, name: str, spec: JobSpec, st: RestartState, attempt: int) -> None:
        """The relaunch, in a thread of its own: a kill may take its grace period."""
        self._busy.add(name)
        st.ours = attempt + 1
        threading.Thread(target=self._relaunch, args=(name, spec, st), name=f"restart-{name}", daemon=True).start()

    def _relaunch(self, name: str, spec: JobSpec, st: RestartState) -> None:
        reason = st.reason or "restart"
        try:
            result = self.jobs.relaunch(name, grace_s=spec.kill_grace_s)
        except (JobError, OSError, ValueError) as exc:
            with self._lock:
                st.count += 1
                st.restarts += st.weight
                st.next_at = None  # scheduled again, with the next backoff, at the next tick
                st.note = f"restart failed: {exc}"
                self._save(name, st)
                self._busy.discard(name)
            self.emit(EventKind.ACTION, f"job {name}: restart failed: {exc}", job=name, notify=False)
            return
        with self._lock:
            st.count += 1
            st.restarts += st.weight
            st.next_at = None
            st.note = f"restarted: {reason}"
            st.ours = result.attempt
            self._save(name, st)
            self._busy.discard(name)
        self.jobs.audit(AuditAction.RESTART, name, reason=reason, attempt=result.attempt, restarts=st.restarts,
                       max_restarts=spec.max_restarts)
        killed = f" after a verified kill ({result.kill.message})" if result.kill is not None else ""
        self.emit(EventKind.RESTARTED, f"job {name} restarted{killed}: attempt {result.attempt}, restart "
                                       f"{st.restarts} of {spec.max_restarts}; reason: {reason}",
                  job=name, attempt=result.attempt, reason=reason)

    def gave_up(self) -> list[str]:
        """The jobs that gave up and that no operator has acknowledged."""
        return [n for n, st in self._states.items() if st.gave_up and st.acked is None]

    def ack(self, name: str) -> tuple[bool, str]:
        """Acknowledge ``name``'s gave_up: (whether this cleared it, what was done). A job that
        has not given up is a ValueError: there is nothing to acknowledge. The job is left as it
        is (given up: no restart); an operator's launch starts a fresh budget as ever."""
        with self._lock:
            st = self.state(name)
            if not st.gave_up:
                raise ValueError(f"job {name!r} has not given up restarting: nothing to acknowledge")
            if st.acked is not None:
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.acked))
                return False, f"gave_up acknowledged already, at {when}"
            st.acked = self.clock.time()
            st.note = f"{st.note or 'gave up'}; acknowledged"
            self._save(name, st)
        return True, "gave_up acknowledged; no restart is made until the job is launched again"
