"""The uploader: closed shards and the done-set go up from one background thread, in the
order of rules 1-4 of the package docstring (``common/s3sync/__init__.py``); a failed upload
is retried with exponential backoff (capped, with jitter) for as long as the worker lives,
and the producer never waits on S3.

With a fence (common/fence.py), the thread checks it before every shard and every done-set
it sends, and every ``fence.interval_s`` while idle; once fenced it sends nothing more and
stops, and :attr:`ShardUploader.fenced` says why (the worker polls it and exits).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import queue
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from ....contract.atomic import fsync_dir
from ..doneset import DoneLog
from ..fence import Fence, Fenced
from .remote import (MANIFEST, REMOTE_DONE, UPLOADED_DONE, S3Location,
                                                         describe_error, make_client, read_manifest)

log = logging.getLogger("gpudeck.s3")


@dataclass
class UploadStatus:
    pending: int  # files waiting to go up (including ones waiting for a retry)
    uploaded: int  # files uploaded by this process
    failures: int  # failed attempts so far (each retried)
    last_error: Optional[str]
    done_set_pending: bool  # done-uploaded.txt changed since it was last uploaded
    pending_bytes: int = 0  # the bytes of the pending files
    oldest_pending_at: Optional[float] = None  # when the oldest pending file was closed (its mtime, unix time)
    last_upload_at: Optional[float] = None  # the last file that went up (unix time; the manifest's mtime at start)
    # what the prefix holds: the run's one listing at its start, plus what this process put
    # there since; None when the listing failed (what this process put is then a floor)
    stored_objects: Optional[int] = None
    stored_bytes: Optional[int] = None
    stored_listed_at: Optional[float] = None

    def to_json(self) -> dict:
        """What progress.json holds (agents/contract/wire.py ``Uploads``)."""
        return {"pending": self.pending, "uploaded": self.uploaded, "failures": self.failures,
                "last_error": self.last_error, "done_set_pending": self.done_set_pending,
                "pending_bytes": self.pending_bytes, "oldest_pending_at": self.oldest_pending_at,
                "last_upload_at": self.last_upload_at, "stored_objects": self.stored_objects,
                "stored_bytes": self.stored_bytes, "stored_listed_at": self.stored_listed_at}


class ShardUploader:
    """Uploads closed files of ``out_dir`` to ``loc`` from one background thread.

    ``submit(name, ids)`` queues a closed file (a name inside ``out_dir``) with the ids of
    the records it holds and returns at once. ``ids_of(name)`` gives the ids of a file
    queued again by :meth:`resume` (a closed shard the manifest does not list yet).
    ``drain(timeout)`` waits for everything queued, and the done-set, to be in S3.
    """

    def __init__(self, out_dir: str, loc: S3Location, *, ids_of: Callable[[str], Iterable[str]],
                 endpoint_url: Optional[str] = None, client_factory: Optional[Callable[[], Any]] = None,
                 backoff_s: float = 1.0, max_backoff_s: float = 60.0, done_interval_s: float = 30.0,
                 fence: Optional[Fence] = None) -> None:
        self.out_dir = out_dir
        self.fence = fence
        self.loc = loc
        self.ids_of = ids_of
        self._client_factory = client_factory or (lambda: make_client(endpoint_url))
        self.backoff_s, self.max_backoff_s, self.done_interval_s = backoff_s, max_backoff_s, done_interval_s
        self._inbox: "queue.Queue[Optional[tuple[str, Optional[list[str]]]]]" = queue.Queue()
        self._retry: list[tuple[float, int, str, Optional[list[str]], int]] = []  # (when, seq, name, ids, attempt)
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._outstanding = 0  # submitted and not uploaded yet
        self._uploaded = 0
        self._failures = 0
        self._last_error: Optional[str] = None
        self._done_dirty = False
        self._done_attempt = 0
        self._done_next = 0.0
        self._last_done_upload = 0.0
        self._stop = threading.Event()
        self._manifest = read_manifest(out_dir)
        self._waiting: dict[str, tuple[float, int]] = {}  # pending file -> (closed at, bytes), for the status
        try:
            self._last_upload_at: Optional[float] = os.stat(os.path.join(out_dir, MANIFEST)).st_mtime
        except OSError:
            self._last_upload_at = None
        self._uploaded_done = DoneLog(os.path.join(out_dir, UPLOADED_DONE))
        # a crash may have come between a shard's upload and the done-set's: send it again
        self._done_dirty = self._uploaded_done.size > 0
        self._in_hand: list[tuple[str, Optional[list[str]], int]] = []  # taken off the queues, not settled yet
        self._started = False
        self._restarts = 0  # times the thread's loop was entered again after an unexpected error
        self._stored: Optional[dict[str, int]] = None  # the prefix's objects (name -> bytes): the start's listing ...
        self._stored_at: Optional[float] = None  # ... and when it was taken; uploads update it, never a listing
        self._thread = self._new_thread()

    def _new_thread(self) -> threading.Thread:
        return threading.Thread(target=self._supervise, name="s3-uploader", daemon=True)

    @property
    def fenced(self) -> Optional[Fenced]:
        """Why this attempt may write no more (a newer one holds the output), once it is so."""
        return self.fence.fenced if self.fence is not None else None

    # ---------------------------------------------------------------- producer side

    def start(self) -> "ShardUploader":
        self._started = True
        self._thread.start()
        return self

    def _ensure_running(self) -> None:
        """The watchdog: a thread that died anyway (it should not: :meth:`_supervise` catches
        everything) is replaced, so queued files never wait on a dead thread."""
        if not self._started or self._stop.is_set() or self._thread.is_alive():
            return
        with self._lock:
            if self._thread.is_alive():
                return
            log.error("the S3 upload thread had died; starting it again")
            self._thread = self._new_thread()
            self._thread.start()

    def resume(self, closed_names: Iterable[str]) -> list[str]:
        """Queue the closed files that the manifest does not list; returns their names."""
        todo = sorted(n for n in closed_names if n not in self._manifest)
        for name in todo:
            self.submit(name, None)
        return todo

    def inventory(self, listed: Optional[dict[str, int]]) -> None:
        """What the prefix held at the run's start (its one listing; None: it failed); each
        upload of this process is counted on top of it."""
        with self._lock:
            self._stored = dict(listed) if listed is not None else None
            self._stored_at = time.time() if listed is not None else None

    def count(self, name: str, size: int) -> None:
        """``name`` of ``size`` bytes is now under the prefix (this process put it there)."""
        with self._lock:
            if self._stored is not None:
                self._stored[name] = size

    def is_uploaded(self, name: str) -> bool:
        return name in self._manifest

    def submit(self, name: str, ids: Optional[Iterable[str]]) -> None:
        try:
            st = os.stat(os.path.join(self.out_dir, name))
            closed = (st.st_mtime, st.st_size)
        except OSError:
            closed = (time.time(), 0)
        with self._lock:
            self._outstanding += 1
            self._waiting[name] = closed
        self._inbox.put((name, list(ids) if ids is not None else None))
        self._ensure_running()

    def status(self) -> UploadStatus:
        self._ensure_running()
        with self._lock:
            waiting = self._waiting.values()
            stored = self._stored
            return UploadStatus(self._outstanding, self._uploaded, self._failures, self._last_error,
                                self._done_dirty, sum(b for _, b in waiting),
                                min((t for t, _ in waiting), default=None), self._last_upload_at,
                                stored_objects=len(stored) if stored is not None else None,
                                stored_bytes=sum(stored.values()) if stored is not None else None,
                                stored_listed_at=self._stored_at)

    def drain(self, timeout: Optional[float] = None) -> bool:
        """Wait until every queued file and the done-set are in S3; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:  # (the thread uploads the done-set as soon as its queue is empty)
            self._ensure_running()
            if self.fenced is not None:
                return False
            with self._lock:
                if not (self._outstanding or self._done_dirty):
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(timeout=min(left, 0.5) if left is not None else 0.5)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread; whatever is not uploaded stays queued on disk for the next start."""
        self._stop.set()
        self._inbox.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._thread.is_alive():  # a thread stuck in a slow upload keeps its file open
            self._uploaded_done.close()

    # ---------------------------------------------------------------- the thread

    def _supervise(self) -> None:
        """The thread's body: :meth:`_run`, entered again after any unexpected exception (logged,
        counted as a failure, with backoff). Files in hand at that moment go back to the retry
        queue: one bad moment never stops the uploads for the rest of the run."""
        while not self._stop.is_set():
            try:
                self._run()
                return
            except BaseException as exc:  # noqa: BLE001 -- the thread must outlive anything
                why = f"the S3 uploader failed unexpectedly ({type(exc).__name__}: {describe_error(exc)})"
                log.error("%s; it goes on", why, exc_info=True)
                with self._lock:
                    self._failures += 1
                    self._last_error = why
                    in_hand, self._in_hand = self._in_hand, []
                delay = self._backoff(min(self._restarts, 6))
                self._restarts += 1
                for name, ids, attempt in in_hand:
                    heapq.heappush(self._retry, (time.monotonic() + delay, next(self._seq), name, ids, attempt + 1))
                self._stop.wait(delay)

    def _run(self) -> None:
        try:
            self._run_unfenced()
        except Fenced as exc:  # rule 2 of common/fence.py: nothing more goes up
            log.error("uploads stopped: %s", exc)
            with self._lock:
                self._last_error = str(exc)
                self._idle.notify_all()
            self._stop.set()

    def _run_unfenced(self) -> None:
        client = None
        while not self._stop.is_set():
            if self.fence is not None:
                self.fence.check_due()
            now = time.monotonic()
            wait = 1.0
            if self._retry:
                wait = max(0.0, min(wait, self._retry[0][0] - now))
            try:
                item = self._inbox.get(timeout=wait)
            except queue.Empty:
                item = None
            if self._stop.is_set():
                return
            ready: list[tuple[str, Optional[list[str]], int]] = []
            if item is not None:
                ready.append((item[0], item[1], 0))
            while self._retry and self._retry[0][0] <= time.monotonic():
                _, _, name, ids, attempt = heapq.heappop(self._retry)
                ready.append((name, ids, attempt))
            with self._lock:
                dirty = self._done_dirty
            if not ready and not dirty:
                continue
            self._in_hand = ready
            try:
                if client is None:
                    client = self._client_factory()
            except Exception as exc:
                self._in_hand = []
                self._fail_all(ready, f"cannot create an S3 client: {describe_error(exc)}")
                continue
            while ready:
                if self._stop.is_set():
                    return
                name, ids, attempt = ready[0]
                self._upload_one(client, name, ids, attempt)
                ready.pop(0)  # settled: uploaded, or in the retry queue
            self._maybe_upload_done(client)

    def _upload_one(self, client: Any, name: str, ids: Optional[list[str]], attempt: int) -> None:
        path = os.path.join(self.out_dir, name)
        key = self.loc.key(name)
        try:
            if self.fence is not None and name not in self._manifest:
                self.fence.check()  # Fenced goes up: the caller stops the thread
            if name not in self._manifest:
                if ids is None:
                    ids = list(self.ids_of(name))
                size = os.path.getsize(path)
                client.upload_file(path, self.loc.bucket, key)
                self.count(name, size)
                self._uploaded_done.append(ids, sync=True)  # rule 2: ids first...
                self._append_manifest(name)  # ...then the manifest
        except Fenced:
            raise
        except Exception as exc:
            why = describe_error(exc)
            if isinstance(exc, FileNotFoundError):
                why = f"the local file is gone: {exc.strerror}"
            self._schedule_retry(name, ids, attempt, f"upload of {name} to {self.loc.url(name)} failed: {why}")
            return
        with self._lock:
            self._outstanding -= 1
            self._uploaded += 1
            self._waiting.pop(name, None)
            self._last_upload_at = time.time()
            self._done_dirty = True
            self._idle.notify_all()
        log.info("uploaded %s to %s", name, self.loc.url(name))

    def _append_manifest(self, name: str) -> None:
        path = os.path.join(self.out_dir, MANIFEST)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (name + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if len(self._manifest) == 0:
            fsync_dir(self.out_dir)
        self._manifest.add(name)

    def _backoff(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** attempt) * random.uniform(0.5, 1.0)

    def _schedule_retry(self, name: str, ids: Optional[list[str]], attempt: int, why: str) -> None:
        delay = self._backoff(attempt)
        with self._lock:
            self._failures += 1
            self._last_error = why
        log.warning("%s (attempt %d); retrying in %.1f s", why, attempt + 1, delay)
        heapq.heappush(self._retry, (time.monotonic() + delay, next(self._seq), name, ids, attempt + 1))

    def _fail_all(self, ready: list, why: str) -> None:
        for name, ids, attempt in ready:
            self._schedule_retry(name, ids, attempt, f"upload of {name}: {why}")
        if not ready:
            with self._lock:
                self._failures += 1
                self._last_error = why
            log.warning("%s", why)
            time.sleep(self._backoff(0))

    def _maybe_upload_done(self, client: Any) -> None:
        """Upload done-uploaded.txt when it changed and either the queue is idle or
        ``done_interval_s`` passed since the last upload (coalesces many small updates)."""
        with self._lock:
            dirty, idle = self._done_dirty, self._outstanding == 0
        now = time.monotonic()
        if not dirty or now < self._done_next:
            return
        if not idle and now - self._last_done_upload < self.done_interval_s:
            return
        try:
            if self.fence is not None:
                self.fence.check()  # Fenced goes up: the caller stops the thread
            self._uploaded_done.sync(force=True)
            # both files only grow, and only this thread writes them: consistent snapshots.
            # done.txt first, then the manifest (rule 4)
            for name, local in ((REMOTE_DONE, UPLOADED_DONE), (MANIFEST, MANIFEST)):
                try:
                    with open(os.path.join(self.out_dir, local), "rb") as f:
                        data = f.read()
                except FileNotFoundError:
                    data = b""
                data = data[:data.rfind(b"\n") + 1]
                client.put_object(Bucket=self.loc.bucket, Key=self.loc.key(name), Body=data)
                self.count(name, len(data))
        except Fenced:
            raise
        except Exception as exc:
            with self._lock:
                self._failures += 1
                self._last_error = f"upload of the done-set to {self.loc.url(REMOTE_DONE)} failed: " \
                                   f"{describe_error(exc)}"
            delay = self._backoff(self._done_attempt)
            self._done_attempt += 1
            self._done_next = time.monotonic() + delay
            log.warning("%s; retrying in %.1f s", self._last_error, delay)
            return
        self._done_attempt = 0
        self._last_done_upload = time.monotonic()
        with self._lock:
            self._done_dirty = False  # only this thread adds to the file: nothing came in meanwhile
            self._idle.notify_all()
