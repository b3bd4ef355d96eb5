"""``gpudeck plan generate`` and ``gpudeck plan extract``: the arithmetic, then the commands
against a real sim-engine process, a real llama-server (tests/e2e/test_generate_llama.py's
fixture) and a real (tiny) model on the CPU.

The unit tier's tests of this file (starts nothing); the others are in tests/system/test_plan.py,
tests/e2e/test_plan.py."""

from __future__ import annotations

import random

import pytest

from gpudeck.agents.workers.plan import stats
from gpudeck.agents.workers.plan.extract_plan import project as project_extract
from gpudeck.agents.workers.plan.sample import split_levels
from gpudeck.agents.contract.units import parse_duration
from gpudeck.agents.workers.plan.units import UsageError, parse_deadline, parse_levels
from support.plan import SEED_HIDDEN, SEED_LAYERS, SEED_SAMPLES, SEED_TOKENS_EACH


# ---------------------------------------------------------------- the arithmetic

def test_units_and_levels():
    assert parse_duration("5d") == 5 * 86400
    assert parse_duration("1d12h") == 36 * 3600
    assert parse_duration("90m") == 5400
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration("soon")
    assert parse_deadline("2030-01-01T00:00:00+00:00", now=1893456000 - 3600) == 3600
    for bad in ("yesterday", "2000-01-01T00:00", "0s"):
        with pytest.raises(UsageError, match="--deadline"):
            parse_deadline(bad)
    assert parse_levels("64, 1,32,64") == [1, 32, 64]
    with pytest.raises(UsageError, match="--concurrency"):
        parse_levels("1,x")
    chunks = split_levels(200, [1, 32, 64, 128])
    assert sum(chunks) == 200 and chunks == sorted(chunks) and chunks[0] >= 8
    assert sum(split_levels(3, [1, 2, 4, 8])) == 3


def _processor_sharing(rate, arrivals, a=0.01):
    """Exact completions of a server where each of k running requests decodes at rate(k)
    tokens/s: (obs, timeline), simulated in small time steps."""
    dt = 0.001
    t, running, obs, timeline = 0.0, [], [], [(0.0, 0.0)]
    pending = list(arrivals)  # (start, tokens)
    while pending or running:
        while pending and pending[0][0] <= t:
            s, n = pending.pop(0)
            running.append([s, n, float(n), s + a])
            timeline.append((t, float(len(running))))
        decoding = [r for r in running if r[3] <= t]
        for r in decoding:
            r[2] -= rate(len(running)) * dt
        t += dt
        for r in [r for r in running if r[2] <= 0]:
            running.remove(r)
            obs.append(stats.Obs(r[0], t, r[1]))
            timeline.append((t, float(len(running))))
    return obs, stats.Timeline(timeline)


def test_fit_recovers_the_rates_of_a_shared_server():
    rate = lambda k: min(100.0, 800.0 / k)  # noqa: E731: 100 tok/s alone, 800 tok/s for the server
    rng = random.Random(3)
    alone = [(i * 4.0, rng.randint(20, 300)) for i in range(6)]  # one at a time, then a crowd
    crowds = [(24 + 10 * b + rng.uniform(0, 0.5), rng.randint(20, 300)) for b in range(3) for _ in range(16)]
    arrivals = alone + sorted(crowds)  # at most 16 at once: the top knot
    obs, tl = _processor_sharing(rate, arrivals)
    fit = stats.fit(obs, tl, [1, 8, 16])
    assert fit is not None
    assert fit.rate(1) == pytest.approx(100, rel=0.1)
    assert fit.rate(16) == pytest.approx(50, rel=0.15)
    assert 0 <= fit.a < 0.05


def test_projection_of_a_known_server_and_its_interval():
    obs = [stats.Obs(0.0, 1.0 + n / 100, n) for n in (100, 200, 300, 400)]
    tl = stats.Timeline([(0.0, 4.0), (10.0, 4.0)])
    fit = stats.Fit(1.0, (4.0,), (100.0,))
    tokens = [100, 200, 300, 400]
    p = stats.project(fit, obs, tl, tokens, c=4, servers=2, remaining=8000, seed=1)
    # 3.5 s per request, 8 slots: 3,500 s, plus a tail under the longest request
    assert 3500 <= p.wall_s <= 3500 + 5.0
    assert p.low_s <= p.wall_s <= p.high_s
    assert stats.servers_for(3600, 8000, 3.5, 4, p.tail_s) == 2
    assert stats.servers_for(1800, 8000, 3.5, 4, p.tail_s) == 4
    assert stats.makespan([5, 1, 1, 1, 1, 1], 2) == 5


def test_extract_projection_of_the_seed_figures():
    tokens = SEED_SAMPLES * SEED_TOKENS_EACH
    p = project_extract(layers_kept=SEED_LAYERS, num_layers=64, hidden_size=SEED_HIDDEN, dtype_bytes=2,
                        samples=SEED_SAMPLES, tokens=tokens, free_bytes=3 * 10**12)
    assert p["bytes_per_token_raw"] == 51200
    assert p["projected_bytes"] == pytest.approx(92.4e12, rel=0.01)
    assert p["projected_bytes"] / 2**40 == pytest.approx(84.0, rel=0.01)
    assert not p["fits"]
    levers = " ".join(p["levers"])
    assert "fewer layers" in levers and "--compress" in levers and "fewer samples" in levers
    assert p["s3_cost_per_month"] == pytest.approx(92.4e3 * 0.023, rel=0.01)
    ok = project_extract(layers_kept=1, num_layers=64, hidden_size=SEED_HIDDEN, dtype_bytes=2, samples=10,
                         tokens=20000, free_bytes=10**12, ratio=0.67, tokens_per_s=1000)
    assert ok["fits"] and not ok["levers"] and ok["projected_wall_s"] == 20


# ---------------------------------------------------------------- the sim-engine's new knobs

def test_sim_engine_lengths_are_heavy_tailed_and_the_decode_is_shared():
    import asyncio
    import zlib

    from gpudeck.agents.workers.sim_engine.decode import SharedDecoder, output_length

    lengths = [output_length(zlib.crc32(str(i).encode()), 1, 32768, median=300, sigma=1.1) for i in range(5000)]
    assert 250 <= stats.percentile(lengths, 50) <= 350
    assert 0.002 < sum(n >= 4096 for n in lengths) / len(lengths) < 0.03  # some would hit max_tokens=4096
    assert output_length(7, 16, 96) == 16 + 7 % 81  # uniform stays as it was

    d = SharedDecoder(tok_s=800, batch_tok_s=50000)
    assert d.rate(1) == 800 and d.rate(62) == 800 and d.rate(128) == pytest.approx(50000 / 128)
    assert SharedDecoder(tok_s=0, batch_tok_s=0).rate(5) == float("inf")

    async def race():
        fast = SharedDecoder(tok_s=0, batch_tok_s=200000)
        order: list[int] = []

        async def one(n):
            await fast.decode(n)
            order.append(n)
        await asyncio.gather(*(one(n) for n in (3000, 1000, 2000, 10)))
        return order, fast.running

    order, running = asyncio.run(race())
    assert order == [10, 1000, 2000, 3000] and running == 0  # shared fairly: the shortest ends first
