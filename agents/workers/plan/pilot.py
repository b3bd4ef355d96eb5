"""The pilot of ``gpudeck plan generate``: the sampled prompts sent through the generate
worker itself (:class:`Generator`: its server pool, retries, shard writer and done-set),
so that every pilot completion is a real record of the output and the run that follows
skips it.

The levels run one after the other without draining in between: the first prompts go out
with 1 in flight per server, the next ones with 32, and so on. A level moves on when its
share of the sample has gone out and it has been held full for ``hold_s`` seconds; until
then it takes prompts from a reserve (a second sample), so that a fast server is counted
over as long a window as a slow one. Each completion records its
latency, its tokens and the number of requests in flight per server averaged over its life
(the ramp-up and the drain make that differ from the level), which is what stats.py fits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

from ..generate.generator import Generator
from ..generate.options import EXIT_OK, EXIT_TERM, Options
from ..generate.prompts import Prompt
from .sample import split_levels

log = logging.getLogger("gpudeck.plan")


@dataclass
class Completion:
    level: int  # index into the levels
    start: float
    end: float
    latency_s: float
    k: float  # requests in flight per server, averaged over the request's life
    tokens: int
    reasoning_tokens: Optional[int]
    cut: bool
    empty: bool
    bytes: int = 0  # of its shard record


@dataclass
class PilotResult:
    completions: list[Completion] = field(default_factory=list)
    failed: int = 0
    wall_s: list[float] = field(default_factory=list)  # per level: first start to last end
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (time, requests in flight after it)
    status: int = EXIT_OK
    first_request_at: Optional[float] = None  # wall-clock time of the first request sent


class _Gate:
    """At most ``limit`` requests in flight (the limit only grows), and the integral of the
    number in flight over time, from which each request's average load is read."""

    def __init__(self) -> None:
        self.limit = 0
        self.active = 0
        self.full_at: Optional[float] = None  # when the current limit was first reached
        self.area = 0.0
        self._t = time.monotonic()
        self.timeline: list[tuple[float, float]] = []
        self._cond = asyncio.Condition()

    def _account(self) -> float:
        now = time.monotonic()
        self.area += self.active * (now - self._t)
        self._t = now
        return now

    async def acquire(self) -> tuple[float, float]:
        """Wait for room; (the time, the area) when the request starts."""
        async with self._cond:
            await self._cond.wait_for(lambda: self.active < self.limit)
            now = self._account()
            self.active += 1
            if self.full_at is None and self.active >= self.limit:
                self.full_at = now
            self.timeline.append((now, self.active))
            return now, self.area

    async def release(self) -> tuple[float, float]:
        async with self._cond:
            now = self._account()
            self.active -= 1
            self.timeline.append((now, self.active))
            self._cond.notify_all()
            return now, self.area

    async def raise_to(self, limit: int) -> None:
        if limit > self.limit:
            async with self._cond:
                self.limit, self.full_at = limit, None
                self._cond.notify_all()

    def held_s(self) -> float:
        """Seconds since the current limit was first reached (0 before)."""
        return 0.0 if self.full_at is None else time.monotonic() - self.full_at


