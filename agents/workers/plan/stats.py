"""The arithmetic of a generation plan (stdlib only): percentiles, the server's speed
fitted on a pilot, the projection of a whole run from it, and its bootstrap interval.

The model: a server decoding ``k`` requests at once gives each of them ``rate(k)`` output
tokens/s (continuous batching shares the decode steps, so a request's speed depends on the
load while it runs), after a fixed cost ``a`` per request (queueing, prefill, the network).
``rate`` is piecewise linear between the levels tried. The pilot knows, from its own gate,
exactly how many requests were in flight at every moment, so a completion of ``n`` tokens
that ran from ``s`` to ``e`` says ``n = integral over [s + a, e] of rate(k(t)) dt``: one
linear equation in the rates at the levels. Least squares over the pilot's completions
gives them (and ``a``, by a search over the values that fit best), whatever the ramp-ups
and drains of the pilot were.

In steady state a server keeps ``c`` requests in flight, so by Little's law it completes
``c / E[latency]`` per second, with ``E[latency] = a + E[n] / rate(c)`` and ``E[n]`` the
mean output length over the whole pilot. A run of ``M`` prompts on ``S`` servers then takes
``M * E[latency] / (S * c)`` seconds, plus the tail: when the last prompt is handed out,
every slot still finishes what it holds, and the longest of those decides the end
(:func:`tail_s`, a list schedule simulated on lengths drawn from the pilot).

The model prices the server alone: a latency counted from the gate to the record misses the
client's own gap between one request's end and the next one's start, which decides the pace
of a server that answers fast (a sim-engine answering every request in 200 ms: the model
said 54.7 completions/s, the run made 64.9/s). So where the pilot held a level full, the
level's rate is counted, not modelled (:func:`steady_windows`): the completions between the
moment its concurrency was first full and its last refill (no ramp-up, no drain), per
second, corrected by the model from that window's mix of lengths to the pilot's
(:func:`project_steady`). The model stays for the levels the pilot never filled, the tail and
the lengths' correction.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import dataclass
from typing import Optional, Sequence


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """The ``q``-th percentile (0..100), linear between ranks; None for no values."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def known(v: Optional[float], what: str) -> float:
    """A mean or percentile of values that are there (a pilot's, a bootstrap's)."""
    if v is None:
        raise ValueError(f"no values for {what}")
    return v


@dataclass(frozen=True)
class Obs:
    """One completion of the pilot."""
    start: float
    end: float
    tokens: int

    @property
    def latency_s(self) -> float:
        return self.end - self.start


class Timeline:
    """Requests in flight per server over time: ``points`` are (time, in flight after it)."""

    def __init__(self, points: Sequence[tuple[float, float]]) -> None:
        self.t = [p[0] for p in points]
        self.k = [p[1] for p in points]

    def integrals(self, s: float, e: float, knots: Sequence[float]) -> list[float]:
        """For each hat function of ``knots``, its integral over [s, e] of k(t)."""
        out = [0.0] * len(knots)
        i = max(0, bisect.bisect_right(self.t, s) - 1)
        while i < len(self.t) and self.t[i] < e:
            lo = max(s, self.t[i])
            hi = min(e, self.t[i + 1]) if i + 1 < len(self.t) else e
            if hi > lo:
                for j, w in enumerate(hat(self.k[i], knots)):
                    out[j] += w * (hi - lo)
            i += 1
        return out


def hat(k: float, knots: Sequence[float]) -> list[float]:
    """Weights of the piecewise-linear basis at ``k`` (flat beyond the end knots)."""
    w = [0.0] * len(knots)
    if k <= knots[0]:
        w[0] = 1.0
    elif k >= knots[-1]:
        w[-1] = 1.0
    else:
        j = bisect.bisect_right(knots, k) - 1
        f = (k - knots[j]) / (knots[j + 1] - knots[j])
        w[j], w[j + 1] = 1.0 - f, f
    return w


