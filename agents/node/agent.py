"""The node agent: sample once a tick, answer requests, push snapshots as JSON lines, over the
jobs of one backend (agents/jobs/backend.py: the node's own supervisor, or a cluster's Slurm).

Started as ``python -m gpudeck.agents`` (over SSH, or as a local subprocess). It reads requests on
stdin and writes messages on stdout, logs to stderr and opens no port. A second console's
``python -m gpudeck.agents`` relays to it through a Unix socket in its home (agents/node/consoles.py), so
one agent serves every console of the node; it exits when the last of them closes. Jobs it
launched keep running after it exits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Optional

from . import doctor
from ..sense import writes
from ..contract import ops, plain, wire
from ..contract.errors import KindedRefusal, Refusal
from .alerts import AlertClock, node_alerts
from ..sense.engines import EngineScraper
from ..history.ring import HistoryRing
from ..sense.host import HostSampler
from ..contract.vocab import AuditAction, EngineState, JobState
from ..contract.jobs import JobSpec, SpecError
from .consoles import Consoles, Link, Listener
from ..jobs.planwatch import PlanWatch
from ..sense.progress import ProgressTracker
from ..sense.loading import EngineStartups
from ..staging import copies
from ..staging.status import StagingReader
from .promfile import TextfileWriter
from ..contract.plain import to_plain
from ..contract.wire import Alert, Engine, JobStatus, Progress, Reply, Request, Snapshot
from ..jobs.backend import GpuReader, JobBackend, JobError, JobFacts

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("agents")


def _write_stderr_nowait(data: bytes) -> None:
    """A last word on stderr that never blocks (its SSH channel may be dead)."""
    try:
        blocking = os.get_blocking(2)
        os.set_blocking(2, False)
        try:
            os.write(2, data)
        finally:
            os.set_blocking(2, blocking)
    except OSError:
        pass


def make_home(home: Path) -> Path:
    """The agent's state directory, made 0700 (specs may hold secrets in their env)."""
    home = Path(home).expanduser()
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    return home