class PilotGenerator(Generator):
    def __init__(self, opts: Options, levels: list[int]) -> None:
        opts.concurrency = max(levels)
        super().__init__(opts)
        self.levels, self.n_servers = levels, len(opts.servers)
        self.pilot: list[Prompt] = []
        self.reserve: list[list[Prompt]] = [[] for _ in levels]  # each level's own
        self.chunks: list[int] = []
        self.hold_s = 0.0
        self.level = 0  # the level now sent at
        self.taken = [0] * len(levels)  # prompts each level started
        self.result = PilotResult(wall_s=[0.0] * len(levels))
        self._level_span = [[float("inf"), 0.0] for _ in levels]
        self._gate = _Gate()
        self._raw: dict[str, dict] = {}
        self._bytes: dict[str, int] = {}

    def prepare(self) -> None:
        super().prepare()
        add = self.writer.add

        def measured_add(pid, line, *args, **kwargs):  # the writer's own arguments, passed on whole
            self._bytes[pid] = len(line) + 1
            return add(pid, line, *args, **kwargs)

        setattr(self.writer, "add", measured_add)  # the instance's own, in place of its method

    def set_prompts(self, prompts: list[Prompt], chunks: list[int], reserve: Sequence[Prompt] = (),
                    hold_s: float = 0.0) -> None:
        """The prompts to send (after :meth:`prepare`, which opens the done-set they are
        sampled against), how many of them each level starts, and the ``reserve`` a level
        draws on once its own are out while it has not yet been held full ``hold_s`` seconds
        (split over the levels as the prompts are: a low level that fills slowly does not take
        what the top one needs)."""
        self.pilot = list(reversed(prompts))  # popped from the end
        rest = list(reversed(reserve))
        self.reserve = [[rest.pop() for _ in range(k)][::-1] for k in split_levels(len(rest), self.levels)]
        self.chunks, self.hold_s = list(chunks), hold_s

    def _write_resume_hint(self) -> None:
        """The pilot takes prompts out of file order: the resume hint (a low-water mark of the
        file) stays where the last real run left it."""

    def _current(self) -> int:
        """The level to send at now: the next one once this one's share is out and it has been
        held full long enough (or the reserve is empty)."""
        while (self.level + 1 < len(self.levels) and self.taken[self.level] >= self.chunks[self.level]
               and (not self.reserve[self.level] or self._gate.held_s() >= self.hold_s)):
            self.level += 1
        return self.level

    def _take(self) -> Optional[tuple[int, Prompt]]:
        """(the level, the next prompt), or None when the pilot has sent all it will."""
        j = self._current()
        if self.taken[j] < self.chunks[j] and self.pilot:
            p = self.pilot.pop()
        elif self.reserve[j] and self._gate.held_s() < self.hold_s:
            p = self.reserve[j].pop()
        else:
            return None
        self.taken[j] += 1
        return j, p

    async def _worker(self) -> None:
        gate = self._gate
        while not self._stop.is_set():
            await gate.raise_to(self.levels[self._current()] * self.n_servers)
            start, area0 = await gate.acquire()
            if self.result.first_request_at is None:
                self.result.first_request_at = time.time()
            got = None if self._stop.is_set() else self._take()
            if got is None:
                await gate.release()
                return
            level, p = got
            self.inflight.add(p.id)
            try:
                await self._process(p)
            finally:
                end, area1 = await gate.release()
                self._measure(p.id, level, start, end, (area1 - area0))

    def _measure(self, pid: str, level: int, start: float, end: float, area: float) -> None:
        r = self._raw.pop(pid, None)
        if r is None:  # given up on (a stop leaves it to the next run)
            self.result.failed += pid in self.failed
            return
        span = self._level_span[level]
        span[0], span[1] = min(span[0], start), max(span[1], end)
        lat = end - start
        k = area / lat / self.n_servers if lat > 0 else float(self.levels[level])
        tokens = r["completion_tokens"] if isinstance(r["completion_tokens"], int) else 0
        rt = r.get("reasoning_tokens")
        self.result.completions.append(Completion(
            level=level, start=start, end=end, latency_s=lat, k=k, tokens=tokens, reasoning_tokens=rt if isinstance(rt, int) else None,
            cut=r["finish_reason"] == "length", empty=not (r["answer"] or "").strip(),
            bytes=self._bytes.pop(pid, 0)))

    def _record(self, p: Prompt, server_url: str, r: dict) -> None:
        self._raw[p.id] = r
        super()._record(p, server_url, r)

    def _exit_status(self, complete: bool, uploads_ok: bool) -> int:
        self.result.wall_s = [max(0.0, b - a) if b else 0.0 for a, b in self._level_span]
        self.result.timeline = [(t, k / self.n_servers) for t, k in self._gate.timeline]
        q = self.progress.quality
        log.info("pilot: %d completions, %d failed; %d done in %s", self.progress.completed_now, q["errors"],
                 len(self.done), self.out)
        self.result.status = EXIT_TERM if self._terminated else EXIT_OK
        return self.result.status
