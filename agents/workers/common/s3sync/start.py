"""A worker's ``--s3`` start-up, the same for every program: before it touches its own
done-set, a fresh node (no local done-set) gets it back from S3 (rule 3 of the package
docstring); the shard numbers already under the prefix are taken (rule 5); and the uploader
is made, ready to be given the closed shards that the manifest does not list and started.

With an attempt id, the fence (common/fence.py) is claimed first of all, before the restore:
a stale attempt stops there, before it reads or writes anything, and the uploader checks it
before everything it sends.

The programs differ only in how hard they try (``attempts``), and whether a failed listing
on a node that already has its done-set stops the run (extract) or goes on with the
numbers this node's own manifest names (generate: its uploads are retried anyway).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, TypeVar

from .remote import (Restored, S3Error, S3Location, describe_error, list_objects, make_client,
                     read_manifest, restore_done_set, shards_of)
from .uploader import ShardUploader
from ..fence import Fence, Fenced, S3Store
from ..shards import ShardNames

log = logging.getLogger("gpudeck.s3")
T = TypeVar("T")


@dataclass
class S3Start:
    uploader: ShardUploader  # made, not started: queue what the manifest lacks, then start it
    taken: set[int]  # shard numbers that must not be used again (in S3, or named by the manifest)
    restored: Optional[Restored]  # what a fresh node got back; None on a first run or a known node
    fence: Optional[Fence] = None  # this attempt's hold on the prefix, claimed
    stored: Optional[dict[str, int]] = None  # the prefix's objects at the start (name -> bytes); None: not listed

    @property
    def next_number(self) -> int:
        return max(self.taken) + 1 if self.taken else 0


def with_retries(fn: Callable[[], T], what: str, attempts: int = 5) -> T:
    """``fn()``, tried ``attempts`` times on S3Error, waiting 1, 2, 4... s between tries."""
    for i in range(attempts):
        try:
            return fn()
        except S3Error as exc:
            if i == attempts - 1:
                raise
            delay = 2 ** i
            log.warning("%s failed: %s; retrying in %d s", what, exc, delay)
            time.sleep(delay)
    raise AssertionError("attempts must be at least 1")


def start_s3(out_dir: str, loc: S3Location, *, endpoint_url: Optional[str], done_name: str, names: ShardNames,
             ids_of_file: Callable[[str], Iterable[str]], restore_attempts: int = 1,
             list_attempts: tuple[int, int] = (1, 1), local_numbers_on_failure: bool = False,
             attempt_id: Optional[str] = None, fence_interval_s: float = 5.0, given: bool = True) -> S3Start:
    """Restore (on a fresh node), list the taken numbers, make the uploader. ``ids_of_file(path)``
    reads the ids of one shard file of this program. ``list_attempts``: (fresh node, known
    node). ``local_numbers_on_failure``: on a known node a listing that keeps failing is
    logged and the manifest's numbers are used. ``attempt_id``: claim the fence first (Fenced
    when a newer attempt holds the prefix, or another node's when ``given`` is false: the id
    was made here, contract/fencing.py); the claim removes the last run's completion markers,
    local and under the prefix. Raises S3Error otherwise."""
    client = make_client(endpoint_url)
    fence = None
    if attempt_id is not None:
        from ....contract.fencing import FENCE_NAME
        from .. import success
        fence = Fence(S3Store(client, loc.bucket, loc.key(FENCE_NAME)), attempt_id, fence_interval_s, given=given,
                      on_claim=lambda: success.clear(out_dir, client, loc))

        try:
            fence.claim()
        except Fenced:
            raise
        except Exception as exc:  # the uploader writes it before its first upload (common/fence.py, rule 1)
            success.clear(out_dir)  # this node's own copy goes now; the one in S3 with the claim
            log.warning("cannot write the attempt id to %s yet (%s); it goes up before the first upload",
                        loc.url(FENCE_NAME), describe_error(exc))
    fresh = not os.path.exists(os.path.join(out_dir, done_name))
    restored = None
    if fresh:
        restored = with_retries(lambda: restore_done_set(client, loc, out_dir, done_name, ids_of_file),
                                "restoring the done-set from S3", attempts=restore_attempts)
        if restored is None:
            log.info("no done-set in %s: a first run", loc.url())
        else:
            log.info("restored the done-set from %s: %d ids, %d shards in S3%s", loc.url(), restored.ids,
                     restored.shards, f", orphans read: {', '.join(restored.orphans)}" if restored.orphans else "")
    uploader = ShardUploader(out_dir, loc, ids_of=lambda n: ids_of_file(os.path.join(out_dir, n)),
                             endpoint_url=endpoint_url, fence=fence)
    stored: Optional[dict[str, int]] = None
    try:
        # every number in S3 is taken, whether this node or another uploaded it; the one listing
        # of the run is also what the prefix holds (what earlier runs left there too): the
        # uploader counts its own uploads on top of it, never listing again
        stored = with_retries(lambda: list_objects(client, loc), f"listing {loc.url()}",
                              attempts=list_attempts[0] if fresh else list_attempts[1])
        taken = set(shards_of(stored))
    except S3Error as exc:
        if fresh or not local_numbers_on_failure:
            raise
        # this node's own state says which numbers it used; uploads will be retried
        log.warning("%s; going on with the local state (the numbers this node uploaded are kept)", exc)
        taken = {n for name in read_manifest(out_dir) if (n := names.number(name)) is not None}
    uploader.inventory(stored)
    return S3Start(uploader, taken, restored, fence, stored)
