"""The watcher: what the agent does beyond sampling, whether or not a console is there.

Each tick (:meth:`Watcher.on_tick`, called from ``Agent.snapshot``) it applies the restart
policies, evaluates thresholds, GPU health and deadlines, writes the timeline and queues
notifications; it adds its alerts to the snapshot's. It answers the ``watch`` and
``events`` requests, takes the fleet's watch settings from ``configure`` and keeps them in
``<home>/watch.json``. Nothing here may stop a tick: a failure is logged (once per kind of
failure) and the tick goes on.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from typing import Any, Callable, Optional

from ..contract.clock import SYSTEM, Clock
from ..contract.vocab import NOTIFY_EVENTS, AlertKind, AuditAction, EventKind
from ..contract import ops
from ..contract.jobs import JobSpec, SpecError
from ..contract.plain import to_plain
from ..contract.wire import Alert, Event, Gpu, Host, JobStatus
from ..sense.health import GpuHealth, HealthReader
from ..jobs.backend import GpuReader, JobBackend
from .checks import Checks, carried_key
from .conditions import Conditions
from ..contract.watching import WatchSettings, agent_args
from .config import WatchConfig
from .events import EventLog
from .heartbeat import Heartbeat, failing_reason
from .idle import IdleAction
from .life import Life, restart_message, started_by
from .outbox import Outbox
from .phases import Phases
from .restarts import RestartEngine
from .supervise import state as supervise_state

log = logging.getLogger("agents")

# the audit log's actions that go into the timeline too
_ACTIONS = frozenset({AuditAction.LAUNCH, AuditAction.RELAUNCH, AuditAction.KILL, AuditAction.KILL_PID,
                      AuditAction.ADOPT, AuditAction.ADOPT_ENDED, AuditAction.ADOPT_PID, AuditAction.RESTART,
                      AuditAction.RESTART_GAVE_UP, AuditAction.KILL_RESUME})


class Watcher:
    def __init__(self, home: Path, node: str, jobs: JobBackend, gpu: GpuReader, detached: bool = False,
                 clock: Clock = SYSTEM) -> None:
        self.home, self.node, self.jobs, self.gpu = Path(home), node, jobs, gpu
        self.clock = clock
        self.detached = detached
        self.config = WatchConfig.load(self.home)
        self.events_log = EventLog(self.home, node)
        self.outbox = Outbox(self.home, on_event=self._note, clock=clock)
        self.restarts = RestartEngine(jobs, self.emit, clock=clock)
        self.phases = Phases(jobs, self.emit, lambda name: self.restarts.state(name).gave_up)
        self.conditions = Conditions(self.home, self.emit)
        self.checks = Checks(node, held=lambda key: key in self.conditions.active)
        self.idle = IdleAction(self.home, node, self.emit)
        self._health: Optional[HealthReader] = None  # the reader, made at the first tick (_health_made)
        self._health_made = False
        self._failed: set[str] = set()
        self.successor: Optional[subprocess.Popen[bytes]] = None  # the detached agent this one started to take over
        self.consoles: Callable[[], int] = lambda: 0  # how many consoles are connected (the agent sets it)
        if self.config.jobs and not jobs.declared():  # the last console's fleet: known without a console
            try:
                jobs.configure([JobSpec.from_dict(d) for d in self.config.jobs], self.config.fleet or "")
            except SpecError as exc:
                log.warning("watch: the saved job specs in %s do not load: %s", self.home / "watch.json", exc)
        jobs.on_audit(self._on_audit)
        self.outbox.serve(self.config.notify)
        self.heartbeat = Heartbeat(node, clock=clock)
        self.agent_argv: list[str] = ["--node", node]  # the agent's arguments (start.py sets them all)
        self.heartbeat.serve(self.config.heartbeat, self.config.watching)
        self.life = Life(self.home)
        self._living = False  # begin() ran: this agent serves the node (not --once)

    def begin(self) -> None:
        """This agent now serves the node (its loop runs): a watcher that died before it is
        written into the timeline and notified (watch/life.py), then this one's own note."""
        try:
            dead = self.life.previous()
            if dead is not None:
                now = self.clock.time()
                adopted = [n for n in self.jobs.names() if (f := self.jobs.facts(n)) is not None and f.state.alive]
                who = started_by(self.detached)
                self.emit(EventKind.WATCHER_RESTARTED, restart_message(dead, now, who, len(adopted)),
                          down_from=dead["alive_at"], down_to=now, down_s=round(now - dead["alive_at"], 1),
                          restarted_by=who, dead_pid=dead.get("pid"), adopted=adopted)
            else:
                started_by(self.detached)  # out of the environment, whoever it was
            self._living = True
            self.life.alive(self.clock.time(), self.config.watching)
        except Exception as exc:  # noqa: BLE001 -- never stops the agent
            self._failure("life", exc)

    # ------------------------------------------------------------ events

    def emit(self, kind: EventKind, message: str, job: Optional[str] = None, gpu: Optional[int] = None,
             key: Optional[str] = None, notify: bool = True, **details: Any) -> Event:
        """One line in the timeline; queued for every target that wants it when ``notify``."""
        event = self.events_log.add(kind, message, job=job, gpu=gpu, key=key, **details)
        if notify and kind in NOTIFY_EVENTS and self.config.notify:
            self.outbox.put(self.config.notify, to_plain(event))
        return event

    def _note(self, kind: EventKind, message: str, **kw: Any) -> None:
        self.emit(kind, message, notify=False, **kw)

    def _on_audit(self, action: AuditAction, job: Optional[str], entry: dict[str, Any]) -> None:
        if action not in _ACTIONS:
            return
        what = entry.get("message") or entry.get("reason") or ""
        extra = {k: entry[k] for k in ("pid", "attempt", "exit_code", "state") if entry.get(k) is not None}
        self.emit(EventKind.ACTION, f"{action} {job or ''}{': ' + str(what) if what else ''}".strip(), job=job,
                  notify=False, action=action.value, **extra)

    # ------------------------------------------------------------ each tick

    def job_fields(self, name: str, spec: Optional[JobSpec]) -> dict[str, Any]:
        try:
            fields = self.restarts.fields(name, spec)
            waiting = self.phases.notes.get(name)
            return {**fields, "waiting": waiting} if waiting else fields
        except Exception as exc:  # noqa: BLE001
            self._failure("job_fields", exc)
            return {}

    def on_tick(self, now: float, gpus: list[Gpu], jobs: list[JobStatus], host: Optional[Host],
                changes: dict[str, Optional[float]], specs: dict[str, JobSpec], alerts: list[Alert]) -> list[Alert]:
        """The restart policies and the checks; the alerts to add to the snapshot."""
        if self._living:
            self.life.alive(now, self.config.watching)
        try:
            self.restarts.tick(now, jobs, changes)
        except Exception as exc:  # noqa: BLE001 -- the tick goes on
            self._failure("restarts", exc)
        try:
            self.phases.tick(now)
        except Exception as exc:  # noqa: BLE001 -- the tick goes on
            self._failure("phases", exc)
        try:
            self.idle.tick(now, gpus, jobs, self.config.idle_action, self.config.alerts.idle_paid_s)
        except Exception as exc:  # noqa: BLE001 -- the tick goes on
            self._failure("idle_action", exc)
        try:
            health = self._read_health()
            now_true, once = self.checks.evaluate(now, gpus, jobs, host, alerts, health, self.config.alerts, specs,
                                                  self.config.price_per_hour)
            repeat = self.config.alerts.repeat_s
            self.conditions.update(now, now_true, repeat)
            for c in once:
                self.conditions.once(now, c, repeat)
            # each alert with when its condition came up on this node (kept in watch-state.json)
            shown = [(self.conditions.began(c.key), c) for c in now_true] + self.checks.shown(now)
            out = [Alert(c.alert, c.message, job=c.job, gpu=c.gpu, per_hour=c.per_hour, since=t)
                   for t, c in shown if c.alert is not None]
            for n in self.restarts.gave_up():
                st = self.restarts.state(n)
                out.append(Alert(AlertKind.GAVE_UP, f"job {n}: restarts given up ({st.note})", job=n,
                                 since=st.gave_up_at))
            hb = self.config.heartbeat
            self.heartbeat.set_failing(failing_reason(alerts + out, on_quality=hb is not None and hb.on_quality))
            return out
        except Exception as exc:  # noqa: BLE001
            self._failure("checks", exc)
            return []

    def began(self, alert: Alert) -> Optional[float]:
        """Since when an alert of agents/node/alerts.py is up, where the watcher carries it as a
        condition (kept across a new agent); None where it does not."""
        key = carried_key(alert)
        return self.conditions.began(key) if key is not None else None

    def _read_health(self) -> list[GpuHealth]:
        if not self._health_made:
            self._health_made = True
            try:
                self._health = self.gpu.health_reader()
            except Exception as exc:  # noqa: BLE001
                self._failure("health", exc)
        return self._health.read() if self._health is not None else []

    def _failure(self, what: str, exc: BaseException) -> None:
        if what not in self._failed:
            self._failed.add(what)
            log.exception("watch: %s failed (%s); the tick goes on, this is logged once", what, exc)

    # ------------------------------------------------------------ requests

    def configure(self, settings: Optional[WatchSettings], jobs: list[dict[str, Any]]) -> None:
        """``configure``'s ``watch`` part (a fleet file's [[notify]] and [alerts]); a console
        without a fleet file sends none and changes nothing here."""
        if settings is None:
            return
        self.config.apply(settings, jobs)
        self.config.save(self.home)
        self.outbox.serve(self.config.notify)
        self.heartbeat.serve(self.config.heartbeat, self.config.watching)

    def ack(self, op: ops.Ack) -> ops.Acked:
        """An operator acknowledged a job that gave up: the alert (and the heartbeat's /fail)
        clears at the next tick; the job stays as it is until it is launched again."""
        if not self.jobs.knows(op.job):
            raise ValueError(f"no job {op.job!r} on node {self.node}")
        cleared, message = self.restarts.ack(op.job)
        if cleared:
            self.jobs.audit(AuditAction.ACK, op.job, message=message)
            self.emit(EventKind.ACKNOWLEDGED, f"job {op.job}: {message}", job=op.job)
        return ops.Acked(job=op.job, cleared=cleared, message=message)

    def note(self, op: ops.Note) -> ops.Noted:
        """An operator's note (`gpudeck note`): a ``note`` event, notified only when asked."""
        notified = op.notify and any(t.wants(EventKind.NOTE) for t in self.config.notify)
        details: dict[str, Any] = {"by": op.by} if op.by else {}
        event = self.emit(EventKind.NOTE, op.text.strip(), job=op.job, notify=op.notify, **details)
        return ops.Noted(node=self.node, seq=event.seq, t=event.t, notified=notified)

    def events(self, op: ops.ReadEvents) -> ops.EventPage:
        seq = self.events_log.seq  # before the read: a follower asks from here next time, missing nothing
        return ops.EventPage(node=self.node, seq=seq, events=self.events_log.read(op.since, op.after_seq, op.limit))

    def watch(self, op: ops.Watch) -> ops.WatchStatus:
        if op.on is not None:
            if op.on and op.node_args is not None:  # the fleet file's node keys now: the next watcher's
                self.config.agent_args = agent_args(list(op.node_args))
            registered = self._supervise(op.on, op.supervise)
            if op.on != self.config.watching:
                self.config.watching, self.config.since = op.on, self.clock.time() if op.on else None
                self.emit(EventKind.WATCH, f"watch {'started' if op.on else 'stopped'} (agent pid {os.getpid()})"
                          + (f"; {registered}" if registered else ""), notify=False)
                if not op.on:  # no longer watched: an end after this is no watcher's death
                    self.life.stopped()
            self.config.save(self.home)
            self.heartbeat.serve(self.config.heartbeat, self.config.watching)
            if op.on and self.detached and self.stale():
                self._replace()
        return self.status()

    def stale(self) -> bool:
        """Whether this agent runs with other arguments than the fleet file's last `watch start`."""
        want = self.config.agent_args
        return want is not None and want != agent_args(self.agent_argv)

    def _replace(self) -> None:
        """This detached watcher has stale settings: a new one, started with the fleet file's,
        takes the node over from it (a handover: its jobs are adopted, nothing is restarted)."""
        if self.successor is not None and self.successor.poll() is None:
            return
        from .daemon import spawn_detached
        try:
            self.successor = spawn_detached(self.home, self.config.agent_args or [], started_by="watch start",
                                            replaces=os.getpid())
        except OSError as exc:
            raise ValueError(f"'watch': cannot start a watcher with the new settings: {exc}") from None
        log.info("new agent settings (%s): the watcher pid %d takes over with them",
                 " ".join(self.config.agent_args or []), self.successor.pid)

    def _supervise(self, on: bool, wanted: Any) -> str:
        """Register the watcher with the node's supervisor (on), or remove what was registered
        (off); what was done, for the timeline. A supervisor asked for that does not work here is
        a ValueError, and nothing changes."""
        from . import supervise

        if not on:
            removed = supervise.remove(self.home)
            self.config.supervisor = None
            return f"removed its {' and '.join(removed)} entry" if removed else ""
        kind, passed = supervise.choose(wanted if isinstance(wanted, str) else "auto")
        if kind != self.config.supervisor:
            supervise.remove(self.home)
        try:
            did = supervise.install(kind, self.home, self.config.agent_args if self.config.agent_args is not None
                                    else self.agent_argv)
        except OSError as exc:
            raise ValueError(f"'watch': cannot register the watcher with {kind}: {exc}") from None
        self.config.supervisor = kind
        return f"supervised by {did}" + (f" ({passed})" if passed else "")

    def status(self) -> ops.WatchStatus:
        jobs = []
        for name in self.jobs.names():
            spec = self.jobs.spec_of(name)
            fields = self.restarts.fields(name, spec) if spec is not None else {}
            jobs.append(ops.WatchedJob(name=name, **fields, restart_on_stall=spec.restart_on_stall if spec else None,
                                       deadline=spec.deadline if spec else None))
        return ops.WatchStatus(
            node=self.node, pid=os.getpid(), watching=self.config.watching, detached=self.detached,
            since=self.config.since, fleet=self.config.fleet, log=str(self.home / "watch.log"),
            supervisor=supervise_state(self.config.supervisor, self.home), heartbeat=self.heartbeat.status(),
            notify=[t.label for t in self.config.notify], outbox=self.outbox.status(), alerts=self.config.alerts,
            active=sorted(self.conditions.active), jobs=jobs, consoles=self.consoles(),
            args=agent_args(self.agent_argv), want_args=self.config.agent_args)

    # ------------------------------------------------------------ lingering

    def keep_running(self, argv: list[str]) -> bool:
        """The last console left: whether this agent goes on. A watching node keeps one: this
        one when it is the detached watcher; otherwise it starts one (which takes over from
        it, see daemon.py) and ticks on until it does."""
        self.config = WatchConfig.load(self.home)  # `watch stop` from another agent's era, or by hand
        if not self.config.watching:
            return False
        if self.detached:
            return True
        if self.config.supervisor == "systemd":  # the unit is the watcher: systemd starts it, not us
            from .supervise import systemd_start
            if systemd_start(self.home):
                log.info("the last console left; the systemd unit's watcher takes over")
                return True
        if self.successor is None or self.successor.poll() is not None:
            from .daemon import spawn_detached
            try:
                self.successor = spawn_detached(self.home, self.config.agent_args
                                                if self.config.agent_args is not None else argv)
            except OSError as exc:
                log.error("watch: cannot start the detached watcher in %s: %s; this agent stays instead",
                          self.home, exc)
                self.detached = True
                return True
            log.info("the last console left; the detached watcher (pid %d) takes over", self.successor.pid)
        return True

    def close(self) -> None:
        self.life.stopped()  # a clean end: the next agent reports no death
        self.outbox.quiesce()  # a message under way is answered and removed before this agent goes
        self.heartbeat.stop()