@dataclass(frozen=True)
class Fit:
    a: float  # seconds per request
    knots: tuple[float, ...]
    rates: tuple[float, ...]  # output tokens/s of each request at each knot

    def rate(self, k: float) -> float:
        return sum(w * r for w, r in zip(hat(k, self.knots), self.rates))

    def latency(self, tokens: float, c: float) -> float:
        return self.a + tokens / self.rate(c)

    def mean_latency(self, mean_tokens: float, c: float) -> float:
        return self.latency(mean_tokens, c)


def _solve(m: list[list[float]], v: list[float]) -> Optional[list[float]]:
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(v)
    a = [row[:] + [v[i]] for i, row in enumerate(m)]
    scale = max([1e-300] + [abs(x) for row in m for x in row])
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[piv][col]) < 1e-10 * scale:
            return None
        a[col], a[piv] = a[piv], a[col]
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col])]
    return [a[i][n] / a[i][i] for i in range(n)]


def _rates(rows: Sequence[tuple[list[float], int]]) -> tuple[Optional[list[float]], float]:
    """Least squares of tokens = rows . rates, each row weighted by 1/tokens (relative
    errors); (rates or None, the weighted residual)."""
    p = len(rows[0][0])
    m = [[0.0] * p for _ in range(p)]
    v = [0.0] * p
    for x, n in rows:
        w = 1.0 / max(1, n)
        for i in range(p):
            v[i] += w * x[i] * n
            for j in range(p):
                m[i][j] += w * x[i] * x[j]
    beta = _solve(m, v)
    if beta is None:
        return None, math.inf
    return beta, sum((n - sum(b * xi for b, xi in zip(beta, x))) ** 2 / max(1, n) for x, n in rows)


def support(timeline: Timeline, knots: Sequence[float]) -> list[float]:
    """Seconds the pilot spent at each knot (by the hat weights)."""
    if len(timeline.t) < 2:
        return [0.0] * len(knots)
    return timeline.integrals(timeline.t[0], timeline.t[-1], knots)


def fit(obs: Sequence[Obs], timeline: Timeline, knots: Sequence[float], a: Optional[float] = None,
        steps: int = 16) -> Optional[Fit]:
    """The rates at ``knots`` (and ``a``, searched when not given); None when the
    completions do not determine them (too few, or a rate that comes out not positive)."""
    obs = [o for o in obs if o.tokens > 0 and o.latency_s > 0]
    if len(obs) < len(knots):
        return None
    top = 0.9 * min(o.latency_s for o in obs)
    best: Optional[tuple[float, float, list[float]]] = None
    for a_try in ([a] if a is not None else [top * i / steps for i in range(steps + 1)]):
        rows = [(timeline.integrals(o.start + a_try, o.end, knots), o.tokens) for o in obs]
        beta, resid = _rates(rows)
        if beta is not None and min(beta) > 0 and (best is None or resid < best[0]):
            best = (resid, a_try, beta)
    if best is None:
        return None
    return Fit(best[1], tuple(knots), tuple(best[2]))


def makespan(latencies: Sequence[float], slots: int) -> float:
    """Wall time of ``latencies`` handed in order to ``slots`` parallel workers."""
    if not latencies:
        return 0.0
    heap = [0.0] * min(slots, len(latencies))
    for lat in latencies:
        heapq.heapreplace(heap, heap[0] + lat)
    return max(heap)


def tail_s(fit: Fit, c: float, tokens: Sequence[int], slots: int, remaining: int, rng: random.Random,
           rounds: int = 5) -> float:
    """How much longer than ``total work / slots`` a list schedule of ``remaining`` requests
    takes: the slots that drain one by one at the end. Simulated over ``min(remaining,
    20 x slots)`` requests whose lengths are drawn from ``tokens``; the drain itself is
    taken at full load (it speeds up as slots empty, so this leans long)."""
    if remaining <= 0 or not tokens:
        return 0.0
    m = min(remaining, 20 * slots)
    over = []
    for _ in range(rounds):
        lats = [fit.latency(rng.choice(tokens), c) for _ in range(m)]
        over.append(makespan(lats, slots) - sum(lats) / slots)
    return max(0.0, known(mean(over), "the tail's rounds"))


