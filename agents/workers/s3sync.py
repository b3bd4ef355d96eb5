"""S3 for the workers: closed shards and the done-set go up in a background thread, and a
fresh node gets its done-set back.

Layout under ``s3://bucket/prefix/``::

    shard-000000.jsonl ...   closed shards, uploaded once each, never overwritten
    done.txt                 the ids of the records in the shards *that are in S3*
    uploaded.txt             the names of the shards whose ids ``done.txt`` holds

Local bookkeeping, beside the worker's own done-set, in its output directory::

    uploaded.txt             names of the files uploaded so far (the manifest), one per line
    done-uploaded.txt        the done-set of uploaded shards: what ``done.txt`` in S3 holds

Ordering rules (each one is what makes a kill -9 at any moment harmless):

1. A shard is uploaded only after it is closed (renamed to its final name).
2. After its upload succeeds, its ids are appended to ``done-uploaded.txt`` (fsynced), and
   only then its name to ``uploaded.txt`` (fsynced). A crash between the two uploads the
   shard again on restart (same key, same bytes) and repeats its ids: harmless. The other
   order could mark a shard uploaded whose ids never reach S3's done-set, and a fresh node
   would generate those records a second time.
3. ``done.txt`` in S3 is a copy of ``done-uploaded.txt``, never of the worker's own
   done-set, which also holds ids of records still in local, unuploaded shards. A fresh node
   restores it and skips exactly the records that S3 has.
4. ``done.txt`` goes up before ``uploaded.txt``. A shard in S3 that ``uploaded.txt`` does
   not list (uploaded just before a crash, before the done-set caught up) is an orphan:
   :func:`restore_done_set` downloads it and adds its ids, so a fresh node never generates
   its records again.
5. On a fresh node the next shard number comes after every shard number already in S3
   (:func:`list_shards`), so nothing uploaded is overwritten.

A failed upload is retried with exponential backoff (capped, with jitter) for as long as
the worker lives; the producer never waits on S3. On restart, closed shards missing from
the manifest are queued again (:meth:`ShardUploader.resume`).

Credentials come from boto3's usual chain (environment, shared files, instance roles) and
never appear in a message: errors name the bucket, key and the S3 error, nothing else.
boto3 is imported inside the functions that need it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import queue
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional
from urllib.parse import urlsplit, urlunsplit

from gpudeck.agents.workers.atomic import atomic_write_bytes, fsync_dir
from gpudeck.agents.workers.doneset import DoneLog, encode_id, read_ids

log = logging.getLogger("gpudeck.s3")

MANIFEST = "uploaded.txt"  # local and remote name of the manifest
UPLOADED_DONE = "done-uploaded.txt"
REMOTE_DONE = "done.txt"
SHARD_NUMBER = re.compile(r"(?:^|/)shard-(\d+)\.")
_USERINFO = re.compile(r"://[^/@\s]+@")


class S3Error(RuntimeError):
    """An S3 operation failed; the message names the bucket/key and the S3 error."""


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str = ""  # without leading or trailing '/'

    @classmethod
    def parse(cls, url: str) -> "S3Location":
        """``s3://bucket/some/prefix`` -> S3Location('bucket', 'some/prefix')."""
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise ValueError(f"{url!r} is not an S3 URL; expected s3://bucket/prefix")
        return cls(parts.netloc, parts.path.strip("/"))

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def url(self, name: str = "") -> str:
        return f"s3://{self.bucket}/{self.key(name)}" if name else f"s3://{self.bucket}/{self.prefix}"


def redact_url(url: Optional[str]) -> Optional[str]:
    """An endpoint URL without any user:password part, for messages."""
    if not url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def make_client(endpoint_url: Optional[str] = None, region: Optional[str] = None) -> Any:
    """A boto3 S3 client. ``endpoint_url`` (or $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL, which
    boto3 reads itself) points it at an S3-compatible store. botocore's own retries are kept
    short: the uploader retries with its own, longer backoff."""
    import boto3
    from botocore.config import Config

    cfg = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=10, read_timeout=60,
                 s3={"addressing_style": "path"} if endpoint_url else None)
    kwargs: dict[str, Any] = {"config": cfg}
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    if region or not os.environ.get("AWS_DEFAULT_REGION") and not os.environ.get("AWS_REGION"):
        kwargs["region_name"] = region or "us-east-1"
    return boto3.session.Session().client("s3", **kwargs)


