"""The end of a generation run (:class:`Finish`, a mixin of :class:`~.generator.Generator`):
once the workers stopped, the backlog written, the last flush, the open shard closed (final
when every prompt is done), the uploads drained, and the exit status. A clean end writes the
``_SUCCESS`` marker, or ``_QUALITY`` when fewer than ``--min-useful-pct`` of the records are
useful (exit 4); a fenced run writes nothing more and exits 5 (``EXIT_FENCED``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from ...contract.fencing import EXIT_FENCED
from ...contract.jobs import MARKER, QUALITY_MARKER
from ...contract.plain import to_plain
from ..common import success
from ..common.dirlock import DirLock
from ..common.doneset import DoneSet
from ..common.fence import Fenced
from .options import EXIT_FAIL, EXIT_OK, EXIT_QUALITY, EXIT_TERM, Options
from .progress import GenerateProgress
from .prompts import PromptReader
from .quality import PROBLEMS, useful_pct
from .shards import ShardWriter

if TYPE_CHECKING:
    from ..common.s3sync.uploader import ShardUploader

log = logging.getLogger("gpudeck.generate")


class Finish:
    """The generator's end: :meth:`_finish` returns the exit status."""

    o: Options
    out: str
    progress: GenerateProgress
    done: DoneSet
    writer: ShardWriter
    uploader: Optional[ShardUploader]
    reader: Optional[PromptReader]
    fenced: Optional[Fenced]
    inflight: set[str]
    failed: set[str]
    _backlog: list[tuple[str, bytes, tuple]]
    _terminated: bool
    _interrupted: bool
    gave_up: bool
    _lock: DirLock
    # the generator's own (and the start's)
    _write_backlog: Callable[[], bool]
    _write_resume_hint: Callable[[], None]
    total: Callable[[], int]
    _s3_loc: Callable[[], Any]


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