class Agent:
    """The agent of one node home: its links to consoles, its ticks and its ops table, over the
    jobs of one backend (``jobs``: the node's own supervisor, or a cluster's scheduler; the
    start-up picks it, agents/node/start.py) and the GPUs of this host (``gpu``)."""

    def __init__(self, home: Path, node: str, jobs: JobBackend, gpu: GpuReader, interval_s: float = 1.0,
                 out: Optional[BinaryIO] = None, detached: bool = False, textfile_dir: Optional[str] = None) -> None:
        self.home = make_home(home)
        self.node = node
        self.interval_s = interval_s
        self.out: BinaryIO = out if out is not None else sys.stdout.buffer
        self.started_at = time.time()
        self.gpu = gpu
        self.jobs = jobs
        self.host = HostSampler()
        self.plans = PlanWatch(jobs.workdir)  # each job's plan.json against its progress
        self.history = HistoryRing(3600.0, interval_s, path=self.home / "history.db")  # agents/history/db.py
        self.textfile = TextfileWriter(textfile_dir)  # node_exporter's textfile collector (agents/node/promfile.py)
        self.alert_clock = AlertClock()  # since when each alert is up, where its rule keeps no time
        self.seq = 0
        self._trackers: dict[str, tuple[tuple[Optional[str], Optional[str], Optional[int]], ProgressTracker]] = {}
        self._scrapers: dict[str, EngineScraper] = {}
        self._engines: dict[str, Engine] = {}
        self.startups = EngineStartups(lambda name, file: jobs.workdir(name) / file)  # how far each engine's loading is (agents/sense/loading.py)
        self.stagings = StagingReader(lambda name, file: jobs.workdir(name) / file)  # each job's stage as its staging step reports it
        self._last_rates: dict[str, tuple[Optional[float], Optional[float]]] = {}  # tokens/s, when
        self._scraping: set[str] = set()
        self._http: Optional[httpx.AsyncClient] = None
        self._write_lock = threading.Lock()
        self._pending: set[asyncio.Task[None]] = set()
        self._running = False
        self._stop_reading: Optional[Callable[[], None]] = None
        self._draining = False
        self._now = 0.0  # the tick's time, for the readings of each job (_readings)
        self.consoles: Optional[Consoles] = None  # set by run()
        self.listener: Optional[Listener] = None  # relays on <home>/agent.sock (the lock holder's, bound early)
        self.detached = detached  # the node's watcher: no console of its own (agents/watch/daemon.py)
        self.argv: list[str] = []  # this agent's arguments, for the detached watcher it may start
        from ..watch import Watcher
        self.watch = Watcher(self.home, node, jobs, gpu, detached=detached)
        self.watch.consoles = lambda: len(self.consoles.all()) if self.consoles is not None else 0
        self.answers = self._table()

    # ------------------------------------------------------------ output

    def send(self, msg: wire.Message, to: Optional[Link] = None) -> None:
        """To one link, to every link (the snapshots), or straight to ``out`` when no loop
        runs (``--once``). A watcher with no console encodes nothing: nobody would read it."""
        if to is not None:
            to.send(wire.encode(msg))
            return
        links = self.consoles.all() if self.consoles is not None else []
        if not links and self._running:
            return
        data = wire.encode(msg)
        if not links:
            with self._write_lock:
                self.out.write(data)
                self.out.flush()
        for link in links:
            link.send(data)

    def hello(self) -> wire.Hello:
        return wire.hello(self.node, os.getpid(), self.started_at, str(self.home), self.gpu.error,
                              watching=self.watch.config.watching, detached=self.detached)

    # ------------------------------------------------------------ sampling

    def _tracker(self, name: str, spec: JobSpec, default: str) -> ProgressTracker:
        key = (spec.progress, spec.done_set, spec.total)
        cur = self._trackers.get(name)
        if cur is None or cur[0] != key:
            tracker = ProgressTracker(key[0] or (None if key[1] else default), key[1], key[2])
            # the rate window goes on where the last agent (or the last console's) left it
            horizon = time.time() - tracker.window_s
            tracker.seed([(smp.t, smp.job_done[name], smp.job_tokens.get(name)) for smp in self.history.samples
                          if smp.t >= horizon and name in smp.job_done])
            self._trackers[name] = cur = (key, tracker)
        return cur[1]

    def read_by_console(self) -> bool:
        """Whether a console will read this tick's snapshot: not so in a watcher that no console
        is connected to, whose snapshots go only to the history, the textfile and the watcher's
        checks (none of which reads what is there for the console alone: a job's processes,
        GPU uuids, log path and fleet file, what a relaunch would change, the host's CPU and
        memory)."""
        return not self._running or self.consoles is None or bool(self.consoles.all())

    def job_statuses(self, now: float, for_console: bool = True) -> list[JobStatus]:
        """Every job's row: the backend's, with what this agent reads of a job that runs on this
        host (its progress, engine, restarts and plan)."""
        self._now = now
        return self.jobs.statuses(now, for_console, self._readings if self.jobs.local else None)

    def _readings(self, name: str, spec: Optional[JobSpec], facts: Optional[JobFacts],
                  progress_file: str) -> dict[str, Any]:
        """The fields of a job's JobStatus that this agent reads itself (jobs/backend.py Extras)."""
        now = self._now
        state = facts.state if facts is not None else JobState.PENDING
        progress = self._tracker(name, spec, progress_file).poll(now) if spec else None
        if progress is not None:
            progress = self._honest(name, progress, state.alive, now)
        staging = self.stagings.read(name) if facts is not None and spec is not None and spec.stage else None
        engine = self._engines.get(name) if spec and spec.scrape_url else None
        if staging is not None and staging.active and state is JobState.RUNNING:
            state, engine = JobState.STARTING, None  # its own command has not started yet
        if engine is not None and facts is not None and facts.state.alive:  # the engine starts when its stage is done
            began = staging.ended_at if staging is not None and staging.ended_at else facts.started_at
            engine = self.startups.apply(name, facts.attempt, began, engine, now)
        out = self.watch.job_fields(name, spec)  # a dict of its own, each call
        out.update(self.plans.fields(name, spec, facts, progress, now))
        out["progress"], out["engine"], out["staging"] = progress, engine, staging
        if engine is not None and state is JobState.RUNNING and not engine.state.answers:
            state = JobState.STARTING
        if state is not (facts.state if facts is not None else JobState.PENDING):
            out["state"] = state
        return out

    def _honest(self, name: str, progress: Progress, alive: bool, now: float) -> Progress:
        """A live job's figures as they are (remembered); a job that is not running shows no
        live rate or ETA, only its last live tokens/s and when (kept in the history, so a new
        agent knows them too)."""
        if alive:
            if progress.tokens_per_s is not None:
                self._last_rates[name] = (progress.tokens_per_s, now)
            return progress
        last = self._last_rates.get(name)
        if last is None:
            last = next(((smp.job_tokens_per_s[name], smp.t) for smp in reversed(self.history.samples)
                         if smp.job_tokens_per_s.get(name) is not None), (None, None))
            self._last_rates[name] = last
        return dataclasses.replace(progress, tokens_per_s=None, rate_per_s=None, eta_s=None,
                                   last_tokens_per_s=last[0], last_rate_at=last[1])

    def snapshot(self) -> Snapshot:
        now = time.time()
        jobs_ = self.jobs
        jobs_.refresh()
        for_console = self.read_by_console()
        jobs = self.job_statuses(now, for_console)
        seen = jobs_.read_gpus(jobs)
        host = self.host.sample(jobs_.disk_paths(), figures=for_console)
        alerts: list[Alert] = []
        if jobs_.local:  # the node's rules, over its own processes (a scheduler keeps its own)
            changes = {name: t.last_change for name, (_, t) in self._trackers.items()}
            specs = {n: s for n in jobs_.names() if (s := jobs_.spec_of(n))}
            alerts = node_alerts(seen.gpus, jobs, specs, host, changes, now)
            alerts += self.watch.on_tick(now, seen.gpus, jobs, host, changes, specs, alerts)
            alerts += writes.alerts()  # files that could not be written: a full disk is an alert
            alerts = self.alert_clock.stamp(alerts, now, self.watch.began)
        self.seq += 1
        contained = jobs_.containment()
        snap = Snapshot(node=self.node, seq=self.seq, t=now, host=host, gpus=seen.gpus, jobs=jobs,
                        alerts=alerts, gpu_error=seen.error, containment=contained.mode if contained else None,
                        gpus_simulated=seen.simulated, cluster=jobs_.cluster_info())
        self.history.record(snap)
        self.textfile.write(snap)
        return snap

    def scrape_engines(self) -> None:
        """Start a scrape for each live engine whose last scrape has finished (tasks on the
        running loop)."""
        if not self.jobs.local:  # a scheduler's engines run on hosts this agent does not reach
            return
        for name in self.jobs.names():
            spec = self.jobs.spec_of(name)
            url = spec.scrape_url if spec else None
            if url is None and name not in self._engines:  # no engine (most jobs): nothing to do
                continue
            facts = self.jobs.facts(name)
            if not url or facts is None or not facts.state.alive:
                if name in self._engines and (facts is None or not facts.state.alive):
                    self._engines.pop(name, None)
                    self.startups.forget(name)
                continue
            if name in self._scraping:
                continue
            scraper = self._scrapers.get(name)
            # a scraper is one attempt's: a relaunched engine's tokens/s counts none of the last one's
            if scraper is None or scraper.url != url or scraper.attempt != facts.attempt:
                scraper = self._scrapers[name] = EngineScraper(url)
                scraper.attempt = facts.attempt
            self._scraping.add(name)
            asyncio.get_running_loop().create_task(self._scrape_one(name, scraper))

    async def _scrape_one(self, name: str, scraper: EngineScraper) -> None:
        try:
            if self._http is None:
                import httpx  # here: most nodes scrape no engine, and the import costs a start
                self._http = httpx.AsyncClient(timeout=httpx.Timeout(2.0, connect=1.0))
            self._engines[name] = await scraper.poll(self._http)
        except Exception as exc:  # never let one engine stop the agent; report it on the job
            log.warning("job %s: scrape of %s failed: %s", name, scraper.url, exc)
            self._engines[name] = Engine(url=scraper.url, state=EngineState.FAILED, error=f"{type(exc).__name__}: {exc}")
        finally:
            self._scraping.discard(name)

    # ------------------------------------------------------------ requests

    def _table(self) -> dict[type[ops.Op[Any]], Callable[[Any], Any]]:
        """The one table of what answers each op: the agent, its backend and its watcher."""
        jobs = self.jobs
        return {
            ops.Status: lambda op: self.snapshot(),
            ops.Configure: self._configure,
            ops.ReadHistory: lambda op: self.history.read(op, self.node),
            ops.ReadEvents: self.watch.events,
            ops.Watch: self.watch.watch,
            ops.Ack: self.watch.ack,
            ops.Note: self.watch.note,
            ops.Launch: lambda op: jobs.launch(op.job),
            ops.Kill: lambda op: jobs.kill(op.job, op.grace_s),
            ops.Relaunch: lambda op: jobs.relaunch(op.job, op.grace_s),
            ops.KillPid: lambda op: jobs.kill_pid(op.pid, op.grace_s),
            ops.Adopt: lambda op: jobs.adopt(op.pid, op.job, op.started_at, op.progress_file, op.kind),
            ops.Logs: lambda op: jobs.logs(op.job, op.lines, op.offset),
            ops.Doctor: lambda op: doctor.examine(op, jobs, self.gpu, self.node, self.home),
            ops.Unstage: lambda op: copies.unstage(self.home, op.paths, lambda to: copies.live_user(jobs, to)),
        }

    def handle(self, req: Request, op: ops.Op[Any]) -> Reply:
        """``op`` (``req``'s, its arguments checked by ``ops.op_of``) answered from the table."""
        try:
            result = self.answers[type(op)](op)
            if not isinstance(result, op.Result):  # a bug of ours, said as one
                raise TypeError(f"{op.name!r} answered a {type(result).__name__}, not a {op.Result.__name__}")
            return Reply(id=req.id, ok=True, result=to_plain(result))
        except (JobError, SpecError, ValueError, TypeError, OSError) as exc:
            kinded = exc if isinstance(exc, KindedRefusal) else None
            return Reply(id=req.id, ok=False, error=str(exc),
                         usage=isinstance(exc, Refusal) or bool(kinded and kinded.usage),
                         refusal=kinded.kind if kinded else getattr(exc, "refusal", None))
        except Exception as exc:  # noqa: BLE001 -- a bug: still an answer, and the traceback in the log
            log.exception("request %s failed", req.op)
            return Reply(id=req.id, ok=False, error=f"the agent failed on {req.op!r}: {type(exc).__name__}: {exc}")

    def _configure(self, op: ops.Configure) -> ops.Configured:
        # first: a refusal changes nothing
        done = self.jobs.configure(op.jobs, op.fleet, op.take_over, source=op.source, reading=op.reading)
        # a look at another fleet's jobs, or at another copy's of this fleet, leaves the watch
        # settings (and the jobs the watcher declares again after a restart) to their owner; a
        # scheduler's jobs are watched by the scheduler
        if self.jobs.local and not done.owned_elsewhere and not done.kept_copy:
            self.watch.configure(op.watch, [s.to_dict() for s in op.jobs])
        self.jobs.audit(AuditAction.CONFIGURE, None, jobs=[s.name for s in op.jobs], fleet=op.fleet, source=op.source,
                        reading=op.reading, **({"taken": done.taken} if done.taken else {}))
        return done

    # ------------------------------------------------------------ the loop

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        hub = self.consoles = Consoles(loop, self._greet)

        def write_out(data: bytes) -> None:
            self.out.write(data)
            self.out.flush()

        self._running = True
        if not self.detached:
            hub.open("stdin", sys.stdin.buffer, write_out, lambda: None)
        listener = self.listener
        if listener is not None:
            listener.start(lambda conn: loop.call_soon_threadsafe(hub.on_relay, conn))
        self.watch.begin()  # before the first tick: a watcher that died before this one is news
        served = loop.create_task(self.jobs.serve())  # the backend's own work (a scheduler's polls)
        ticker = loop.create_task(self._tick_loop())
        pending: set[asyncio.Task[None]] = set()
        self._stop_reading = hub.stop_reading
        self._pending = pending
        try:
            while True:
                link, line = await hub.lines.get()
                if link is None:  # taken over
                    break
                if line is None:  # that console went away (or stopped reading)
                    left = hub.gone(link)
                    if left is None:
                        continue
                    if not left and not self.watch.keep_running(self.argv):
                        break
                    log.info("%s closed; %d console(s) still connected", link.name, left)
                    continue
                task = self._request(line, link)
                if task is not None:
                    pending.add(task)
                    task.add_done_callback(pending.discard)
        finally:
            hub.closing = True
            if listener is not None:
                listener.close()
            if pending:  # taken over, or the last console left: a kill under way still completes
                await asyncio.wait(set(pending), timeout=None if self._draining else 3600)
            ticker.cancel()
            served.cancel()
            for t in pending:
                t.cancel()
            for link in hub.all():
                await asyncio.to_thread(link.flush, 2.0)
            if self._http is not None:
                await self._http.aclose()
            await self.jobs.close()
            self.watch.close()
            self.history.close()

    def _greet(self, link: Link) -> None:
        self.send(self.hello(), to=link)
        samples = self.history.greeting()  # the last hours: the console's charts begin filled
        if samples:
            self.send(wire.History(node=self.node, samples=samples), to=link)

    def _request(self, line: bytes, link: Link) -> Optional[asyncio.Task[None]]:
        """One request line from a console: answered in a task (a kill waits out a grace
        period, and ticks go on meanwhile); a malformed one is answered at once."""
        if not line.strip():
            return None
        try:
            msg = wire.decode(line)
            if not isinstance(msg, Request):
                raise plain.ProtocolError(f"expected a request, got a {msg.type}")
        except plain.ProtocolError as exc:
            log.warning("bad request line: %s", exc)
            self.send(Reply(id=_line_id(line), ok=False, error=f"malformed request: {exc}"), to=link)
            return None
        return asyncio.get_running_loop().create_task(self._answer(msg, link))

    def on_takeover(self, signum: int = 0, frame: Any = None) -> None:
        """SIGTERM, sent by a newer agent for this node (see AgentLock). With nothing under way,
        exit at once: this process may be blocked writing to a dead SSH channel and would never
        get back to its loop. Otherwise stop reading requests, answer those under way, exit."""
        _write_stderr_nowait(b"agent INFO asked to exit (SIGTERM): a newer agent is taking over this node\n")
        if not self._pending or self._stop_reading is None:
            # a notification under way is answered and removed first, or the newer agent sends it again
            self.watch.outbox.quiesce()
            self.watch.life.stopped()  # handed over, not dead: the newer agent reports no restart
            os._exit(0)
        self._draining = True
        self._stop_reading()

    async def _answer(self, req: Request, link: Optional[Link] = None) -> None:
        try:
            op = ops.op_of(req)
        except (ValueError, TypeError) as exc:  # bad arguments, an unknown op: said at once
            self.send(Reply(id=req.id, ok=False, error=str(exc)), to=link)
            return
        if op.on_loop:
            reply = self.handle(req, op)  # fast, and touches loop-owned state
        else:
            reply = await asyncio.to_thread(self.handle, req, op)
        self.send(reply, to=link)
        if isinstance(op, ops.Configure):
            self.send(self.snapshot())  # the client sees its jobs at once, not a tick later

    async def _tick_loop(self) -> None:
        """A snapshot every ``interval_s``, each one a callback armed at its time on the loop's
        clock: a task woken from asyncio.sleep costs the loop about twice a callback's work (0.05
        ms a tick at 1 Hz on the development machine). Ends with BrokenPipeError or ValueError
        (the console's pipe is gone); any other failure is logged and the ticks go on."""
        loop = asyncio.get_running_loop()  # its clock is time.monotonic
        ended: asyncio.Future[None] = loop.create_future()
        next_t = time.monotonic()
        handle: asyncio.Handle  # the next tick's, armed by tick itself

        def tick() -> None:
            nonlocal next_t, handle
            try:
                self.scrape_engines()
                self.send(self.snapshot())
            except (BrokenPipeError, ValueError) as exc:
                if not ended.done():
                    ended.set_exception(exc)
                return
            except Exception:
                log.exception("tick failed; going on")
            next_t += self.interval_s
            if next_t < time.monotonic():  # fell behind (a suspended process): do not fire a burst of ticks
                next_t = time.monotonic()
            handle = loop.call_at(next_t, tick)

        handle = loop.call_soon(tick)
        try:
            await ended
        finally:
            handle.cancel()


def _line_id(line: bytes) -> int:
    """The id of a request we could not parse, if one can be read; -1 otherwise."""
    import json
    try:
        obj = json.loads(line)
        return int(obj["id"]) if isinstance(obj, dict) and isinstance(obj.get("id"), int) else -1
    except (ValueError, RecursionError):
        return -1
