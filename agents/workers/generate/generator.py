"""The generation run: everything before the first request (:meth:`Generator.prepare`, in
startup.py), then one asyncio loop of ``servers x concurrency`` worker tasks and a ticker
(:meth:`Generator.run`, here), then its end and exit status (finish.py).

Each worker task takes the next prompt not in the done-set (streamed from the file, never
loaded whole, see prompts.py), sends it through the server pool (servers.py) with retries
and exponential backoff, and hands the record to the shard writer (shards.py), whose order
of writes makes a kill -9 harmless. The ticker flushes (shard fsync, then ids to the
done-set) every ``flush_interval_s`` and writes the resume hint (resume.py) and the
progress document (progress.py) every second. When the disk refuses records, generation
pauses with them held in memory and retries every ten ticks.

``--part I/N``: the run takes only the prompts of part I (common/parts.py, by the hash of the
prompt's id; the reader skips the others), writes into ``OUT/part-I-of-N`` and uploads under
the S3 prefix ``part-I-of-N``; its total counts that part's prompt lines alone.

Fencing (common/fence.py): the run's attempt id (``$GPUDECK_ATTEMPT_ID``, else a fresh one)
is claimed beside the output before anything is restored: in S3 with ``--s3`` (the uploader
checks it before every upload and every few seconds), else in ``OUT/_attempt`` (the ticker
checks it every few seconds). Once a newer attempt holds the output the run stops, writes
nothing more there, and exits 5 (``EXIT_FENCED``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import time
from typing import Any, Optional

from ...contract.fencing import attempt_from_env
from ..common.fence import Fence, Fenced
from ..common.doneset import DoneSet
from ..common.parts import in_part, part_name
from ..common.progress import progress_path
from .finish import Finish
from .options import Options
from .progress import GenerateProgress, is_useful
from .prompts import Prompt, PromptError, PromptReader
from .resume import ResumeHint
from .servers import AttemptFailed, ServerPool
from .shards import ShardWriteError, ShardWriter
from .startup import DONE_FILE, Startup

__all__ = ["DONE_FILE", "Generator"]

log = logging.getLogger("gpudeck.generate")


class Generator(Startup, Finish):
    """One run: :meth:`prepare` (startup.py), then :meth:`run`, which ends in :meth:`_finish`
    (finish.py)."""

    def __init__(self, opts: Options) -> None:
        self.o = opts
        self.out = os.path.abspath(opts.out if opts.part is None else os.path.join(opts.out, part_name(opts.part)))
        self.pool = ServerPool(opts.servers, opts.concurrency, opts.fail_threshold, opts.rest_s, opts.max_rest_s,
                               opts.request_timeout)
        self.progress = GenerateProgress(progress_path(opts.progress, self.out), opts.prompts, self.out)
        self.hint = ResumeHint(opts.prompts, self.out)
        self.done: DoneSet  # opened by the resume (before the run), with the writer
        self.writer: ShardWriter
        self.uploader = None
        self.reader: Optional[PromptReader] = None
        self.inflight: set[str] = set()  # ids taken by a worker and not yet in the done-set
        self.failed: set[str] = set()  # ids given up on in this run
        self._backlog: list[tuple[str, bytes, tuple]] = []  # records the disk refused, to write again
        self.blocked: Optional[str] = None
        self._read_lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._terminated = False
        self.gave_up = False  # every server dead for --give-up-after
        self._interrupted = False  # ctrl-c (SIGINT): exit 130, as every gpudeck command
        self.attempt_id, self.attempt_given = attempt_from_env()
        self.fence: Optional[Fence] = None
        self.fenced: Optional[Fenced] = None  # a newer attempt holds the output: stop, write nothing more
        self.total_estimate = 0
        self.total_exact: Optional[int] = None
        self._part_lines: Optional[int] = None  # with --part: the prompt lines of the part (the id scan's)
        self._body_base = self._request_base()

    # -------------------------------------------------------------- start

    def _request_base(self) -> dict:
        o = self.o
        body: dict[str, Any] = {"model": o.model_name or "default", "max_tokens": o.max_tokens}
        body.update(o.request_fields())  # the sampling options (agents/contract/kinds.py, body=)
        if o.thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": o.thinking}
        body.update(o.extra_body)
        return body

    # -------------------------------------------------------------- callbacks of the writer

    def _shard_closed(self, name: str, ids: list[str]) -> None:
        f = self.writer.last_figures if self.writer is not None else None
        if f is not None and f.get("shard") == name:
            log.info("closed %s (%d records): %s useful; %s", name, len(ids),
                     "-" if f["useful_pct"] is None else f"{f['useful_pct']:g}%",
                     ", ".join(f"{k} {v}" for k, v in f["problems"].items()))
        else:
            log.info("closed %s (%d records)", name, len(ids))
        if self.uploader is not None:
            self.uploader.submit(name, ids)

    def _durable(self, tokens: list) -> None:
        for pid, offset, useful in tokens:
            self.inflight.discard(pid)
            self.hint.durable(offset)
            self.progress.durable(useful)

    def _is_taken(self, pid: str) -> bool:
        """Done, in flight, given up on, or (with --part) another part's: never to be sent."""
        return pid in self.done.ids or pid in self.inflight or pid in self.failed or \
            (self.o.part is not None and not in_part(pid, self.o.part))

    def _write_resume_hint(self) -> None:
        if self.reader is None or self._backlog:
            return
        self.hint.write(self.done, (self.reader.offset, self.reader.line))

    # -------------------------------------------------------------- the loop

    async def run(self) -> int:
        import aiohttp

        o = self.o
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        timeout = aiohttp.ClientTimeout(total=o.request_timeout, sock_connect=o.connect_timeout_s)
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=60)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector, skip_auto_headers=("User-Agent",),
                                         headers={"Content-Type": "application/json"}) as session:
            self.pool.session = session
            if o.model_name is None:
                await self._discover_model()
            workers = [asyncio.ensure_future(self._worker()) for _ in range(self.pool.capacity)]
            ticker = asyncio.ensure_future(self._ticker())
            stop_wait = asyncio.ensure_future(self._stop.wait())
            all_done = asyncio.ensure_future(asyncio.gather(*workers, return_exceptions=True))
            ends: list[asyncio.Future[Any]] = [all_done, stop_wait]
            await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
            for w in workers:
                w.cancel()
            stop_wait.cancel()
            results = await all_done
            for r in results:
                if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                    log.error("a worker task failed: %r", r)
            ticker.cancel()
            try:
                await ticker
            except asyncio.CancelledError:
                pass
        return await self._finish()

    async def _discover_model(self) -> None:
        """No --model: ask the servers what they serve."""
        name = await self.pool.discover_model()
        self.o.model_name = name or "default"
        self._body_base["model"] = self.o.model_name
        log.info("model: %s%s", self.o.model_name, " (from /v1/models)" if name else
                 " (no server listed a model; pass --model if the server needs its name)")

    def _on_signal(self, sig: int = signal.SIGTERM) -> None:
        self._interrupted = self._interrupted or sig == signal.SIGINT
        if not self._terminated:
            log.info("terminating: requests in flight are dropped and will be sent again on the next start")
        self._terminated = True
        self._stop.set()

    # -------------------------------------------------------------- the workers

    async def _worker(self) -> None:
        while not self._stop.is_set():
            while self.blocked and not self._stop.is_set():
                await asyncio.sleep(0.5)
            p = await self._next_prompt()
            if p is None:
                return
            await self._process(p)

    async def _next_prompt(self) -> Optional[Prompt]:
        async with self._read_lock:
            reader = self.reader
            assert reader is not None, "the prompts are read once the resume opened them"
            while True:
                item = reader.next()
                if item is True:
                    await asyncio.sleep(0)  # many done lines in a row: let answers in
                    continue
                if item is None:
                    self.total_exact = len(self.done) + len(self.inflight) + len(self.failed)
                    return None
                if isinstance(item, PromptError):
                    self.progress.quality["bad_prompts"] += 1
                    log.error("%s; skipped", item)
                    continue
                self.inflight.add(item.id)
                self.hint.taken(item.offset, item.line)
                return item

    def _body(self, p: Prompt) -> bytes:
        body = dict(self._body_base)
        body["messages"] = p.messages
        return json.dumps(body, ensure_ascii=False).encode()

    async def _process(self, p: Prompt) -> None:
        body = self._body(p)
        attempt = 0
        while True:
            server = await self.pool.acquire()
            try:
                result = await self.pool.request(server, body)
            except AttemptFailed as exc:
                self.pool.release(server, exc)
                self.progress.retries += 1
                if exc.charge:
                    attempt += 1
                if not exc.retry or attempt >= self.o.max_attempts:
                    self._give_up(p, f"{server.url}: {exc}", attempt)
                    return
                log.debug("prompt %s (line %d), attempt %d on %s: %s", p.id, p.line, attempt, server.url, exc)
                if exc.charge:
                    await asyncio.sleep(min(30.0, 0.25 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0))
                continue
            except BaseException:
                self.pool.release(server, None)
                raise
            self.pool.release(server, None, ok=True)
            self._record(p, server.url, result)
            return

    def _give_up(self, p: Prompt, why: str, attempts: int) -> None:
        self.inflight.discard(p.id)
        self.failed.add(p.id)
        self.progress.quality["errors"] += 1
        log.error("prompt %s (%s:%d) failed after %d attempt(s): %s; a relaunch tries it again", p.id,
                  self.o.prompts, p.line, attempts, why)

    def _record(self, p: Prompt, server_url: str, r: dict) -> None:
        rec = {"id": p.id, "messages": p.messages, "reasoning": r["reasoning"], "answer": r["answer"],
               "finish_reason": r["finish_reason"], "prompt_tokens": r["prompt_tokens"],
               "completion_tokens": r["completion_tokens"], "reasoning_tokens": r["reasoning_tokens"],
               "server": server_url}
        line = json.dumps(rec, ensure_ascii=False).encode("utf-8", errors="surrogateescape")
        found = self.progress.record(p.id, r, self.o.thinking)
        token = (p.id, p.offset, is_useful(r))  # counted as useful once durable (progress.py)
        if self._backlog:
            self._backlog.append((p.id, line, token))
            return
        try:
            self.writer.add(p.id, line, token, rec, found)
        except ShardWriteError as exc:
            self._backlog.append((p.id, line, token))
            self._block(str(exc))

    def _block(self, why: str) -> None:
        if self.blocked != why:
            log.error("%s; generation paused, %d finished record(s) held in memory; retrying every %.1f s", why,
                      len(self._backlog), self.o.flush_interval_s * 10)
        self.blocked = why

    def _write_backlog(self) -> bool:
        while self._backlog:
            pid, line, token = self._backlog[0]
            try:
                self.writer.add(pid, line, token)
            except ShardWriteError as exc:
                self._block(str(exc))
                return False
            self._backlog.pop(0)
        if self.blocked:
            log.info("writing again: %s is writable", self.out)
            self.blocked = None
        return True

    async def _ticker(self) -> None:
        next_progress = 0.0
        next_backlog = 0.0
        while True:
            await asyncio.sleep(self.o.flush_interval_s)
            try:
                next_progress, next_backlog = self._tick(next_progress, next_backlog)
            except Exception:  # a bug here must not stop the flushes: say it, keep ticking
                log.exception("the flush/progress tick failed")

    def _tick(self, next_progress: float, next_backlog: float) -> tuple[float, float]:
        """One flush (shard fsync, then ids to the done-set); every second, progress and the
        resume hint; while the disk refuses records, a retry every ten ticks."""
        o = self.o
        now = time.monotonic()
        if self._fence_says_stop():
            return next_progress, next_backlog
        if self._backlog and now >= next_backlog:
            next_backlog = now + o.flush_interval_s * 10
            self._write_backlog()
        try:
            self.writer.flush()
            if self.blocked and not self._backlog:
                log.info("writing again: %s is writable", self.out)
                self.blocked = None
        except OSError as exc:  # ShardWriteError, DoneSetError: the ids wait for the next tick
            self._block(str(exc))
        if now >= next_progress:
            next_progress = now + o.progress_interval_s
            self._check_give_up(now)
            self._write_resume_hint()
            self.progress.write(self)
        return next_progress, next_backlog

    def _fence_says_stop(self) -> bool:
        """Whether a newer attempt holds the output (the uploader's thread checks an S3 fence;
        a directory's is read here, every ``fence_interval_s``): then the run stops."""
        if self.fence is None:
            return False
        if self.uploader is None:
            try:
                self.fence.check_due()
            except Fenced:
                pass
        if self.fence.fenced is None:
            return False
        if self.fenced is None:
            self.fenced = self.fence.fenced
            log.error("%s", self.fenced)
            self._stop.set()
        return True

    def _check_give_up(self, now: float) -> None:
        dead = self.pool.dead_for(now)
        if self.o.give_up_after is None or dead < self.o.give_up_after or self.gave_up:
            return
        self.gave_up = True
        errors = "; ".join(f"{s.url}: {s.last_error}" for s in self.pool.servers)
        log.error("giving up: no server has answered for %.0f s (--give-up-after %.0f s): %s. Relaunch once they "
                  "are back (finished prompts are kept), or pass --give-up-after never to wait for them", dead,
                  self.o.give_up_after, errors)
        self._stop.set()

    # -------------------------------------------------------------- progress

    def total(self) -> int:
        if self.total_exact is not None:
            return self.total_exact
        return max(self.total_estimate, len(self.done) + len(self.inflight) + len(self.failed))
