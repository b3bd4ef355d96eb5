"""The run's two edges in a generation plan: the start (an engine that lets new requests in a
few at a time) and the drain (an engine whose requests do not speed up as its slots empty),
each measured on the pilot and checked against a run of the same simulated engine.

The engine is simulated in steps of ``DT`` seconds (no real time): a client keeps ``limit``
requests in flight; the engine holds at most as many as it has taken in at once before, that
room growing by ``grow_per_s`` while requests wait (an HTTP server that adds threads as it
needs them), and each request it holds makes ``rate(held)`` tokens/s until it has its
length."""

from __future__ import annotations

import random

from gpudeck.agents.workers.plan import stats

DT = 0.05


def simulate(limits: list[tuple[int, int]], lengths: list[int], rate, grow_per_s: float = 1e9):
    """Run the requests of ``lengths`` through the engine, ``limits`` a list of (requests in
    flight, how many to start at that limit) taken in turn; (the obs, the client's timeline
    of requests in flight, the time the last one ended)."""
    todo = list(lengths)
    plan = [lim for lim, n in limits for _ in range(n)]  # the limit each start is made under
    t, queue, held, obs, timeline = 0.0, [], [], [], []
    k = 0
    room = 0.0
    while todo or queue or held:
        while todo and plan and k < plan[0]:  # the client fills up to its limit at once
            plan.pop(0)
            queue.append([t, todo.pop(0), 0.0])
            k += 1
            timeline.append((t, float(k)))
        if len(queue) + len(held) > room:
            room = min(room + grow_per_s * DT, len(queue) + len(held))
        while queue and len(held) < int(room + 1e-9):
            held.append(queue.pop(0))
        t += DT
        r = rate(len(held)) if held else 0.0
        for req in held:
            req[2] += r * DT
        for req in [q for q in held if q[2] >= q[1]]:
            held.remove(req)
            obs.append(stats.Obs(req[0], t, req[1]))
            k -= 1
            timeline.append((t, float(k)))
    return obs, stats.Timeline(timeline), t


def lengths(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [512 if rng.random() < 0.35 else rng.randint(20, 500) for _ in range(n)]


def pilot_and_run(rate, grow_per_s: float = 1e9, run_n: int = 200):
    """A pilot (60 at 8, then 300 at 32 and its drain) and a run of ``run_n`` at 32 from
    none in flight; (the projection with the edges measured, the one with neither, the run's
    wall time)."""
    obs, tl, _ = simulate([(8, 60), (32, 300)], lengths(360, 1), rate, grow_per_s)
    win = stats.steady_windows(tl, [8, 32], obs)[1]
    assert win is not None, "the pilot held 32 full"
    tokens = [o.tokens for o in obs]
    fit = stats.fit(obs, tl, [8, 32])
    both = stats.project_steady(fit, win, tokens, 32, 1, run_n, start_s=stats.admission_s(tl, win, obs, 32),
                                drained=stats.measured_tail(tl, win, obs, tokens, 32))
    neither = stats.project_steady(fit, win, tokens, 32, 1, run_n)
    _, _, wall = simulate([(32, run_n)], lengths(run_n, 2), rate, grow_per_s)
    return both, neither, wall


def test_a_drain_that_does_not_speed_up_is_measured_on_the_pilot_and_the_run_takes_it():
    # each request's speed falls as the engine empties (its step costs the same, shared by fewer)
    both, neither, wall = pilot_and_run(lambda held: 12.0 * (0.4 + 0.6 * held / 32), run_n=300)
    assert both.tail_measured and both.tail_s > 1.5 * neither.tail_s
    assert abs(both.wall_s - wall) / wall < 0.05, (both.wall_s, wall)
    assert abs(neither.wall_s - wall) / wall > 2 * abs(both.wall_s - wall) / wall
    assert both.low_s <= wall <= both.high_s


def test_an_engine_that_lets_requests_in_slowly_costs_the_run_its_start():
    both, neither, wall = pilot_and_run(lambda held: 12.0, grow_per_s=1.0, run_n=200)
    # the run's 32 go in over about 32 s: each slot idle about half of that on average
    assert 5.0 < both.start_s < 20.0, both.start_s
    assert abs(both.wall_s - wall) / wall < 0.05, (both.wall_s, wall)
    assert abs(neither.wall_s - wall) / wall > 2 * abs(both.wall_s - wall) / wall
    assert both.low_s <= wall <= both.high_s


def test_an_engine_with_neither_edge_gets_no_start_and_a_drain_near_the_simulated_one():
    both, neither, wall = pilot_and_run(lambda held: 12.0, run_n=200)
    assert both.start_s < 0.5 and abs(both.tail_s - neither.tail_s) < 0.2 * neither.tail_s
    assert abs(both.wall_s - wall) / wall < 0.05 and abs(neither.wall_s - wall) / wall < 0.05, (both, neither, wall)


def test_no_drain_is_measured_where_the_pilot_did_not_drain_from_the_level():
    obs, tl, _ = simulate([(8, 60), (32, 300)], lengths(360, 1), lambda held: 12.0)
    win8 = stats.steady_windows(tl, [8, 32], obs)[0]
    assert win8 is not None
    assert stats.measured_tail(tl, win8, obs, [o.tokens for o in obs], 8) is None  # the pilot went on to 32 from there


def test_a_short_hold_still_counts_the_burst_against_answers_of_every_length():
    # 50 at 32: a window about as long as the longest answers, whose completions that also ended
    # inside it are the short ones; the burst is weighed against all that started in its second
    # half (a baseline of the short ones alone read 7.9 s here; the run's 32 wait about 16 s)
    obs, tl, _ = simulate([(8, 60), (32, 50)], lengths(110, 1), lambda held: 12.0, grow_per_s=1.0)
    win = stats.steady_windows(tl, [8, 32], obs)[1]
    assert win is not None and win.seconds < 40
    assert 9.0 < stats.admission_s(tl, win, obs, 32) < 20.0
