"""The generation run: everything before the first request (:meth:`Generator.prepare`), then
one asyncio loop of ``servers x concurrency`` worker tasks and a ticker (:meth:`Generator.run`).

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
import re
import signal
import time
from typing import Any, Optional

from ...contract.fencing import EXIT_FENCED, attempt_from_env
from ..common.dirlock import DirLock
from ..common.fence import Fence, Fenced, FileStore
from ..common.audit_gate import audit_verdict
from ..common.doneset import DoneSet
from ..common import success
from ..common.parts import in_part, part_name
from ..common.progress import progress_path
from ...contract.jobs import MARKER, QUALITY_MARKER
from ...contract.plain import to_plain
from .options import EXIT_FAIL, EXIT_OK, EXIT_QUALITY, EXIT_TERM, Options
from .progress import GenerateProgress, is_useful
from .quality import PROBLEMS, useful_pct
from .prompts import Prompt, PromptError, PromptReader
from .resume import ResumeHint
from .servers import AttemptFailed, ServerPool, UsageError
from .shards import NAMES, ShardWriteError, ShardWriter, ids_in_jsonl

log = logging.getLogger("gpudeck.generate")

DONE_FILE = "done.txt"
_STALE_TMP = re.compile(r"\.\d+\.tmp$|^\.(done\.txt\.download|orphan\.download)$")


class Generator:
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

    def prepare(self) -> None:
        """Everything before the first request: lock, audit, S3 restore, done-set, shard
        recovery, resume hint. Raises UsageError / DirectoryBusy / OSError with a message."""
        o = self.o
        if not os.path.isfile(o.prompts):
            raise UsageError(f"--prompts {o.prompts}: no such file")
        os.makedirs(self.out, exist_ok=True)
        self._lock = DirLock(self.out).acquire()
        if not o.s3:  # with --s3, the fence is in S3 (claimed by _s3_start, before the restore)
            self.fence = Fence(FileStore(self.out), self.attempt_id, o.fence_interval_s, given=self.attempt_given,
                               on_claim=lambda: success.clear(self.out))
            self._claim(self.fence.claim)
        self._remove_stale_temp_files()
        self._audit()
        self._check_ids()
        t0 = time.monotonic()
        local_missing = not os.path.exists(os.path.join(self.out, DONE_FILE))
        if local_missing:
            self.hint.drop()
        reserved = self._s3_start() if o.s3 else set()
        self.done = DoneSet.open(os.path.join(self.out, DONE_FILE))
        if local_missing and NAMES.closed_in(self.out):
            # shards without their done-set (deleted by hand?): their records are done all the same
            shards = NAMES.closed_in(self.out)
            added = self.done.add((i for n in shards for i in ids_in_jsonl(os.path.join(self.out, n))), sync=True)
            log.warning("%s was missing but %d shards are here: rebuilt it from them (%d ids)",
                        os.path.join(self.out, DONE_FILE), len(shards), added)
        self._recover_shards(reserved)
        self.progress.load_previous()
        offset, line = self.hint.read(len(self.done))
        self.reader = PromptReader(o.prompts, self._is_taken, offset, line, o.max_prompt_bytes, o.part)
        self.total_estimate = self.hint.counted[1] if self._part_lines is None else self._part_lines
        log.info("resume: %d ids done; reading %s from line %d; done-set and recovery took %.2f s", len(self.done),
                 o.prompts, line, time.monotonic() - t0)

    def _remove_stale_temp_files(self) -> None:
        for name in os.listdir(self.out):  # temp files of atomic writes a kill interrupted (we hold the lock)
            if _STALE_TMP.search(name):
                try:
                    os.unlink(os.path.join(self.out, name))
                except OSError:
                    pass

    def _recover_shards(self, reserved: set[int]) -> None:
        self.writer = ShardWriter(self.out, self.done, self.o.shard_size,
                                  on_closed=self._shard_closed, on_durable=self._durable)
        rec = self.writer.recover(reserved)
        if rec.ids_added or rec.cut_bytes or rec.bad_lines or rec.closed_now:
            log.info("recovered the open shard: %d records kept (%d ids added to the done-set), %d bytes of a "
                     "half-written record cut, %d bad lines dropped, closed %s", rec.open_records, rec.ids_added,
                     rec.cut_bytes, rec.bad_lines, ", ".join(rec.closed_now) or "none")
        if self.uploader is not None:
            requeued = self.uploader.resume(rec.closed)
            if requeued:
                log.info("queued %d closed shard(s) that are not in S3 yet: %s", len(requeued),
                         ", ".join(requeued[:5]) + (" ..." if len(requeued) > 5 else ""))
            self.uploader.start()

    def _audit(self) -> None:
        from ..audit import audit_file
        st = os.stat(self.o.prompts)
        key = {"path": os.path.abspath(self.o.prompts), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        why = audit_verdict(self.out, key, lambda: audit_file(self.o.prompts, mode="prompts",
                                                              sample=self.o.audit_sample), "the prompts", log)
        if why is not None:
            if not self.o.force:
                raise UsageError(f"the prompts in {self.o.prompts} look degenerate: {why} "
                                 f"(run `gpudeck audit --prompts {self.o.prompts}` for the report; --force to go on)")
            log.warning("the prompts look degenerate, going on because of --force: %s", why)

    def _check_ids(self) -> None:
        """Lines that repeat an earlier id would be skipped as done: refuse the file, or with
        --dedupe first say how many (the reader keeps the first line of each id)."""
        from ..common.idscan import cached_scan, duplicate_message, scan_ids
        from .prompts import line_id
        part = self.o.part
        st = os.stat(self.o.prompts)
        key: dict = {"path": os.path.abspath(self.o.prompts), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        if part is not None:
            key["part"] = list(part)
        t0 = time.monotonic()
        scan = cached_scan(self.out, key, lambda: scan_ids([self.o.prompts], line_id, self.o.max_prompt_bytes, part))
        log.info("ids of %s: %d line(s) repeat an earlier id (checked in %.2f s)", self.o.prompts, scan.duplicates,
                 time.monotonic() - t0)
        if part is not None:
            self._part_lines = scan.part_lines
            log.info("--part %d/%d: %s of the %d prompt line(s) are this part's", part[0], part[1], scan.part_lines,
                     scan.lines)
        if not scan.duplicates:
            return
        if self.o.dedupe != "first":  # the file is refused by every part, whichever part holds the repeat
            raise UsageError(duplicate_message(scan, "the prompts"))
        self.progress.quality["duplicate_ids"] = scan.duplicates if part is None else (scan.part_duplicates or 0)
        log.warning("--dedupe first: %d prompt line(s) repeat an earlier id and are dropped (the first: %s)",
                    scan.duplicates, scan.first)

    def _s3_loc(self):
        """The S3 prefix of this run (its part's), or None without --s3."""
        from ..common.s3sync.remote import S3Location
        if not self.o.s3:
            return None
        loc = S3Location.parse(self.o.s3)
        return S3Location(loc.bucket, loc.key(part_name(self.o.part))) if self.o.part is not None else loc

    def _s3_start(self) -> set[int]:
        from ..common.s3sync.start import start_s3
        loc = self._s3_loc()
        s3 = self._claim(lambda: start_s3(self.out, loc, endpoint_url=self.o.s3_endpoint, done_name=DONE_FILE,
                                          names=NAMES, ids_of_file=ids_in_jsonl, restore_attempts=5,
                                          list_attempts=(5, 3), local_numbers_on_failure=True,
                                          attempt_id=self.attempt_id, fence_interval_s=self.o.fence_interval_s,
                                          given=self.attempt_given))
        self.uploader = s3.uploader
        self.fence = s3.fence
        return s3.taken

    def _claim(self, fn):
        """``fn()``; a newer attempt found there releases the directory and raises Fenced."""
        try:
            return fn()
        except Fenced as exc:
            self.fenced = exc
            self._lock.release()
            raise

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

    async def _finish(self) -> int:
        if self.fenced is not None:  # the output is the newer attempt's: write nothing more to it
            if self.uploader is not None:
                self.uploader.stop()
            self.done.close()
            self.reader.close() if self.reader else None
            self._lock.release()
            log.error("%s; %d completions this run", self.fenced, self.progress.completed_now)
            return EXIT_FENCED
        for _ in range(3):  # a full disk may still refuse the backlog
            if self._write_backlog():
                break
            await asyncio.sleep(1)
        try:
            self.writer.flush(sync_done=True)
        except OSError as exc:
            log.error("%s", exc)
        complete = not self._terminated and self.reader is not None and self.reader.exhausted \
            and not self.failed and not self.inflight and not self._backlog
        try:
            self.writer.close(final=complete)
        except OSError as exc:
            log.error("%s", exc)
            complete = False
        self._write_resume_hint()
        uploads_ok = await self._drain_uploads()
        self.done.close()
        self.progress.write(self, final=True)
        self.reader.close() if self.reader else None
        status = self._exit_status(complete, uploads_ok)
        if status == EXIT_OK:  # last, and only at a clean end: what a job `after` this one waits for
            q = self.progress.quality
            counts = {"done": len(self.done), "total": self.total(), "failed": q["errors"],
                      "bad_prompts": q["bad_prompts"]}
            junk = self._below_useful()
            stored = self.uploader.count if self.uploader is not None else None  # the prefix's inventory
            if junk is not None:  # ended, but mostly junk: no _SUCCESS, the figures in _QUALITY
                success.write_quality(self.out, {**counts, **junk}, self._s3_loc(), self.o.s3_endpoint, stored)
                status = EXIT_QUALITY
            else:
                success.write(self.out, counts, self._s3_loc(), self.o.s3_endpoint, stored)
            if stored is not None:
                self.progress.write(self, final=True)  # the marker counted in what the prefix holds
        self._lock.release()
        return status

    def _below_useful(self) -> Optional[dict[str, Any]]:
        """At a clean end: the figures of a run whose useful records are fewer than
        ``--min-useful-pct`` of those counted (said in the log), else None. A run that counted
        none (a resume with every prompt done and no progress.json of its last attempt) is
        not judged."""
        p = self.progress
        pct = useful_pct(p.useful, p.useful_of)
        if pct is None or pct >= self.o.min_useful_pct:
            return None
        q = p.quality
        problems = {k: q[k] for k in PROBLEMS}
        worst = max(PROBLEMS, key=lambda k: q[k])
        why = (f"{pct:.1f}% of the {p.useful_of} records counted are useful, under --min-useful-pct "
               f"{self.o.min_useful_pct:g}%" + (f"; the most common problem: {worst} ({q[worst]})" if q[worst] else ""))
        log.error("%s: no %s; the figures are in %s", why, MARKER, os.path.join(self.out, QUALITY_MARKER))
        return {"useful": p.useful, "useful_of": p.useful_of, "useful_pct": round(pct, 2),
                "min_useful_pct": self.o.min_useful_pct, "problems": problems, "why": why,
                "window": to_plain(p.window.document())}

    async def _drain_uploads(self) -> bool:
        """Wait for the uploads (not after a signal); False when some are still pending."""
        if self.uploader is None:
            return True
        if self._terminated:
            self.uploader.stop()
            return True
        from ..common.s3sync.remote import drain_timeout_s
        drain_s = self.o.s3_drain_timeout_s if self.o.s3_drain_timeout_s is not None else drain_timeout_s()
        log.info("waiting for uploads to S3 (up to %.0f s)", drain_s)
        deadline = time.monotonic() + drain_s
        loop = asyncio.get_running_loop()
        while True:  # keep progress.json current while uploads are retried
            self.progress.write(self)
            uploads_ok = await loop.run_in_executor(None, self.uploader.drain,
                                                    min(1.0, max(0.0, deadline - time.monotonic())))
            if uploads_ok or time.monotonic() >= deadline or self._terminated:
                break
        st = self.uploader.status()
        self.uploader.stop()
        if not uploads_ok:
            log.error("%d shard(s) or the done-set are not in S3 yet (last error: %s); a relaunch uploads "
                      "them", st.pending, st.last_error)
        return uploads_ok

    def _exit_status(self, complete: bool, uploads_ok: bool) -> int:
        q = self.progress.quality
        summary = (f"{self.progress.completed_now} completions this run, {len(self.done)} done of {self.total()}; "
                   f"{q['errors']} prompt(s) failed, {q['bad_prompts']} bad prompt line(s)")
        if self._terminated:
            log.info("stopped: %s", summary)
            return 130 if self._interrupted else EXIT_TERM
        if complete and uploads_ok and not q["bad_prompts"]:
            log.info("finished: %s", summary)
            return EXIT_OK
        if complete and uploads_ok:
            log.warning("finished with bad prompt lines (see above): %s", summary)
            return EXIT_OK
        if self.gave_up:
            log.error("gave up, the servers are dead: %s; relaunch once they answer", summary)
            return EXIT_FAIL
        log.error("incomplete: %s; relaunch to retry what failed", summary)
        return EXIT_FAIL

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
