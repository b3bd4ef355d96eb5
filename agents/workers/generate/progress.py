"""generate's progress document (common/progress.py says where it goes and how), every
second: done, total, tokens, tokens/s over the last 30 s, the quality counters, the servers'
health and the uploads. Tokens and three quality counters carry over from the previous
attempt's document, so a relaunch keeps counting where the last one stopped.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import time
from typing import Any, Optional

from gpudeck.agents.workers.common.progress import (GENERATE_QUALITY, GENERATE_QUALITY_KEPT, quality_counters,
                                                    write_progress)

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
        self.retries = 0
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
        if isinstance(doc.get("tokens"), int):
            self.tokens = doc["tokens"]
        for k in GENERATE_QUALITY_KEPT:
            v = (doc.get("quality") or {}).get(k)
            if isinstance(v, int):
                self.quality[k] = v

    def record(self, r: dict, thinking: Optional[bool]) -> None:
        """Count one completion (what :func:`servers.parse_completion` returned)."""
        self.completed_now += 1
        n = r["completion_tokens"]
        if isinstance(n, int):
            self.tokens += n
        q = self.quality
        if not r["answer"].strip():
            q["empty_answer"] += 1
        if not r["reasoning"] and thinking is not False:
            q["no_reasoning"] += 1
        if r["finish_reason"] == "length":
            q["cut_at_max_tokens"] += 1

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
        doc = {
            "done": len(gen.done), "total": gen.total(), "tokens": self.tokens,
            "tokens_per_s": round(tps, 1) if tps is not None else None, "updated_at": time.time(),
            "quality": dict(self.quality), "in_flight": len(gen.inflight), "completed_this_run": self.completed_now,
            "retries": self.retries, "prompts": self.prompts, "out": self.out,
            "blocked": gen.blocked, "finished": final and gen.total_exact is not None and not gen.failed and in_s3,
            "servers": [s.to_json(now) for s in gen.pool.servers],
            "uploads": uploads.to_json() if uploads is not None else None,
        }
        write_progress(self.path, doc, log)
        if final or now - self._last_status >= 30.0:
            self._last_status = now
            resting = gen.pool.resting(now)
            up = doc["uploads"]
            log.info("done %d/%d, %s tok/s, in flight %d, errors %d, retries %d%s%s", doc["done"], doc["total"],
                     "-" if tps is None else f"{tps:,.1f}", doc["in_flight"], self.quality["errors"], self.retries,
                     f", resting: {', '.join(resting)}" if resting else "",
                     f", uploads pending {up['pending']}" if up else "")