def drain_timeout_s() -> float:
    """How long a finishing worker waits for its uploads: $GPUDECK_S3_DRAIN_S, default 600."""
    try:
        value = float(os.environ.get("GPUDECK_S3_DRAIN_S", "600"))
    except ValueError:
        return 600.0
    return value if value >= 0 and value == value else 600.0


def describe_error(exc: BaseException) -> str:
    """One line for an S3 failure, without anything secret (boto3 never puts keys in its
    messages; the endpoint is redacted where it appears)."""
    resp = getattr(exc, "response", None)  # botocore's connection errors carry response=None
    err = resp.get("Error") if isinstance(resp, dict) else None
    code = err.get("Code") if isinstance(err, dict) else None
    try:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except Exception:  # noqa: BLE001 -- an exception whose __str__ fails still gets a line
        text = type(exc).__name__
    text = _USERINFO.sub("://", text)  # an endpoint given as http://key:secret@host stays secret
    return f"{code}: {text}" if code and code not in text else text


def _is_missing(exc: BaseException, bucket_too: bool = True) -> bool:
    """The object (or, with ``bucket_too``, its whole bucket) does not exist: nothing to read."""
    resp = getattr(exc, "response", None)
    err = resp.get("Error") if isinstance(resp, dict) else None
    codes = ("404", "NoSuchKey", "NotFound") + (("NoSuchBucket",) if bucket_too else ())
    return isinstance(err, dict) and err.get("Code") in codes


def list_shards(client: Any, loc: S3Location) -> dict[int, str]:
    """The shards already under the prefix: shard number -> file name (any extension)."""
    shards: dict[int, str] = {}
    prefix = loc.key("")
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=loc.bucket, Prefix=prefix):
            for obj in page.get("Contents", ()):
                name = obj["Key"][len(prefix):]
                m = SHARD_NUMBER.match(name)
                if m and "/" not in name:
                    shards[int(m.group(1))] = name
    except Exception as exc:  # botocore raises ClientError, EndpointConnectionError, NoCredentialsError...
        if _is_missing(exc):  # no bucket yet: no shards (uploads will say why they fail)
            return {}
        raise S3Error(f"cannot list {loc.url()}: {describe_error(exc)}") from None
    return shards


def list_shard_numbers(client: Any, loc: S3Location) -> set[int]:
    return set(list_shards(client, loc))


def _get_object(client: Any, loc: S3Location, name: str) -> Optional[bytes]:
    """The object's bytes, or None when it does not exist."""
    try:
        return client.get_object(Bucket=loc.bucket, Key=loc.key(name))["Body"].read()
    except Exception as exc:
        if _is_missing(exc):
            return None
        raise S3Error(f"cannot read {loc.url(name)}: {describe_error(exc)}") from None


@dataclass(frozen=True)
class Restored:
    ids: int  # ids in the restored done-set
    shards: int  # shards found in S3
    orphans: list[str]  # shards in S3 that done.txt did not cover yet; their ids were added


def restore_done_set(client: Any, loc: S3Location, out_dir: str, done_name: str,
                     ids_of_file: Callable[[str], Iterable[str]]) -> Optional[Restored]:
    """On a node without a local done-set: rebuild it from S3 and install it as both the
    worker's done-set (``out_dir/done_name``) and ``done-uploaded.txt``, with the remote
    manifest as the local one. Returns None when S3 holds neither a done-set nor shards (a
    first run). Orphan shards (see rule 4) are downloaded to a temp file and read with
    ``ids_of_file(path)``. The worker's done-set is written last: its presence means the
    restore is complete."""
    done = _get_object(client, loc, REMOTE_DONE)
    manifest = _get_object(client, loc, MANIFEST)
    shards = list_shards(client, loc)
    if done is None and not shards:
        return None
    done = (done or b"")[:(done or b"").rfind(b"\n") + 1]
    listed = {n for n in (manifest or b"").decode(errors="replace").split("\n") if n}
    orphans = sorted(name for name in shards.values() if name not in listed)
    extra: list[str] = []
    tmp = os.path.join(out_dir, ".orphan.download")
    for name in orphans:
        try:
            client.download_file(loc.bucket, loc.key(name), tmp)
            extra.extend(ids_of_file(tmp))
        except Exception as exc:
            raise S3Error(f"cannot read the ids of {loc.url(name)}: {describe_error(exc)}") from None
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        log.warning("%s was uploaded but not yet in %s: its ids are restored from the shard itself",
                    loc.url(name), REMOTE_DONE)
    data = done + "".join(encode_id(i) + "\n" for i in extra).encode("utf-8", errors="surrogateescape")
    atomic_write_bytes(os.path.join(out_dir, MANIFEST), "".join(n + "\n" for n in sorted(listed | set(orphans))).encode())
    atomic_write_bytes(os.path.join(out_dir, UPLOADED_DONE), data)
    atomic_write_bytes(os.path.join(out_dir, done_name), data)
    return Restored(ids=len(read_ids(os.path.join(out_dir, done_name))), shards=len(shards), orphans=orphans)