@dataclass
class Projection:
    wall_s: float
    low_s: float
    high_s: float
    completions_per_s: float
    mean_latency_s: float
    tail_s: float
    start_s: float = 0.0  # the worker's start-up and the engine taking its first requests in
    tail_measured: bool = False  # the drain as the pilot saw it (measured_tail), not simulated


def project(fit_: Fit, obs: Sequence[Obs], timeline: Timeline, tokens: Sequence[int], c: int, servers: int,
            remaining: int, seed: int = 0, boots: int = 200, start_s: float = 0.0) -> Projection:
    """Wall time of ``remaining`` prompts at ``c`` per server on ``servers`` servers, with a
    90% interval from the bootstrap: the pilot's completions and lengths are resampled and
    the rates fitted again each time (``a`` kept). ``start_s`` is added whole (the worker's
    start-up)."""
    slots = c * servers
    rng = random.Random(seed)
    mean_lat = fit_.mean_latency(known(mean(tokens), "the pilot's lengths"), c)
    tail = tail_s(fit_, c, tokens, slots, remaining, rng)
    rows = [(timeline.integrals(o.start + fit_.a, o.end, fit_.knots), o.tokens)
            for o in obs if o.tokens > 0 and o.latency_s > 0]
    walls = []
    for _ in range(boots):
        beta, _ = _rates([rng.choice(rows) for _ in rows])
        f = Fit(fit_.a, fit_.knots, tuple(beta)) if beta is not None and min(beta) > 0 else fit_
        t = [rng.choice(tokens) for _ in tokens]
        walls.append(remaining * f.mean_latency(known(mean(t), "the pilot's lengths"), c) / slots + tail + start_s)
    return Projection(wall_s=remaining * mean_lat / slots + tail + start_s,
                      low_s=known(percentile(walls, 5), "the bootstrap"),
                      high_s=known(percentile(walls, 95), "the bootstrap"), completions_per_s=slots / mean_lat,
                      mean_latency_s=mean_lat, tail_s=tail, start_s=start_s)


@dataclass(frozen=True)
class LengthLine:
    """Latency against output length among some completions: their means and the least-squares
    slope (never below 0: a server whose answers take the same time whatever their length is
    not corrected at all)."""
    tokens: float
    latency: float
    slope: float

    @classmethod
    def of(cls, obs: Sequence[Obs]) -> "LengthLine":
        lats, ns = [o.latency_s for o in obs], [float(o.tokens) for o in obs]
        lat, n = mean(lats) or 0.0, mean(ns) or 0.0
        var = sum((x - n) ** 2 for x in ns)
        slope = max(0.0, sum((x - n) * (y - lat) for x, y in zip(ns, lats)) / var) if var > 0 else 0.0
        return cls(n, lat, slope)

    def at(self, tokens: float) -> float:
        """The latency of an answer of ``tokens``."""
        return self.latency + self.slope * (tokens - self.tokens)


@dataclass(frozen=True)
class Window:
    """A level held full: from the moment its concurrency was first full to its last start,
    the requests in flight per server on average over it, and the completions that lived
    inside it (started and ended)."""
    start: float
    end: float
    in_flight: float
    obs: tuple[Obs, ...]

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def completions_per_s(self, servers: int, mean_tokens: Optional[float] = None,
                          sample: Optional[Sequence[Obs]] = None) -> float:
        """Little's law on the window: in flight over the mean latency of its completions (of
        ``sample``, a resample of them, when given), that latency moved to answers of
        ``mean_tokens`` on average by the slope of latency on length among them (least
        squares, never below 0): a window whose completions were shorter than the dataset's
        (the long ones end after it more often) is corrected by what its own answers say a
        token costs, and a server whose answers take the same time whatever their length is
        not corrected at all."""
        line = LengthLine.of(sample or self.obs)
        lat = line.latency if mean_tokens is None else max(line.at(mean_tokens), 1e-9)
        return self.in_flight * servers / lat if lat > 0 else math.inf


