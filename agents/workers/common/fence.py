"""A worker's fence: its attempt id beside its output, and the check that another attempt has
not started since (the rule: agents/contract/fencing.py).

Where the id lives:

- with ``--s3``: ``s3://bucket/prefix/_attempt`` (:class:`S3Store`), the one place both
  nodes of a move can reach;
- else ``OUT/_attempt`` (:class:`FileStore`): on a shared directory, the same file for both.

Ordering rules:

1. :meth:`Fence.claim` runs before the worker restores or writes anything: it reads the id
   there; a newer one, or any id of another node when this attempt made its own id (a
   restart on the node the job was moved off: contract/fencing.py, ``refusal``), means this
   attempt is stale and it stops before its first write (:class:`Fenced`); otherwise it writes
   its own, then removes the completion markers the last run left (``on_claim``): from then on
   no marker says more than the output holds, and the uploader sends nothing before. Where
   the store cannot be written yet (a bucket not there, S3 down), the worker starts all the
   same (uploads never block generation) and the id is written before its first upload:
   nothing of this attempt reaches the output before its id does.
2. :meth:`Fence.check` runs before every shard upload and every done-set upload (the S3
   uploader calls it), and every ``interval_s`` in between: the first newer id it reads stops
   the worker. Nothing the worker sends after that moment reaches the output.
3. A read that fails (the node cut off from S3) fences nobody: the worker goes on, and checks
   again before it sends anything, which it cannot either while the link is down.

What it does not cover: a put already under way when the new attempt claimed (the check and
the put are two requests; S3 has no compare-and-swap across keys): it may still land, and
its records then repeat ones the new attempt makes. The window is one upload's length.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Optional, Protocol

from ...contract.atomic import atomic_write_bytes, atomic_write_json
from ...contract.fencing import FENCE_NAME, FENCED_NOTE, is_newer, keep_hold, moved_to, refusal

log = logging.getLogger("gpudeck.fence")


class FenceUnavailable(OSError):
    """The attempt id could not be written yet: nothing may be sent until it is (retried)."""


class Fenced(RuntimeError):
    """A newer attempt of this job writes the output now: this one must stop."""

    def __init__(self, mine: str, theirs: str, where: str, why: str = "") -> None:
        self.mine, self.theirs, self.where = mine, theirs, where
        self.why = why or "the job was moved"
        held = (f"attempt {theirs}, newer than this one ({mine})" if is_newer(theirs, mine)
                else f"another node's attempt {theirs} (this one, {mine}, was not handed over by a move)")
        super().__init__(f"fenced: {where} holds {held}: {self.why}; stopping without writing more")


class Store(Protocol):
    where: str

    def read(self) -> Optional[str]: ...

    def write(self, value: str) -> None: ...


class FileStore:
    """``OUT/_attempt``: replaced atomically."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FENCE_NAME)
        self.where = self.path

    def read(self) -> Optional[str]:
        try:
            with open(self.path, "rb") as f:
                return f.read(256).decode(errors="replace").strip() or None
        except FileNotFoundError:
            return None

    def write(self, value: str) -> None:
        atomic_write_bytes(self.path, (value + "\n").encode())


class S3Store:
    """``<prefix>/_attempt`` in S3."""

    def __init__(self, client: Any, bucket: str, key: str) -> None:
        self.client, self.bucket, self.key = client, bucket, key
        self.where = f"s3://{bucket}/{key}"

    def read(self) -> Optional[str]:
        from .s3sync.remote import _is_missing
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.key)["Body"].read(256)
        except Exception as exc:
            if _is_missing(exc):
                return None
            raise
        return body.decode(errors="replace").strip() or None

    def write(self, value: str) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.key, Body=(value + "\n").encode())


class Fence:
    """One attempt's hold on its output. Thread-safe; :attr:`fenced` is set once and stays."""

    def __init__(self, store: Store, attempt_id: str, interval_s: float = 5.0, given: bool = True,
                 on_claim: Optional[Callable[[], None]] = None) -> None:
        self.store = store
        self.attempt_id = attempt_id
        self.interval_s = interval_s
        self.given = given  # the id came with a move ($GPUDECK_ATTEMPT_ID), not made by this worker
        self.on_claim = on_claim  # run once the id is written: removes the last run's markers
        self.fenced: Optional[Fenced] = None
        self.claimed = False
        self._next = 0.0
        self._lock = threading.Lock()

    def claim(self) -> None:
        """Rule 1: stop if a newer attempt is there, else write this one's id. Errors of the
        store propagate (a worker that cannot write its id does not start)."""
        theirs = self.store.read()
        if not self.given:  # a restart on the node a move placed the job on keeps the hold
            self.attempt_id = keep_hold(theirs, self.attempt_id)
        why = refusal(theirs, self.attempt_id, self.given)
        if why is not None:
            assert theirs is not None
            raise self._fence(theirs, why)
        self.store.write(self.attempt_id)
        if self.on_claim is not None:
            self.on_claim()
        self.claimed = True
        self._next = time.monotonic() + self.interval_s
        log.info("attempt %s holds %s", self.attempt_id, self.store.where)

    def check(self) -> None:
        """Rule 2: raise :class:`Fenced` when a newer attempt's id is there. A read that fails
        is logged and fences nobody (rule 3). Not claimed yet: claim now; FenceUnavailable
        when that fails (the caller sends nothing, and retries)."""
        with self._lock:
            if self.fenced is not None:
                raise self.fenced
            if not self.claimed:
                try:
                    self.claim()
                except Fenced:
                    raise
                except Exception as exc:
                    self._next = time.monotonic() + self.interval_s
                    raise FenceUnavailable(f"cannot write the attempt id to {self.store.where} yet: {exc}") from None
                return
            try:
                theirs = self.store.read()
            except Exception as exc:  # noqa: BLE001 -- cut off: go on, check again before sending
                log.warning("cannot read %s to check the fence: %s", self.store.where, exc)
                return
            finally:
                self._next = time.monotonic() + self.interval_s
            if is_newer(theirs, self.attempt_id):
                assert theirs is not None
                fenced = self._fence(theirs, moved_to(theirs))
                log.error("%s", fenced)
                raise fenced

    def _fence(self, theirs: str, why: str) -> Fenced:
        """This attempt is fenced for good; the agent reads why from the job's directory
        (``fenced.json``: the job's state then says ``fenced`` and where the job went)."""
        self.fenced = Fenced(self.attempt_id, theirs, self.store.where, why)
        job_dir = os.environ.get("GPUDECK_JOB_DIR")
        if job_dir:
            try:
                atomic_write_json(os.path.join(job_dir, FENCED_NOTE),
                                  {"why": why, "theirs": theirs, "mine": self.attempt_id, "where": self.store.where,
                                   "at": time.time()}, fsync=False)
            except OSError as exc:  # the exit code says fenced all the same
                log.warning("cannot write %s in %s: %s", FENCED_NOTE, job_dir, exc)
        return self.fenced

    def check_due(self) -> None:
        """:meth:`check` when ``interval_s`` passed since the last one."""
        if self.fenced is not None:
            raise self.fenced
        if time.monotonic() >= self._next:
            try:
                self.check()
            except FenceUnavailable as exc:
                log.warning("%s", exc)
