"""``gpudeck generate``: completions for a JSONL of prompts from one or more
OpenAI-compatible servers (SGLang, vLLM, llama.cpp, an sglang-router), written to numbered
shards, resumable after a kill -9 at any moment.

How it runs (one asyncio loop, aiohttp; measured in bench/generate_client.py):

- ``servers x concurrency`` worker tasks; each takes the next prompt not in the done-set
  (streamed from the file, never loaded whole) and sends it to the server with the fewest
  outstanding requests that has room (``--concurrency`` is per server).
- A failed attempt (timeout, 5xx, an answer that is not a chat completion, a dropped
  connection) is retried with exponential backoff, on any server. A server that fails
  ``min(concurrency, 8)`` times in a row (at least 3) rests (5 s, doubling up to 60 s),
  then gets one probe request; a success brings it back. Connection refusals never count
  against a prompt, so while every server is down the worker waits instead of burning
  through the prompts. A 4xx answer (a prompt the server refuses) is not retried.
- Before the first request the prompts are audited (agents/workers/audit.py, a sample of
  20,000 lines, cached in ``OUT/audit.json``); degenerate prompts are refused unless
  ``--force``.
- Records go to ``shard-NNNNNN.jsonl`` (1,000 each) through generate_shards.ShardWriter,
  which keeps the order of writes that makes kill -9 harmless; the done-set is
  ``OUT/done.txt``; ``OUT/resume.json`` remembers how far the file is done so a restart
  over a million done prompts does not parse them again (the done-set stays the authority).
- ``--s3``: closed shards and the done-set go to S3 from a background thread
  (s3sync.ShardUploader); a start without a local done-set restores it from S3.
- progress.json (``$GPUDECK_PROGRESS_FILE`` when run as a job, else ``OUT/progress.json``)
  every second: done, total, tokens, tokens/s, quality counters.

Exit status: 0 when every prompt is done (and uploaded), 1 when some failed or uploads are
still pending (a relaunch retries them), 2 for a usage error, 143 after SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import heapq
import json
import logging
import os
import random
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from gpudeck.agents.workers.atomic import DirectoryBusy, DirLock, atomic_write_json
from gpudeck.agents.workers.doneset import DoneSet, DoneSetError
from gpudeck.agents.workers.generate_prompts import Prompt, PromptError, PromptReader
from gpudeck.agents.workers.generate_shards import OPEN_RE, SHARD_RE, ShardWriteError, ShardWriter, ids_in_jsonl

log = logging.getLogger("gpudeck.generate")

DONE_FILE = "done.txt"
RESUME_FILE = "resume.json"
AUDIT_FILE = "audit.json"
AUDIT_SAMPLE = 20000
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_TERM = 0, 1, 2, 143
_STALE_TMP = re.compile(r"\.\d+\.tmp$|^\.(done\.txt\.download|orphan\.download)$")


class UsageError(ValueError):
    pass


@dataclass
class Options:
    prompts: str
    out: str
    servers: list[str]
    concurrency: int = 64
    max_tokens: int = 4096
    model: Optional[str] = None  # None: the first id the first server lists at /v1/models
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    thinking: Optional[bool] = None
    extra_body: dict = field(default_factory=dict)
    s3: Optional[str] = None
    s3_endpoint: Optional[str] = None
    force: bool = False
    progress: Optional[str] = None
    shard_size: int = 1000
    request_timeout_s: float = 1800.0
    connect_timeout_s: float = 10.0
    max_attempts: int = 8
    fail_threshold: int = 3
    rest_s: float = 5.0
    max_rest_s: float = 60.0
    flush_interval_s: float = 0.2
    progress_interval_s: float = 1.0
    s3_drain_timeout_s: Optional[float] = None  # None: $GPUDECK_S3_DRAIN_S, default 600
    audit_sample: int = AUDIT_SAMPLE


# ---------------------------------------------------------------- servers

class Server:
    """One endpoint and what we know of its health."""

    __slots__ = ("url", "endpoint", "concurrency", "fail_limit", "outstanding", "failures", "rest_until", "rest_s",
                 "probing", "ok", "failed", "last_error", "last_warned")

    def __init__(self, url: str, concurrency: int, fail_threshold: int = 3) -> None:
        self.url = url
        self.endpoint = url + "/v1/chat/completions"
        self.concurrency = concurrency
        # failures in a row before a rest: a dead server fails every request in flight at once,
        # a flaky one (a few % of bad answers) almost never fails 8 in a row
        self.fail_limit = max(fail_threshold, min(concurrency, 8))
        self.outstanding = 0
        self.failures = 0  # in a row
        self.rest_until = 0.0
        self.rest_s = 0.0
        self.probing = False
        self.ok = 0
        self.failed = 0
        self.last_error: Optional[str] = None
        self.last_warned = 0.0

    def room(self, now: float) -> bool:
        if now < self.rest_until:
            return False
        return self.outstanding < (1 if self.probing else self.concurrency)

    def state(self, now: float) -> str:
        if now < self.rest_until:
            return "resting"
        return "probing" if self.probing else ("failing" if self.failures else "ok")


def normalize_server(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--server {url!r}: expected a URL like http://host:port")
    for suffix in ("/v1/chat/completions", "/v1"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url


class AttemptFailed(Exception):
    """One attempt at one prompt failed. ``retry``: worth another attempt; ``server_fault``:
    counts against the server's health; ``charge``: counts against the prompt's attempts."""

    def __init__(self, why: str, retry: bool = True, server_fault: bool = True, charge: bool = True) -> None:
        super().__init__(why)
        self.retry, self.server_fault, self.charge = retry, server_fault, charge


# ---------------------------------------------------------------- records

def split_think(content: str) -> tuple[str, str]:
    """(reasoning, answer) from content that carries the reasoning inline (<think>...</think>),
    as servers without a reasoning parser send it."""
    start = content.find("<think>")
    end = content.find("</think>")
    if end < 0 or (start > 0 and content[:start].strip()):
        return "", content
    reasoning = content[start + len("<think>") if start >= 0 else 0:end]
    return reasoning.strip(), content[end + len("</think>"):].lstrip()


def parse_completion(raw: bytes) -> dict:
    """The parts of a chat completion we keep. Raises ValueError on anything else."""
    try:
        doc = json.loads(raw)
    except ValueError:
        raise ValueError(f"the answer is not JSON: {raw[:120]!r}") from None
    try:
        choice = doc["choices"][0]
        msg = choice["message"]
        content = msg.get("content") or ""
        if not isinstance(content, str):
            raise TypeError("content is not a string")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ValueError(f"the answer is not a chat completion ({type(exc).__name__}: {exc}): {raw[:120]!r}") \
            from None
    reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
    if not reasoning and "</think>" in content:
        reasoning, content = split_think(content)
    usage = doc.get("usage") or {}
    details = usage.get("completion_tokens_details") or {}
    return {
        "reasoning": reasoning, "answer": content, "finish_reason": choice.get("finish_reason"),
        "prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens"),
        "reasoning_tokens": usage.get("reasoning_tokens", details.get("reasoning_tokens")),
    }


# ---------------------------------------------------------------- the generator

class Generator:
    def __init__(self, opts: Options) -> None:
        self.o = opts
        self.out = os.path.abspath(opts.out)
        self.progress_path = opts.progress or os.environ.get("GPUDECK_PROGRESS_FILE") \
            or os.path.join(self.out, "progress.json")
        self.servers = [Server(u, opts.concurrency, opts.fail_threshold) for u in opts.servers]
        self.done: Optional[DoneSet] = None
        self.writer: Optional[ShardWriter] = None
        self.uploader = None
        self.reader: Optional[PromptReader] = None
        self.inflight: set[str] = set()  # ids taken by a worker and not yet in the done-set
        self.failed: set[str] = set()  # ids given up on in this run
        self._pending_offsets: list[tuple[int, int]] = []  # heap: (offset, line) of prompts taken, not durable
        self._durable_offsets: set[int] = set()
        self._hint_written: Optional[int] = None
        self._backlog: list[tuple[str, bytes, tuple]] = []  # records the disk refused, to write again
        self.blocked: Optional[str] = None
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._rr = 0
        self._read_lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._terminated = False
        self.total_estimate = 0
        self.total_exact: Optional[int] = None
        # counters (tokens and quality carry over from the previous attempt's progress.json)
        self.tokens = 0
        self.quality = {"empty_answer": 0, "no_reasoning": 0, "cut_at_max_tokens": 0, "errors": 0, "bad_prompts": 0}
        self.completed_now = 0
        self.retries = 0
        self._tok_window: collections.deque[tuple[float, int]] = collections.deque()
        self._last_status = 0.0
        self._body_base = self._request_base()

    # -------------------------------------------------------------- start

    def _request_base(self) -> dict:
        o = self.o
        body: dict[str, Any] = {"model": o.model or "default", "max_tokens": o.max_tokens}
        if o.temperature is not None:
            body["temperature"] = o.temperature
        if o.top_p is not None:
            body["top_p"] = o.top_p
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
        for name in os.listdir(self.out):  # temp files of atomic writes a kill interrupted (we hold the lock)
            if _STALE_TMP.search(name):
                try:
                    os.unlink(os.path.join(self.out, name))
                except OSError:
                    pass
        self._audit()
        t0 = time.monotonic()
        local_missing = not os.path.exists(os.path.join(self.out, DONE_FILE))
        if local_missing:  # a hint without its done-set would skip prompts nobody finished
            try:
                os.unlink(os.path.join(self.out, RESUME_FILE))
            except FileNotFoundError:
                pass
        reserved: set[int] = set()
        if o.s3:
            reserved = self._s3_start()
        self.done = DoneSet.open(os.path.join(self.out, DONE_FILE))
        if local_missing and closed_shards(self.out):
            # shards without their done-set (deleted by hand?): their records are done all the same
            shards = closed_shards(self.out)
            added = self.done.add((i for n in shards for i in ids_in_jsonl(os.path.join(self.out, n))), sync=True)
            log.warning("%s was missing but %d shards are here: rebuilt it from them (%d ids)",
                        os.path.join(self.out, DONE_FILE), len(shards), added)
        self.writer = ShardWriter(self.out, self.done, o.shard_size,
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
        self._load_previous_progress()
        offset, line, counted = self._resume_hint()
        self.reader = PromptReader(o.prompts, self._is_taken, offset, line)
        # the line count of the last start, plus whatever was appended since
        size, lines = counted if counted else (0, 0)
        self._counted = (os.path.getsize(o.prompts), lines + _count_lines(o.prompts, size))
        self.total_estimate = self._counted[1]
        log.info("resume: %d ids done; reading %s from line %d; done-set and recovery took %.2f s", len(self.done),
                 o.prompts, line, time.monotonic() - t0)

    def _audit(self) -> None:
        from gpudeck.agents.workers.audit import audit_file
        st = os.stat(self.o.prompts)
        key = {"path": os.path.abspath(self.o.prompts), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        cache = os.path.join(self.out, AUDIT_FILE)
        report = None
        try:
            with open(cache) as f:
                doc = json.load(f)
            if doc.get("key") == key:
                report = doc
        except (OSError, ValueError):
            pass
        if report is None:
            r = audit_file(self.o.prompts, mode="prompts", sample=self.o.audit_sample)
            report = {"key": key, "degenerate": r.degenerate, "reasons": r.reasons, "samples": r.samples,
                      "summary": r.render()}
            log.info("audit of the prompts:\n%s", r.render())
            try:
                atomic_write_json(cache, report, fsync=False)
            except OSError as exc:
                log.warning("cannot cache the audit in %s: %s", cache, exc.strerror or exc)
        if report["degenerate"]:
            why = " ".join(report["reasons"])
            if not self.o.force:
                raise UsageError(f"the prompts in {self.o.prompts} look degenerate: {why} "
                                 f"(run `gpudeck audit --prompts {self.o.prompts}` for the report; --force to go on)")
            log.warning("the prompts look degenerate, going on because of --force: %s", why)

    def _s3_start(self) -> set[int]:
        from gpudeck.agents.workers import s3sync
        loc = s3sync.S3Location.parse(self.o.s3)
        client = s3sync.make_client(self.o.s3_endpoint)
        local_done = os.path.join(self.out, DONE_FILE)
        fresh = not os.path.exists(local_done)
        if fresh:
            restored = _with_retries(lambda: s3sync.restore_done_set(client, loc, self.out, DONE_FILE, ids_in_jsonl),
                                     "restoring the done-set from S3")
            if restored is None:
                log.info("no done-set in %s: a first run", loc.url())
            else:
                log.info("restored the done-set from %s: %d ids, %d shards in S3%s", loc.url(), restored.ids,
                         restored.shards, f", orphans read: {', '.join(restored.orphans)}" if restored.orphans else "")
        self.uploader = s3sync.ShardUploader(self.out, loc, ids_of=lambda n: ids_in_jsonl(os.path.join(self.out, n)),
                                             endpoint_url=self.o.s3_endpoint)
        try:
            # every number in S3 is taken, whether this node or another uploaded it
            return set(_with_retries(lambda: s3sync.list_shard_numbers(client, loc), f"listing {loc.url()}",
                                     attempts=5 if fresh else 3))
        except s3sync.S3Error as exc:
            if fresh:
                raise
            # this node's own state says which numbers it used; uploads will be retried
            log.warning("%s; going on with the local state (the numbers this node uploaded are kept)", exc)
            return {int(m.group(1)) for n in s3sync.read_manifest(self.out) if (m := SHARD_RE.match(n))}

    def _load_previous_progress(self) -> None:
        try:
            with open(self.progress_path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return
        if doc.get("prompts") not in (None, os.path.abspath(self.o.prompts)) or doc.get("out") != self.out:
            return
        if isinstance(doc.get("tokens"), int):
            self.tokens = doc["tokens"]
        for k in ("empty_answer", "no_reasoning", "cut_at_max_tokens"):
            v = (doc.get("quality") or {}).get(k)
            if isinstance(v, int):
                self.quality[k] = v

    # -------------------------------------------------------------- resume hint

    def _fingerprint(self, offset: int) -> Optional[str]:
        """A hash of the prompt file's first MiB and of the 64 KiB before ``offset``: a hint
        stays valid when lines are appended, and is dropped when anything before it changed."""
        try:
            with open(self.o.prompts, "rb") as f:
                if os.fstat(f.fileno()).st_size < offset:
                    return None
                h = hashlib.blake2b(f.read(min(offset, 1 << 20)), digest_size=16)
                f.seek(max(0, offset - 65536))
                h.update(f.read(offset - max(0, offset - 65536)))
                return h.hexdigest()
        except OSError:
            return None

    def _resume_hint(self) -> tuple[int, int, Optional[tuple[int, int]]]:
        """(offset, line) to start reading at, and (size, lines) of the last line count."""
        path = os.path.join(self.out, RESUME_FILE)
        try:
            with open(path) as f:
                hint = json.load(f)
            offset, line = int(hint["offset"]), int(hint["line"])
            counted = (int(hint["counted_size"]), int(hint["counted_lines"]))
        except (OSError, ValueError, KeyError, TypeError):
            return 0, 1, None
        if hint.get("prompts") != os.path.abspath(self.o.prompts) or len(self.done) < hint.get("done_at_least", 0):
            return 0, 1, None
        if self._fingerprint(offset) != hint.get("fingerprint") or os.path.getsize(self.o.prompts) < counted[0]:
            log.info("the prompt file changed before line %d since the last run: reading it from the start", line)
            return 0, 1, None
        return offset, line, counted

    def _write_resume_hint(self) -> None:
        """Only after the done-set is fsynced: every prompt before the low-water offset is done."""
        if self.reader is None or self._backlog:
            return
        heap = self._pending_offsets
        while heap and heap[0][0] in self._durable_offsets:
            self._durable_offsets.discard(heapq.heappop(heap)[0])
        offset, line = heap[0] if heap else (self.reader.offset, self.reader.line)
        if offset == self._hint_written:
            return
        try:
            self.done.sync(force=True)  # the hint may only point past ids that are on disk
            atomic_write_json(os.path.join(self.out, RESUME_FILE), {
                "prompts": os.path.abspath(self.o.prompts), "offset": offset, "line": line,
                "fingerprint": self._fingerprint(offset), "done_at_least": len(self.done),
                "counted_size": self._counted[0], "counted_lines": self._counted[1]}, fsync=False)
            self._hint_written = offset
        except OSError as exc:
            log.warning("cannot write the resume hint: %s", exc.strerror or exc)

    # -------------------------------------------------------------- callbacks of the writer

    def _shard_closed(self, name: str, ids: list[str]) -> None:
        log.info("closed %s (%d records)", name, len(ids))
        if self.uploader is not None:
            self.uploader.submit(name, ids)

    def _durable(self, tokens: list) -> None:
        for pid, offset in tokens:
            self.inflight.discard(pid)
            self._durable_offsets.add(offset)

    def _is_taken(self, pid: str) -> bool:
        return pid in self.done.ids or pid in self.inflight or pid in self.failed

    # -------------------------------------------------------------- the loop

    async def run(self) -> int:
        import aiohttp

        o = self.o
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal)
        timeout = aiohttp.ClientTimeout(total=o.request_timeout_s, sock_connect=o.connect_timeout_s)
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=60)
        self._t0 = time.monotonic()
        async with aiohttp.ClientSession(timeout=timeout, connector=connector, skip_auto_headers=("User-Agent",),
                                         headers={"Content-Type": "application/json"}) as session:
            self.session = session
            if o.model is None:
                await self._discover_model()
            n = sum(s.concurrency for s in self.servers)
            workers = [asyncio.ensure_future(self._worker()) for _ in range(n)]
            ticker = asyncio.ensure_future(self._ticker())
            stop_wait = asyncio.ensure_future(self._stop.wait())
            all_done = asyncio.ensure_future(asyncio.gather(*workers, return_exceptions=True))
            await asyncio.wait([all_done, stop_wait], return_when=asyncio.FIRST_COMPLETED)
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
        """No --model: ask the servers what they serve (vLLM refuses a name it does not serve;
        SGLang and llama.cpp take any)."""
        import aiohttp
        name = None
        for s in self.servers:
            try:
                async with self.session.get(s.url + "/v1/models", timeout=aiohttp.ClientTimeout(total=10)) as r:
                    if r.status == 200:
                        data = (await r.json(content_type=None)).get("data") or []
                        name = data[0].get("id") if data and isinstance(data[0], dict) else None
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, AttributeError):
                continue
            if name:
                break
        self.o.model = name or "default"
        self._body_base["model"] = self.o.model
        log.info("model: %s%s", self.o.model, " (from /v1/models)" if name else
                 " (no server listed a model; pass --model if the server needs its name)")

    def _on_signal(self) -> None:
        if not self._terminated:
            log.info("terminating: requests in flight are dropped and will be sent again on the next start")
        self._terminated = True
        self._stop.set()

    async def _finish(self) -> int:
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
        uploads_ok = True
        if self.uploader is not None:
            if self._terminated:
                self.uploader.stop()
            else:
                from gpudeck.agents.workers.s3sync import drain_timeout_s
                drain_s = self.o.s3_drain_timeout_s if self.o.s3_drain_timeout_s is not None else drain_timeout_s()
                log.info("waiting for uploads to S3 (up to %.0f s)", drain_s)
                deadline = time.monotonic() + drain_s
                loop = asyncio.get_running_loop()
                while True:  # keep progress.json current while uploads are retried
                    self._write_progress()
                    uploads_ok = await loop.run_in_executor(None, self.uploader.drain,
                                                            min(1.0, max(0.0, deadline - time.monotonic())))
                    if uploads_ok or time.monotonic() >= deadline or self._terminated:
                        break
                st = self.uploader.status()
                self.uploader.stop()
                if not uploads_ok:
                    log.error("%d shard(s) or the done-set are not in S3 yet (last error: %s); a relaunch uploads "
                              "them", st.pending, st.last_error)
        self.done.close()
        self._write_progress(final=True)
        self.reader.close() if self.reader else None
        self._lock.release()
        summary = (f"{self.completed_now} completions this run, {len(self.done)} done of {self._total()}; "
                   f"{self.quality['errors']} prompt(s) failed, {self.quality['bad_prompts']} bad prompt line(s)")
        if self._terminated:
            log.info("stopped: %s", summary)
            return EXIT_TERM
        if complete and uploads_ok and not self.quality["bad_prompts"]:
            log.info("finished: %s", summary)
            return EXIT_OK
        if complete and uploads_ok:
            log.warning("finished with bad prompt lines (see above): %s", summary)
            return EXIT_OK
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
            while True:
                item = self.reader.next()
                if item is True:
                    await asyncio.sleep(0)  # many done lines in a row: let answers in
                    continue
                if item is None:
                    self.total_exact = len(self.done) + len(self.inflight) + len(self.failed)
                    return None
                if isinstance(item, PromptError):
                    self.quality["bad_prompts"] += 1
                    log.error("%s; skipped", item)
                    continue
                self.inflight.add(item.id)
                heapq.heappush(self._pending_offsets, (item.offset, item.line))
                return item

    def _body(self, p: Prompt) -> bytes:
        body = dict(self._body_base)
        body["messages"] = p.messages
        return json.dumps(body, ensure_ascii=False).encode()

    async def _process(self, p: Prompt) -> None:
        body = self._body(p)
        attempt = 0
        while True:
            server = await self._acquire()
            try:
                result = await self._request(server, body)
            except AttemptFailed as exc:
                self._release(server, exc)
                self.retries += 1
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
                self._release(server, None)
                raise
            self._release(server, None, ok=True)
            self._record(p, server, result)
            return

    def _give_up(self, p: Prompt, why: str, attempts: int) -> None:
        self.inflight.discard(p.id)
        self.failed.add(p.id)
        self.quality["errors"] += 1
        log.error("prompt %s (%s:%d) failed after %d attempt(s): %s; a relaunch tries it again", p.id,
                  self.o.prompts, p.line, attempts, why)

    async def _acquire(self) -> Server:
        while True:
            now = time.monotonic()
            best = None
            n = len(self.servers)
            self._rr = (self._rr + 1) % n
            for i in range(n):
                s = self.servers[(self._rr + i) % n]
                if s.room(now) and (best is None or s.outstanding < best.outstanding):
                    best = s
            if best is not None:
                if now >= best.rest_until and best.rest_s and not best.probing and best.failures:
                    best.probing = True  # the rest is over: one probe request first
                best.outstanding += 1
                return best
            wake = min((s.rest_until for s in self.servers if s.rest_until > now), default=now + 1.0)
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, timeout=max(0.01, wake - now))
            except asyncio.TimeoutError:
                pass
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)

    def _release(self, s: Server, exc: Optional[AttemptFailed], ok: bool = False) -> None:
        s.outstanding -= 1
        if ok:
            s.ok += 1
            if s.failures or s.probing:
                if s.rest_s:
                    log.info("server %s answers again", s.url)
                s.failures, s.probing, s.rest_s = 0, False, 0.0
        elif exc is not None and exc.server_fault:
            s.failed += 1
            s.failures += 1
            s.last_error = str(exc)
            now = time.monotonic()
            if now - s.last_warned >= 30.0:  # what a server answers wrong, once in a while, not per request
                s.last_warned = now
                log.warning("server %s: %s (%d failed attempts so far; retried)", s.url, exc, s.failed)
            # the requests already in flight when a server went down fail one after the other:
            # they belong to the outage that started the rest, not to a new one
            if (s.probing or s.failures >= s.fail_limit) and now >= s.rest_until:
                s.rest_s = min(self.o.max_rest_s, s.rest_s * 2 if s.rest_s else self.o.rest_s)
                s.rest_until = time.monotonic() + s.rest_s
                s.probing = False
                log.warning("server %s failed %d time(s) in a row (%s); resting it %.0f s", s.url, s.failures, exc,
                            s.rest_s)
        if self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)

    async def _request(self, s: Server, body: bytes) -> dict:
        import aiohttp
        try:
            async with self.session.post(s.endpoint, data=body) as resp:
                raw = await resp.read()
                status = resp.status
        except asyncio.TimeoutError:
            raise AttemptFailed(f"no answer within {self.o.request_timeout_s:.0f} s") from None
        except aiohttp.ClientConnectorError as exc:
            raise AttemptFailed(f"cannot connect: {exc.os_error.strerror or exc.os_error}", charge=False) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise AttemptFailed(f"{type(exc).__name__}: {exc}") from None
        if status != 200:
            text = raw[:200].decode(errors="replace").strip()
            if status in (408, 429) or status >= 500:
                raise AttemptFailed(f"HTTP {status}: {text}")
            raise AttemptFailed(f"HTTP {status}: {text}", retry=False, server_fault=False)
        try:
            return parse_completion(raw)
        except ValueError as exc:
            raise AttemptFailed(str(exc)) from None

    def _record(self, p: Prompt, s: Server, r: dict) -> None:
        rec = {"id": p.id, "messages": p.messages, "reasoning": r["reasoning"], "answer": r["answer"],
               "finish_reason": r["finish_reason"], "prompt_tokens": r["prompt_tokens"],
               "completion_tokens": r["completion_tokens"], "reasoning_tokens": r["reasoning_tokens"],
               "server": s.url}
        line = json.dumps(rec, ensure_ascii=False).encode("utf-8", errors="surrogateescape")
        self.completed_now += 1
        n = r["completion_tokens"]
        if isinstance(n, int):
            self.tokens += n
        q = self.quality
        if not r["answer"].strip():
            q["empty_answer"] += 1
        if not r["reasoning"] and self.o.thinking is not False:
            q["no_reasoning"] += 1
        if r["finish_reason"] == "length":
            q["cut_at_max_tokens"] += 1
        token = (p.id, p.offset)
        if self._backlog:
            self._backlog.append((p.id, line, token))
            return
        try:
            self.writer.add(p.id, line, token)
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
        o = self.o
        next_progress = 0.0
        next_backlog = 0.0
        while True:
            await asyncio.sleep(o.flush_interval_s)
            try:
                next_progress, next_backlog = self._tick(next_progress, next_backlog)
            except Exception:  # a bug here must not stop the flushes: say it, keep ticking
                log.exception("the flush/progress tick failed")

    def _tick(self, next_progress: float, next_backlog: float) -> tuple[float, float]:
        """One flush (shard fsync, then ids to the done-set); every second, progress and the
        resume hint; while the disk refuses records, a retry every ten ticks."""
        o = self.o
        now = time.monotonic()
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
            self._write_resume_hint()
            self._write_progress()
        return next_progress, next_backlog

    # -------------------------------------------------------------- progress

    def _total(self) -> int:
        if self.total_exact is not None:
            return self.total_exact
        return max(self.total_estimate, len(self.done) + len(self.inflight) + len(self.failed))

    def _write_progress(self, final: bool = False) -> None:
        now = time.monotonic()
        self._tok_window.append((now, self.tokens))
        while len(self._tok_window) > 2 and now - self._tok_window[0][0] > 30.0:
            self._tok_window.popleft()
        (t0, k0), (t1, k1) = self._tok_window[0], self._tok_window[-1]
        tps = (k1 - k0) / (t1 - t0) if t1 > t0 else None
        uploads = self.uploader.status() if self.uploader is not None else None
        in_s3 = uploads is None or not (uploads.pending or uploads.done_set_pending)
        doc = {
            "done": len(self.done), "total": self._total(), "tokens": self.tokens,
            "tokens_per_s": round(tps, 1) if tps is not None else None, "updated_at": time.time(),
            "quality": dict(self.quality), "in_flight": len(self.inflight), "completed_this_run": self.completed_now,
            "retries": self.retries, "prompts": os.path.abspath(self.o.prompts), "out": self.out,
            "blocked": self.blocked, "finished": final and self.total_exact is not None and not self.failed and in_s3,
            "servers": [{"url": s.url, "state": s.state(now), "outstanding": s.outstanding, "ok": s.ok,
                         "failed": s.failed, "last_error": s.last_error} for s in self.servers],
            "uploads": uploads.to_json() if uploads is not None else None,
        }
        try:
            atomic_write_json(self.progress_path, doc, fsync=False)
        except OSError as exc:
            log.warning("cannot write %s: %s", self.progress_path, exc.strerror or exc)
        if final or now - self._last_status >= 30.0:
            self._last_status = now
            resting = [s.url for s in self.servers if s.state(now) == "resting"]
            up = doc["uploads"]
            log.info("done %d/%d, %s tok/s, in flight %d, errors %d, retries %d%s%s", doc["done"], doc["total"],
                     doc["tokens_per_s"], doc["in_flight"], self.quality["errors"], self.retries,
                     f", resting: {', '.join(resting)}" if resting else "",
                     f", uploads pending {up['pending']}" if up else "")


# ---------------------------------------------------------------- helpers

def _count_lines(path: str, start: int = 0) -> int:
    """Non-empty lines from byte ``start`` on, counted in 1 MiB chunks (1 GB in about a second)."""
    n = 0
    last = b"\n"
    with open(path, "rb") as f:
        f.seek(start)
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n") - chunk.count(b"\n\n")
            last = chunk[-1:]
    return n + (1 if last != b"\n" else 0)


def _with_retries(fn, what: str, attempts: int = 5):
    from gpudeck.agents.workers.s3sync import S3Error
    for i in range(attempts):
        try:
            return fn()
        except S3Error as exc:
            if i == attempts - 1:
                raise
            delay = 2 ** i
            log.warning("%s failed: %s; retrying in %d s", what, exc, delay)
            time.sleep(delay)


def closed_shards(out: str) -> list[str]:
    return sorted(n for n in os.listdir(out) if SHARD_RE.match(n))


def open_shards(out: str) -> list[str]:
    return sorted(n for n in os.listdir(out) if OPEN_RE.match(n))


# ---------------------------------------------------------------- command line

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompts", required=True, help="JSONL of prompts (OpenAI chat or ShareGPT)")
    p.add_argument("--out", required=True, help="output directory: shards, done.txt, progress")
    p.add_argument("--server", action="append", required=True, dest="servers", metavar="URL",
                   help="an OpenAI-compatible server (repeat for several), e.g. http://127.0.0.1:30000")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight per server (default 64)")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--model", default=None,
                   help="the model name sent with each request (default: what the first server lists at /v1/models)")
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-p", type=float)
    p.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="chat_template_kwargs.enable_thinking (default: the server's own default)")
    p.add_argument("--extra-body", default=None, metavar="JSON", help="more request fields, e.g. '{\"top_k\": 20}'")
    p.add_argument("--s3", metavar="s3://bucket/prefix", help="upload closed shards and the done-set there")
    p.add_argument("--s3-endpoint", metavar="URL", help="an S3-compatible endpoint (default: AWS)")
    p.add_argument("--force", action="store_true", help="go on even when the audit finds the prompts degenerate")
    p.add_argument("--progress", help="progress.json path (default $GPUDECK_PROGRESS_FILE, else OUT/progress.json)")
    p.add_argument("--shard-size", type=int, default=1000)
    p.add_argument("--request-timeout", type=float, default=1800.0, help="seconds for one completion")
    p.add_argument("--max-attempts", type=int, default=8, help="attempts per prompt before it counts as failed")


def options_from_args(args: argparse.Namespace) -> Options:
    try:
        extra = json.loads(args.extra_body) if args.extra_body else {}
        if not isinstance(extra, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        raise UsageError(f"--extra-body: {exc}") from None
    if args.concurrency < 1 or args.shard_size < 1 or args.max_attempts < 1:
        raise UsageError("--concurrency, --shard-size and --max-attempts must be at least 1")
    if args.s3:
        from gpudeck.agents.workers.s3sync import S3Location
        try:
            S3Location.parse(args.s3)
        except ValueError as exc:
            raise UsageError(f"--s3: {exc}") from None
    servers = list(dict.fromkeys(normalize_server(u) for u in args.servers))
    return Options(prompts=args.prompts, out=args.out, servers=servers, concurrency=args.concurrency,
                   max_tokens=args.max_tokens, model=args.model, temperature=args.temperature, top_p=args.top_p,
                   thinking=args.thinking, extra_body=extra, s3=args.s3, s3_endpoint=args.s3_endpoint,
                   force=args.force, progress=args.progress, shard_size=args.shard_size,
                   request_timeout_s=args.request_timeout, max_attempts=args.max_attempts)


def run(args: argparse.Namespace) -> int:
    """The command: returns the exit status."""
    logging.basicConfig(level=os.environ.get("GPUDECK_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("botocore").setLevel(logging.WARNING)
    try:
        opts = options_from_args(args)
        gen = Generator(opts)
        gen.prepare()
    except (UsageError, DirectoryBusy) as exc:
        print(f"gpudeck generate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, DoneSetError) as exc:
        print(f"gpudeck generate: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except Exception as exc:  # S3Error and friends: say what, never a traceback
        from gpudeck.agents.workers.s3sync import S3Error
        if isinstance(exc, S3Error):
            print(f"gpudeck generate: {exc}", file=sys.stderr)
            return EXIT_FAIL
        raise
    return asyncio.run(gen.run())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpudeck generate", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    return run(build_parser().parse_args(argv))


# ---------------------------------------------------------------- the fleet's job kind

def build_argv(spec, python: str) -> list[str]:
    """The command line of a ``kind = "generate"`` job, from its options (JobKind.GENERATE.options;
    ``servers`` already resolved to URLs)."""
    from gpudeck.agents.jobs import SpecError
    o = spec.options
    missing = [k for k in ("prompts", "out", "servers") if not o.get(k)]
    if missing:
        raise SpecError(f"job {spec.name!r}: kind 'generate' needs {', '.join(repr(k) for k in missing)}")
    servers = o["servers"] if isinstance(o["servers"], list) else [o["servers"]]
    argv = [python, "-m", "gpudeck.agents.workers.generate", "--prompts", str(o["prompts"]), "--out", str(o["out"])]
    for url in servers:
        argv += ["--server", str(url)]
    for key, flag in (("concurrency", "--concurrency"), ("max_tokens", "--max-tokens"), ("model_name", "--model"),
                      ("temperature", "--temperature"), ("top_p", "--top-p"), ("s3", "--s3"),
                      ("s3_endpoint", "--s3-endpoint")):
        if o.get(key) is not None:
            argv += [flag, str(o[key])]
    if o.get("thinking") is not None:
        argv.append("--thinking" if o["thinking"] else "--no-thinking")
    if o.get("force"):
        argv.append("--force")
    return argv + list(spec.args)


if __name__ == "__main__":
    sys.exit(main())