def steady_windows(timeline: Timeline, levels: Sequence[float], obs: Sequence[Obs],
                   min_completions: int = 5, min_lifetimes: float = 1.0) -> list[Optional[Window]]:
    """For each level (run in ascending order, one after the other), its steady state: from
    the first moment ``k`` reached it to the last start that brought ``k`` back to it, before
    ``k`` went above it (the next level) or the pilot ran out of prompts (the drain: from
    then on an end is not followed by a start, and ``k`` never comes back). None for a level
    never full, held for less than ``min_lifetimes`` mean latencies of the requests started in
    it (a level passed through on the way to the next one, whose requests run on into the
    ramp or the drain), or with fewer than ``min_completions`` requests that lived inside it:
    those give the latency, at the level's load from start to end. The dips between a
    request's end and the next start are the client's own pace, which the run will have too:
    the window's mean in flight keeps them."""
    out: list[Optional[Window]] = []
    t, k, eps = timeline.t, timeline.k, 1e-9
    for c in levels:
        i_full = next((i for i in range(len(k)) if k[i] >= c - eps), None)
        if i_full is None:
            out.append(None)
            continue
        last = i_full
        for i in range(i_full + 1, len(k)):
            if k[i] > c + eps:
                break
            if k[i] >= c - eps and k[i] > k[i - 1]:  # a start that filled the level again
                last = i
        area = sum(k[i] * (t[i + 1] - t[i]) for i in range(i_full, last))
        span = t[last] - t[i_full]
        started = [o for o in obs if t[i_full] <= o.start <= t[last] and o.latency_s > 0]
        inside = tuple(o for o in started if o.end <= t[last])
        ok = (span >= min_lifetimes * (mean([o.latency_s for o in started]) or math.inf)
              and len(inside) >= min_completions)
        out.append(Window(t[i_full], t[last], area / span, inside) if ok else None)
    return out


def project_steady(fit_: Optional[Fit], window: Window, tokens: Sequence[int], c: int, servers: int,
                   remaining: int, seed: int = 0, boots: int = 200, start_s: float = 0.0,
                   drained: Optional[float] = None) -> Projection:
    """Like :func:`project`, from a level's rate in its steady state (Little's law on the
    window, its latency moved to the pilot's mean length: :meth:`Window.completions_per_s`).
    The drain is ``drained`` where the pilot measured it at this level (:func:`measured_tail`),
    else the model's simulation; ``start_s`` is added whole. The 90% interval is the bootstrap
    of the window's completions (their latencies and lengths) and of the pilot's lengths, with
    the shorter of the two drains at its low end and the longer at its high end."""
    slots = c * servers
    rng = random.Random(seed)
    inside = window.obs
    cps = window.completions_per_s(servers, mean(tokens))
    simulated = tail_s(fit_, c, tokens, slots, remaining, rng) if fit_ is not None else 0.0
    measured = drained is not None and remaining > 0
    tail = drained if drained is not None and measured else simulated  # (drained is not None: for the type)
    rate_part = [remaining / window.completions_per_s(servers, mean([rng.choice(tokens) for _ in tokens]),
                                                      [rng.choice(inside) for _ in inside])
                 for _ in range(boots)]
    lo_tail, hi_tail = min(simulated, tail), max(simulated, tail)
    return Projection(wall_s=remaining / cps + tail + start_s,
                      low_s=(percentile(rate_part, 5) or 0.0) + lo_tail + start_s if rate_part else 0.0,
                      high_s=(percentile(rate_part, 95) or 0.0) + hi_tail + start_s if rate_part else 0.0,
                      completions_per_s=cps, mean_latency_s=slots / cps, tail_s=tail, start_s=start_s,
                      tail_measured=measured)


