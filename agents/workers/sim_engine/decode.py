"""How the simulated server spends decode time, and how long its answers are (stdlib only).

:class:`SharedDecoder`: the requests running share the server's decode throughput, as a
batching engine does. Each one decodes at ``min(tok_s, batch_tok_s / running)`` tokens/s:
alone it is limited by ``tok_s`` (memory-bound decoding), and past ``batch_tok_s / tok_s``
requests the server's total stays at ``batch_tok_s`` and every request slows down. Time is
kept in "virtual tokens" (the tokens each running request has decoded since the start), so
a start or a finish costs O(log n), not O(running).

:func:`output_length`: uniform over ``MIN-MAX``, or, with a median, log-normal (most answers
near the median, a long tail that the client's max_tokens cuts), both drawn from the
prompt's hash so the same prompt always gets the same length.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import random
import time
from typing import Optional


class SharedDecoder:
    def __init__(self, tok_s: float = 0.0, batch_tok_s: float = 0.0) -> None:
        self.tok_s, self.batch_tok_s = tok_s, batch_tok_s
        self._v = 0.0  # virtual tokens decoded by every running request so far
        self._t = time.monotonic()
        self._heap: list[tuple[float, int, asyncio.Future]] = []
        self._seq = itertools.count()
        self._timer: Optional[asyncio.TimerHandle] = None

    @property
    def running(self) -> int:
        return len(self._heap)

    def rate(self, running: int) -> float:
        """Tokens/s of each request while ``running`` requests decode."""
        r = self.batch_tok_s / max(1, running) if self.batch_tok_s > 0 else math.inf
        return min(r, self.tok_s) if self.tok_s > 0 else r

    def _advance(self, now: float) -> None:
        if self._heap:
            self._v += (now - self._t) * self.rate(len(self._heap))
        self._t = now

    async def decode(self, n_tokens: int) -> None:
        """Return when ``n_tokens`` are decoded at the shared speed."""
        if n_tokens <= 0 or math.isinf(self.rate(1)):
            return
        self._advance(time.monotonic())
        fut = asyncio.get_running_loop().create_future()
        entry = (self._v + n_tokens, next(self._seq), fut)
        heapq.heappush(self._heap, entry)
        self._reschedule()
        try:
            await fut
        finally:
            if not fut.done():  # cancelled (the client went away): stop decoding it
                self._advance(time.monotonic())
                self._heap.remove(entry)
                heapq.heapify(self._heap)
                self._reschedule()

    def _reschedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._heap:
            wait = (self._heap[0][0] - self._v) / self.rate(len(self._heap))
            self._timer = asyncio.get_running_loop().call_later(max(0.0, wait), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._advance(time.monotonic())
        slack = self.rate(len(self._heap)) * 0.0005  # a timer that fires half a millisecond early
        while self._heap and self._heap[0][0] <= self._v + slack:
            _, _, fut = heapq.heappop(self._heap)
            if not fut.done():
                fut.set_result(None)
        self._reschedule()


def output_length(seed: int, lo: int, hi: int, median: Optional[float] = None, sigma: float = 1.0) -> int:
    """The completion length of the prompt whose hash is ``seed``."""
    if median is None:
        return lo + seed % max(1, hi - lo + 1)
    n = round(random.Random(seed).lognormvariate(math.log(median), sigma))
    return max(lo, min(hi, n))
