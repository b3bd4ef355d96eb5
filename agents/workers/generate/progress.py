"""generate's progress document (common/progress.py says where it goes and how), every
second: done, total, tokens, tokens/s over the last 30 s, the quality counters, the useful
records, the servers' health and the uploads. Tokens, three quality counters and the useful
records carry over from the previous attempt's document, so a relaunch keeps counting where
the last one stopped.

``useful`` of ``useful_of``: records that are neither cut at max_tokens, nor empty, nor ended
by the server (:func:`is_useful`), counted when their ids reach the done-set (the shard
writer's ``on_durable``), never when they are handed to the writer. So the count never holds
a record that a kill -9 then loses and the next start makes again; what a kill may cost is
the other way: records made durable after the last document was written (at most a second's
worth), or ids that recovery adds from the open shard, are in the done-set and not counted.
The counters are a report, like the rest of this document; the done-set stays the authority,
and nothing in the order of writes depends on them.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import time
from typing import Any, Optional

from ...contract.documents import ProgressDoc
from ...contract.wire import ServerHealth, Uploads
from ..common.progress import (GENERATE_QUALITY, GENERATE_QUALITY_KEPT, quality_counters,
                                                    write_progress)
from .quality import NOT_USEFUL_FINISH, Window, is_useful, problems

__all__ = ["GenerateProgress", "NOT_USEFUL_FINISH", "is_useful"]

log = logging.getLogger("gpudeck.generate")


class GenerateProgress:
    """The run's counters and the document made of them."""

    def __init__(self, path: str, prompts: str, out: str) -> None:
        self.path = path
        self.prompts = os.path.abspath(prompts)
        self.out = out
        self.tokens = 0
        self.quality = quality_counters(GENERATE_QUALITY)
        self.completed_now = 0
        self.useful = 0  # useful records among ...
        self.useful_of = 0  # ... those counted, as their ids reached the done-set
        self.retries = 0
        self.window = Window()  # this attempt's last completions' problems (quality.py)
        self._tok_window: collections.deque[tuple[float, int]] = collections.deque()
        self._last_status = 0.0

    def load_previous(self) -> None:
        """Tokens and the kept quality counters of the last attempt over the same files."""
        try:
            with open(self.path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return
        if doc.get("prompts") not in (None, self.prompts) or doc.get("out") != self.out:
            return
        for key in ("tokens", "useful", "useful_of"):
            if isinstance(doc.get(key), int):
                setattr(self, key, doc[key])
        for k in GENERATE_QUALITY_KEPT:
            v = (doc.get("quality") or {}).get(k)
            if isinstance(v, int):
                self.quality[k] = v

    def record(self, pid: str, r: dict, thinking: Optional[bool]) -> tuple[str, ...]:
        """Count one completion (what :func:`servers.parse_completion` returned) of the prompt
        ``pid``: its tokens, its quality problems (quality.py), in total and in the window.
        Returns the problems found (the shard's figures count them too)."""
        self.completed_now += 1
        n = r["completion_tokens"]
        if isinstance(n, int):
            self.tokens += n
        q = self.quality
        found = problems(r)
        for p in found:
            q[p] += 1
        self.window.add(pid, found)
        if not r["reasoning"] and thinking is not False:
            q["no_reasoning"] += 1
        return found

    def durable(self, useful: bool) -> None:
        """One record whose id is now in the done-set."""
        self.useful_of += 1
        self.useful += useful

    def tokens_per_s(self, now: float) -> Optional[float]:
        self._tok_window.append((now, self.tokens))
        while len(self._tok_window) > 2 and now - self._tok_window[0][0] > 30.0:
            self._tok_window.popleft()
        (t0, k0), (t1, k1) = self._tok_window[0], self._tok_window[-1]
        return (k1 - k0) / (t1 - t0) if t1 > t0 else None

    def write(self, gen: Any, final: bool = False) -> None:
        """Write the document of ``gen`` (the Generator); every 30 s, and at the end, a log line."""
        now = time.monotonic()
        tps = self.tokens_per_s(now)
        uploads = gen.uploader.status() if gen.uploader is not None else None
        in_s3 = uploads is None or not (uploads.pending or uploads.done_set_pending)
        up = uploads.to_json() if uploads is not None else None
        doc = ProgressDoc(done=len(gen.done), total=gen.total(), tokens=self.tokens,
                          tokens_per_s=round(tps, 1) if tps is not None else None, updated_at=time.time(),
                          quality=dict(self.quality), useful=self.useful, useful_of=self.useful_of,
                          servers=[ServerHealth(**s.to_json(now)) for s in gen.pool.servers],
                          uploads=Uploads(**up) if up is not None else None, blocked=gen.blocked,
                          window=self.window.document())
        extra = {
            "in_flight": len(gen.inflight), "completed_this_run": self.completed_now,
            "retries": self.retries, "prompts": self.prompts, "out": self.out,
            "finished": final and gen.total_exact is not None and not gen.failed and in_s3,
        }
        write_progress(self.path, doc, log, **extra)
        if final or now - self._last_status >= 30.0:
            self._last_status = now
            resting = gen.pool.resting(now)
            log.info("done %d/%d, %s tok/s, in flight %d, errors %d, retries %d%s%s", doc.done, doc.total,
                     "-" if tps is None else f"{tps:,.1f}", extra["in_flight"], self.quality["errors"], self.retries,
                     f", resting: {', '.join(resting)}" if resting else "",
                     f", uploads pending {up['pending']}" if up else "")