def measured_tail(timeline: Timeline, window: Window, obs: Sequence[Obs], tokens: Sequence[int],
                  c: float) -> Optional[float]:
    """The drain as the pilot itself saw it at level ``c``, when it drained from there (its top
    level, full at its last start): what the end cost beyond ``remaining / rate``. With ``D``
    the time from the last start to the last end and ``L`` the latencies at the level's load of
    answers of the pilot's lengths (the window's :class:`LengthLine`): when a run hands out its
    last prompt, the ``c`` requests in flight are the longer ones (picked by their length,
    ``E[L^2] / E[L]`` each) and half done on average, so the last prompt goes out
    ``E[L^2] / (2 E[L])`` before ``remaining / rate`` and the end costs ``D - E[L^2] / (2 E[L])``
    (``L / 2`` for requests all of one length ``L``, as a list schedule says). None when the
    pilot did not drain from ``c``. On an engine whose requests do not speed up as its slots
    empty (llama-server on a GPU: the drain of 128 took 53 s, the simulated list schedule said
    21 s) this is what the run will see; the simulation (:func:`tail_s`) stays the bound on the
    other side."""
    eps = 1e-9
    if not obs or max(timeline.k, default=0.0) > c + eps:
        return None
    last = max(o.start for o in obs)  # the requests' own starts: the gate also counts a worker that found none left
    if sum(o.start <= last < o.end for o in obs) < c - eps:
        return None
    line = LengthLine.of(window.obs)  # fitted once, for every length of the pilot's
    lats = [max(line.at(n), 1e-9) for n in tokens]
    el = mean(lats)
    if not el:
        return None
    el2 = known(mean([x * x for x in lats]), "the level's latencies")
    return max(0.0, max(o.end for o in obs) - last - el2 / (2 * el))


def admission_s(timeline: Timeline, window: Window, obs: Sequence[Obs], c: float, burst_s: float = 1.0) -> float:
    """What the run's start costs beyond the steady rate while the engine takes its first ``c``
    requests in: the requests the pilot sent at once when it raised the level to ``c`` (within
    ``burst_s`` of its first start) waited longer than their lengths explain at that load (an
    engine that lets new requests in a few at a time: llama-server's HTTP threads), by
    ``extra`` on average; a run sends ``c`` at once from none in flight, not ``c - before``,
    so it waits ``extra * c / (c - before)`` on average, each slot idle that long. 0 when the
    burst waited no longer, or the level did not start with a burst."""
    t, k, eps = timeline.t, timeline.k, 1e-9
    first = next((i for i in range(len(k)) if t[i] >= window.start - eps), None)
    if first is None:
        return 0.0
    i = first  # back along the starts in a row that filled the level, to the point before them
    while i > 0 and k[i] > k[i - 1] and t[first] - t[i] <= burst_s:
        i -= 1
    before, t0 = (0.0, t[0]) if i == 0 else (k[i], t[i + 1])
    burst = [o for o in obs if t0 - eps <= o.start <= t0 + burst_s and o.latency_s > 0]
    # the baseline: what started in the window's second half (the burst let in long since), whatever
    # its length: those that also ended inside the window are the short ones, and a slope fitted
    # on them alone, carried to the burst's long answers, said the burst waited for nothing
    later = [o for o in obs if (window.start + window.end) / 2 < o.start <= window.end and o.latency_s > 0]
    if len(burst) < 2 or len(later) < 2 or c - before <= 0:
        return 0.0
    line = LengthLine.of(later)
    extra = known(mean([o.latency_s - line.at(o.tokens) for o in burst]), "the burst")
    return max(0.0, extra) * c / (c - before)


def servers_for(deadline_s: float, remaining: int, mean_latency_s: float, c: int, tail: float) -> Optional[int]:
    """Fewest servers (at ``c`` each) that finish ``remaining`` prompts within ``deadline_s``;
    None when even infinitely many would not (the tail alone is longer)."""
    room = deadline_s - tail
    if room <= 0:
        return None
    return max(1, math.ceil(remaining * mean_latency_s / (c * room)))