def read_manifest(out_dir: str) -> set[str]:
    path = os.path.join(out_dir, MANIFEST)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return set()
    end = data.rfind(b"\n") + 1  # a half-written last name: that upload is simply redone
    return {n for n in data[:end].decode(errors="replace").split("\n") if n}


@dataclass
class UploadStatus:
    pending: int  # files waiting to go up (including ones waiting for a retry)
    uploaded: int  # files uploaded by this process
    failures: int  # failed attempts so far (each retried)
    last_error: Optional[str]
    done_set_pending: bool  # done-uploaded.txt changed since it was last uploaded

    def to_json(self) -> dict:
        return {"pending": self.pending, "uploaded": self.uploaded, "failures": self.failures,
                "last_error": self.last_error, "done_set_pending": self.done_set_pending}


class ShardUploader:
    """Uploads closed files of ``out_dir`` to ``loc`` from one background thread.

    ``submit(name, ids)`` queues a closed file (a name inside ``out_dir``) with the ids of
    the records it holds and returns at once. ``ids_of(name)`` gives the ids of a file
    queued again by :meth:`resume` (a closed shard the manifest does not list yet).
    ``drain(timeout)`` waits for everything queued, and the done-set, to be in S3.
    """

    def __init__(self, out_dir: str, loc: S3Location, *, ids_of: Callable[[str], Iterable[str]],
                 endpoint_url: Optional[str] = None, client_factory: Optional[Callable[[], Any]] = None,
                 backoff_s: float = 1.0, max_backoff_s: float = 60.0, done_interval_s: float = 30.0) -> None:
        self.out_dir = out_dir
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
        self._uploaded_done = DoneLog(os.path.join(out_dir, UPLOADED_DONE))
        # a crash may have come between a shard's upload and the done-set's: send it again
        self._done_dirty = self._uploaded_done.size > 0
        self._in_hand: list[tuple[str, Optional[list[str]], int]] = []  # taken off the queues, not settled yet
        self._started = False
        self._restarts = 0  # times the thread's loop was entered again after an unexpected error
        self._thread = self._new_thread()

    def _new_thread(self) -> threading.Thread:
        return threading.Thread(target=self._supervise, name="s3-uploader", daemon=True)

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

    def is_uploaded(self, name: str) -> bool:
        return name in self._manifest

    def submit(self, name: str, ids: Optional[Iterable[str]]) -> None:
        with self._lock:
            self._outstanding += 1
        self._inbox.put((name, list(ids) if ids is not None else None))
        self._ensure_running()

    def status(self) -> UploadStatus:
        self._ensure_running()
        with self._lock:
            return UploadStatus(self._outstanding, self._uploaded, self._failures, self._last_error,
                                self._done_dirty)

    def drain(self, timeout: Optional[float] = None) -> bool:
        """Wait until every queued file and the done-set are in S3; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:  # (the thread uploads the done-set as soon as its queue is empty)
            self._ensure_running()
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
        client = None
        while not self._stop.is_set():
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
            if name not in self._manifest:
                if ids is None:
                    ids = list(self.ids_of(name))
                client.upload_file(path, self.loc.bucket, key)
                self._uploaded_done.append(ids, sync=True)  # rule 2: ids first...
                self._append_manifest(name)  # ...then the manifest
        except Exception as exc:
            why = describe_error(exc)
            if isinstance(exc, FileNotFoundError):
                why = f"the local file is gone: {exc.strerror}"
            self._schedule_retry(name, ids, attempt, f"upload of {name} to {self.loc.url(name)} failed: {why}")
            return
        with self._lock:
            self._outstanding -= 1
            self._uploaded += 1
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
