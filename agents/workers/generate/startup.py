"""The start of a generation run (:class:`Startup`, a mixin of :class:`~.generator.Generator`):
everything before the first request, in :meth:`Startup.prepare`. The output directory's lock,
the fence's claim (common/fence.py: ``OUT/_attempt``, or in S3 with ``--s3``), stale temp
files removed, the prompts' audit and id scan, the S3 restore, the done-set (rebuilt from the
shards when it is missing), the open shard's recovery and the resume hint's reader.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..common.dirlock import DirLock
from ..common.fence import Fence, Fenced, FileStore
from ..common.audit_gate import audit_verdict
from ..common.doneset import DoneSet
from ..common import success
from ..common.parts import part_name
from .options import Options
from .progress import GenerateProgress
from .prompts import PromptReader
from .resume import ResumeHint
from .servers import UsageError
from .shards import NAMES, ShardWriter, ids_in_jsonl

if TYPE_CHECKING:
    from ..common.s3sync.uploader import ShardUploader

log = logging.getLogger("gpudeck.generate")

DONE_FILE = "done.txt"
_STALE_TMP = re.compile(r"\.\d+\.tmp$|^\.(done\.txt\.download|orphan\.download)$")


class Startup:
    """The generator's start: what :meth:`prepare` sets up, read by the loop and its end."""

    o: Options
    out: str
    progress: GenerateProgress
    hint: ResumeHint
    done: DoneSet
    writer: ShardWriter
    uploader: Optional[ShardUploader]
    reader: Optional[PromptReader]
    fence: Optional[Fence]
    fenced: Optional[Fenced]
    attempt_id: str
    attempt_given: bool
    total_estimate: int
    _part_lines: Optional[int]
    _lock: DirLock
    # the writer's and the reader's callbacks, the generator's own
    _is_taken: Callable[[str], bool]
    _shard_closed: Callable[[str, list[str]], None]
    _durable: Callable[[list[Any]], None]

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
