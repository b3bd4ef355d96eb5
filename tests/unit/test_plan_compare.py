"""``gpudeck plan compare`` on plan.json files written here, ``plan extract``'s GPUs and price,
and the pilot's rate counted in its steady state (a pilot simulated in memory): no process,
but the last test, which runs two real pilots against two sim-engines.

The unit tier's tests of this file (starts nothing); the others are in
tests/system/test_plan_compare.py."""

from __future__ import annotations

import argparse
import heapq
import json
import random

import pytest

from gpudeck.agents.contract.units import human_duration
from gpudeck.agents.workers.plan import compare, stats
from gpudeck.agents.workers.plan.dataset import fingerprint
from gpudeck.agents.workers.plan.extract_plan import project as project_extract
from gpudeck.agents.workers.plan.generate_plan import build_plan
from gpudeck.agents.workers.plan.pilot import Completion, PilotResult
from gpudeck.agents.workers.plan.sample import split_levels
from support.plan_compare import SEED_MEAN_TOKENS, SEED_PROMPTS, generate_plan_doc, prompts, write  # noqa: F401


def run_compare(capsys, *argv: str) -> tuple[int, str, str]:
    p = argparse.ArgumentParser()
    compare.add_arguments(p)
    rc = compare.run(p.parse_args(list(argv)))
    out, err = capsys.readouterr()
    return rc, out, err


# ---------------------------------------------------------------- the seed's decision

def test_four_cheap_gpus_against_seven_fast_ones_the_seeds_decision(tmp_path, prompts, capsys):
    """The seed piloted one server of each kind, then chose between 4 RTX PRO 6000 and 7 B200
    by hand. Here: 400 output tokens/s per PRO 6000 at $0.50 an hour (a node already owned),
    3,000 per B200 at $5.50. Four PRO 6000 take 9.8 days for $470; seven B200 0.75 days for $695."""
    ds = fingerprint(str(prompts))
    pro = write(tmp_path / "pro6000" / "plan.json", generate_plan_doc(ds, tok_s_per_server=400, price=0.5))
    b200 = write(tmp_path / "b200" / "plan.json", generate_plan_doc(ds, tok_s_per_server=3000, price=9.9))
    rc, out, err = run_compare(capsys, f"{tmp_path / 'pro6000'},servers=4", f"{b200},gpus=7,price=5.5", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert (doc["cheaper"], doc["faster"], doc["faster_beyond_interval"]) == ("pro6000", "b200", True)
    pro_f, b200_f = doc["fleets"]
    assert (pro_f["servers"], pro_f["price_per_hour"], b200_f["servers"], b200_f["price_per_hour"]) == (4, 0.5, 7, 5.5)
    pro_s = SEED_PROMPTS * SEED_MEAN_TOKENS / (4 * 400) + 600  # the whole dataset, the drain once
    b200_s = SEED_PROMPTS * SEED_MEAN_TOKENS / (7 * 3000) + 600
    assert pro_f["days"] == pytest.approx(pro_s / 86400, abs=1e-3) and pro_f["days"] == pytest.approx(9.8, abs=0.05)
    assert b200_f["days"] == pytest.approx(b200_s / 86400, abs=1e-3)
    assert pro_f["cost"] == pytest.approx(4 * pro_s / 3600 * 0.5, abs=0.01)
    assert b200_f["cost"] == pytest.approx(7 * b200_s / 3600 * 5.5, abs=0.01)
    assert pro_f["days_low"] < pro_f["days"] < pro_f["days_high"]
    m_tokens = SEED_PROMPTS * SEED_MEAN_TOKENS / 1e6
    assert pro_f["cost_per_m_tokens"] == pytest.approx(pro_f["cost"] / m_tokens, rel=1e-3)
    assert b200_f["cost_per_useful"] == pytest.approx(b200_f["cost"] / (SEED_PROMPTS * 0.9), rel=1e-3)
    assert pro_f["projected_bytes"] == SEED_PROMPTS * 9000

    # the same as text: a row per fleet and the two answers
    rc, out, _ = run_compare(capsys, f"{pro},servers=4", f"{b200},servers=7,price=5.5")
    assert rc == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("pro6000", "b200"))}
    assert rows["pro6000"][1:5] == ["4", "0.50", "9d", "19h"] and rows["b200"][1:5] == ["7", "5.50", "18h", "03m"]
    assert "cheaper: pro6000 ($470" in out and "faster: b200 (18h 03m; beyond the others' intervals)" in out

    # at $3 an hour the B200s are the cheaper too
    rc, out, _ = run_compare(capsys, f"{pro},servers=4", f"{b200},servers=7,price=3", "--json")
    assert (json.loads(out)["cheaper"], json.loads(out)["faster"]) == ("b200", "b200")


def test_a_short_run_reads_in_minutes_as_plan_generate_says_it_not_in_hundredths_of_a_day(tmp_path, prompts,
                                                                                            capsys):
    """A run of minutes read `0.01` days; it reads as `plan generate` says it (human_duration)."""
    ds = fingerprint(str(prompts))
    fast = write(tmp_path / "fast" / "plan.json", generate_plan_doc(ds, tok_s_per_server=2_000_000, price=2.0,
                                                                    tail_s=60.0))
    slow = write(tmp_path / "slow" / "plan.json", generate_plan_doc(ds, tok_s_per_server=400_000, price=2.0,
                                                                    tail_s=60.0))
    rc, out, err = run_compare(capsys, f"fast={fast}", f"slow={slow}")
    assert rc == 0, err
    head, fast_row, slow_row = (ln.split() for ln in out.splitlines()
                                if ln.startswith(("FLEET", "fast ", "slow ")))
    assert head[3] == "TIME"
    doc = json.loads(run_compare(capsys, f"fast={fast}", f"slow={slow}", "--json")[1])
    f, sl = doc["fleets"]
    assert 600 < f["wall_s"] < 3600 and f["days"] == 0.009  # minutes: what read 0.01 days
    assert " ".join(fast_row[3:5]) == human_duration(f["wall_s"]) and fast_row[3] .endswith("m"), out
    assert " ".join(slow_row[3:5]) == human_duration(sl["wall_s"]), out
    assert f"{human_duration(f['wall_s_low'])}-{human_duration(f['wall_s_high'])}" in out
    assert f"faster: fast ({human_duration(f['wall_s'])};" in out and "0.01" not in out


def test_plans_compare_as_planned_and_an_unpriced_fleet_has_no_cheaper(tmp_path, prompts, capsys):
    ds = fingerprint(str(prompts))
    a = write(tmp_path / "a" / "plan.json", generate_plan_doc(ds, tok_s_per_server=800, price=2.0, servers=2))
    b = write(tmp_path / "b" / "plan.json", {**generate_plan_doc(ds, tok_s_per_server=2000, price=0),
                                              "price_per_hour": None})
    rc, out, err = run_compare(capsys, f"slow={a}", f"fast={b}", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["cheaper"] is None and doc["unpriced"] == ["fast"] and doc["faster"] == "fast"
    slow = doc["fleets"][0]
    assert slow["servers"] == 2 and slow["days"] == pytest.approx(
        (SEED_PROMPTS * SEED_MEAN_TOKENS / 1600 + 600) / 86400, abs=1e-3)
    rc, out, _ = run_compare(capsys, f"slow={a}", f"fast={b}")
    assert "cheaper: unknown (fast without a price: add ,price=DOLLARS)" in out


# ---------------------------------------------------------------- bad input: exit 2, a precise message

def test_one_plan_is_not_a_comparison(tmp_path, prompts, capsys):
    a = write(tmp_path / "a" / "plan.json", generate_plan_doc(fingerprint(str(prompts)), tok_s_per_server=1, price=1))
    rc, out, err = run_compare(capsys, a)
    assert rc == 2 and out == ""
    assert err.startswith("gpudeck plan compare: compare needs at least two plans, got 1")


def test_plans_of_different_datasets_are_refused(tmp_path, prompts, capsys):
    other = tmp_path / "other.jsonl"
    other.write_text(prompts.read_text().replace("question 7\"", "question seven\""))
    a = write(tmp_path / "a" / "plan.json", generate_plan_doc(fingerprint(str(prompts)), tok_s_per_server=1, price=1))
    b = write(tmp_path / "b" / "plan.json", generate_plan_doc(fingerprint(str(other)), tok_s_per_server=1, price=1))
    rc, _, err = run_compare(capsys, a, b)
    assert rc == 2
    assert f"a and b plan different datasets: a: {prompts} (" in err and f"; b: {other} (" in err
    # a copy of the same file elsewhere is the same dataset
    copy = tmp_path / "node2" / "prompts.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(prompts.read_bytes())
    c = write(tmp_path / "c" / "plan.json", generate_plan_doc(fingerprint(str(copy)), tok_s_per_server=2, price=1))
    assert run_compare(capsys, a, c)[0] == 0
    # the same file, but one part of it
    d = write(tmp_path / "d" / "plan.json", generate_plan_doc(fingerprint(str(prompts), (0, 2)), tok_s_per_server=2,
                                                              price=1))
    rc, _, err = run_compare(capsys, a, d)
    assert rc == 2 and "part 0/2" in err


def test_an_old_plan_without_its_dataset_is_named(tmp_path, prompts, capsys):
    a = write(tmp_path / "a" / "plan.json", generate_plan_doc(fingerprint(str(prompts)), tok_s_per_server=1, price=1))
    old = generate_plan_doc({}, tok_s_per_server=1, price=1)
    del old["dataset"], old["kind"]
    b = write(tmp_path / "old" / "plan.json", old)
    rc, _, err = run_compare(capsys, a, b)
    assert rc == 2
    assert f"old ({b}): this plan does not name its dataset (written before plans did); plan it again" in err


@pytest.mark.parametrize("argv, message", [
    (["{a}", "{a}"], "two fleets are named 'a': name them, NAME=PLAN"),
    (["{a}", "{a},servers=0"], "servers='0': expected a whole number of at least 1"),
    (["{a}", "x={a},price=-1"], "price='-1': expected dollars, at least 0"),
    (["{a}", "x={a},speed=3"], "'speed=3' is not servers=N, gpus=N or price=DOLLARS"),
    (["{a}", "x={missing}"], "No such file or directory"),
    (["{a}", "x={broken}"], "not a plan: not valid JSON"),
    (["{a}", "x={extract}"], "plans of different kinds cannot be compared: a is generate, x is extract"),
])
def test_bad_input_says_what_and_exits_2(tmp_path, prompts, capsys, argv, message):
    ds = fingerprint(str(prompts))
    paths = {"a": write(tmp_path / "a" / "plan.json", generate_plan_doc(ds, tok_s_per_server=1, price=1)),
             "missing": str(tmp_path / "nowhere" / "plan.json"),
             "broken": write(tmp_path / "broken" / "plan.json", {}),
             "extract": write(tmp_path / "e" / "plan.json", {"kind": "extract", "layers_kept": 1, "dataset": ds,
                                                             "tokens": 10, "projected_wall_s": 5.0})}
    (tmp_path / "broken" / "plan.json").write_text("{half")
    rc, out, err = run_compare(capsys, *[a.format(**paths) for a in argv])
    assert rc == 2 and out == "" and "Traceback" not in err
    assert err.startswith("gpudeck plan compare: ") and message in err, err


# ---------------------------------------------------------------- plan extract over GPUs

def test_extract_time_divides_over_the_gpus_and_dollars_follow(tmp_path, prompts, capsys):
    tokens = 10**9
    one = project_extract(layers_kept=5, num_layers=64, hidden_size=5120, dtype_bytes=2, samples=10**6,
                          tokens=tokens, free_bytes=10**15, tokens_per_s=10_000, gpus=1, price=2.0)
    four = project_extract(layers_kept=5, num_layers=64, hidden_size=5120, dtype_bytes=2, samples=10**6,
                           tokens=tokens, free_bytes=10**15, tokens_per_s=10_000, gpus=4, price=2.0)
    assert one["projected_wall_s"] == 100_000 and four["projected_wall_s"] == 25_000
    assert one["projected_cost"] == four["projected_cost"] == pytest.approx(100_000 / 3600 * 2, abs=0.01)
    assert four["gpus"] == 4 and four["price_per_hour"] == 2.0
    # compared: the plan of one GPU, as planned and spread over 8 at another price
    ds = fingerprint(str(prompts))
    p = write(tmp_path / "h200" / "plan.json", {**one, "kind": "extract", "dataset": ds, "written_at": 1.7e9})
    rc, out, err = run_compare(capsys, f"one={p}", f"eight={p},gpus=8,price=3", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    one_f, eight_f = doc["fleets"]
    assert eight_f["wall_s"] == 12_500 and eight_f["cost"] == pytest.approx(8 * 12_500 / 3600 * 3, abs=0.01)
    assert one_f["cost_per_m_tokens"] == pytest.approx(one_f["cost"] / 1000, rel=1e-3)
    assert (doc["cheaper"], doc["faster"], doc["faster_beyond_interval"]) == ("one", "eight", None)


# ---------------------------------------------------------------- the pilot's rate in its steady state

def fixed_latency_pilot(levels: list[int], n: int, latency: float, gap: float, seed: int = 1,
                        spread: float = 0.05) -> PilotResult:
    """A pilot as pilot.py records it, against a server whose every answer takes ``latency``
    (+-``spread``), from a client that takes ``gap`` seconds between a request's end and the next
    start: the levels one after the other, the limit raised when a level's prompts are taken."""
    rng = random.Random(seed)
    chunks = split_levels(n, levels)
    bounds = [sum(chunks[:i + 1]) for i in range(len(chunks))]
    level_of = (lambda i: next((j for j, b in enumerate(bounds) if i < b), len(bounds) - 1))  # noqa: E731
    ready = [0.0] * levels[0]
    opened, taken, active = levels[0], 0, 0
    ends: list = []
    result = PilotResult(wall_s=[0.0] * len(levels))
    while taken < n or ends:
        if ready and taken < n and (not ends or ready[0] <= ends[0][0]):
            t = heapq.heappop(ready)
            lvl = level_of(taken)
            taken, active = taken + 1, active + 1
            result.timeline.append((t, float(active)))
            heapq.heappush(ends, (t + latency * rng.uniform(1 - spread, 1 + spread), t, lvl, rng.randint(16, 96)))
            want = levels[level_of(taken)] if taken < n else 0
            while opened < want:
                heapq.heappush(ready, t)
                opened += 1
        else:
            e, s, lvl, tokens = heapq.heappop(ends)
            active -= 1
            result.timeline.append((e, float(active)))
            result.completions.append(Completion(level=lvl, start=s, end=e, latency_s=e - s, k=levels[lvl],
                                                 tokens=tokens, reasoning_tokens=None, cut=False, empty=False,
                                                 bytes=200))
            heapq.heappush(ready, e + gap)
    return result


def _obs(r: PilotResult) -> list[stats.Obs]:
    return [stats.Obs(c.start, c.end, c.tokens) for c in r.completions]


def test_steady_state_windows_leave_out_the_ramp_and_the_drain():
    r = fixed_latency_pilot([8, 16], 100, latency=0.25, gap=0.0)
    # as the pilot's gate records its drain: workers that find no prompt left start and end at once
    t_end = r.timeline[-1][0]
    r.timeline += [(t_end, 1.0), (t_end, 0.0)]
    tl = stats.Timeline(r.timeline)
    w8, w16 = stats.steady_windows(tl, [8, 16], _obs(r))
    assert w8 is not None and w16 is not None
    assert w8.start == 0.0 and w8.end <= w16.start  # 8 full from the first starts; 16 once the 8 more are in
    assert w16.end == max(c.start for c in r.completions)  # the drain after the last start is left out
    assert min(o.start for o in w16.obs) == w16.start and len(w16.obs) >= 40
    assert w16.in_flight == pytest.approx(16, rel=0.01)
    assert w16.completions_per_s(1) == pytest.approx(16 / 0.25, rel=0.03)
    assert w8.completions_per_s(1) == pytest.approx(8 / 0.25, rel=0.03)
    # a client that leaves a slot empty between an end and the next start: counted in flight
    gappy = fixed_latency_pilot([8, 16], 100, latency=0.2, gap=0.05)
    w = stats.steady_windows(stats.Timeline(gappy.timeline), [8, 16], _obs(gappy))[0]
    assert w is not None and w.in_flight < 8 and w.completions_per_s(1) == pytest.approx(8 / 0.25, rel=0.1)
    assert stats.steady_windows(tl, [8, 16, 64], _obs(r))[2] is None  # never full


def test_a_level_passed_through_on_the_way_is_not_a_steady_state():
    """37 prompts at 32 on the heels of 22 at 16: 32 in flight for a moment, whose requests
    run on into the drain (their latency is not the load of 32's). The model prices it."""
    r = fixed_latency_pilot([4, 16, 32], 70, latency=0.25, gap=0.0)
    tl = stats.Timeline(r.timeline)
    assert stats.steady_windows(tl, [4, 16, 32], _obs(r), min_lifetimes=0)[2] is not None
    assert stats.steady_windows(tl, [4, 16, 32], _obs(r))[2] is None
    plan = build_plan(r, [4, 16, 32], n_servers=1, total=1000, done=70, max_tokens=4096)
    assert plan["levels"][0]["measured"] == "steady state" and plan["levels"][2]["measured"] == "model"


def test_a_window_of_longer_answers_is_moved_to_the_pilots_mean_length():
    """A server where each token costs 10 ms: a window that drew answers of 200 tokens on
    average, for a dataset of 100, would halve the rate without the correction."""
    obs = tuple(stats.Obs(0.0, 0.01 * n, n) for n in (100, 200, 300, 150, 250))
    w = stats.Window(0.0, 10.0, 4.0, obs)
    assert w.completions_per_s(1) == pytest.approx(4 / 2.0)
    assert w.completions_per_s(1, mean_tokens=100) == pytest.approx(4 / 1.0)
    flat = stats.Window(0.0, 10.0, 4.0, tuple(stats.Obs(0.0, 0.25, n) for n in (10, 90, 50, 30, 70)))
    assert flat.completions_per_s(2, mean_tokens=10) == pytest.approx(8 / 0.25)  # length costs nothing here


def test_a_client_bound_pilot_projects_the_run_within_a_few_percent():
    """The issue's case: 100 prompts at 8 and 16 against a server that answers in 200 ms, the
    other 2,900 at 16, with the client's own work inside each request's time (0.25 s in all):
    16 / 0.25 s = 64/s. The latency model alone, which takes length for the cost, misses it
    by more than 10% on this pilot; the count in the steady state does not."""
    r = fixed_latency_pilot([8, 16], 100, latency=0.25, gap=0.0, seed=2)
    plan = build_plan(r, [8, 16], n_servers=1, total=3000, done=100, max_tokens=4096)
    truth_cps = 16 / 0.25
    assert plan["best_concurrency"] == 16
    level16 = plan["levels"][1]
    assert level16["measured"] == "steady state" and level16["steady_completions"] >= 20
    assert plan["completions_per_s"] == pytest.approx(truth_cps, rel=0.03)
    assert plan["projected_wall_s"] == pytest.approx(2900 / truth_cps, rel=0.03)
    assert plan["projected_wall_s_low"] <= plan["projected_wall_s"] <= plan["projected_wall_s_high"]
    model = stats.fit(_obs(r), stats.Timeline(r.timeline), [8, 16])
    assert model is not None
    assert abs(16 / model.mean_latency(stats.mean([c.tokens for c in r.completions]) or 0, 16) / truth_cps - 1) > 0.1


def test_a_pilot_too_short_for_its_spread_says_so_and_how_many_prompts_would_do():
    """Answers that take 0.1 to 0.9 s: 40 prompts at 2 and 8 count the rate at 8 on a dozen
    completions, a wide interval, which the plan says with the pilot that would narrow it; the
    pilot it names does. A go stays a go."""
    short = build_plan(fixed_latency_pilot([2, 8], 40, latency=0.5, gap=0.0, spread=0.8), [2, 8], n_servers=1,
                       total=1000, done=40, max_tokens=4096)
    assert short["verdict"] == "go" and len(short["cautions"]) == 1
    import re
    m = re.search(r"projection is \+-(\d+)% .* rate at 8 per server was counted on (\d+) completions in \d+s held "
                  r"full; holding it full about (\d+)s \(--hold\) or a pilot of about (\d+) prompts would narrow it "
                  r"to \+-5%", short["cautions"][0])
    assert m, short["cautions"]
    assert int(m.group(1)) > 5 and int(m.group(2)) == short["levels"][1]["steady_completions"]
    more = int(m.group(4))
    assert more > 40 and int(m.group(3)) > short["levels"][1]["steady_s"]
    from gpudeck.agents.workers.plan.render import render_generate
    assert "caution: the projection is +-" in render_generate({**short, "pilot_s": 1.0})
    enough = build_plan(fixed_latency_pilot([2, 8], more, latency=0.5, gap=0.0, spread=0.8), [2, 8], n_servers=1,
                        total=1000 + more, done=more, max_tokens=4096)
    half = (enough["projected_wall_s_high"] - enough["projected_wall_s_low"]) / 2 / enough["projected_wall_s"]
    assert half <= 0.05 and enough["cautions"] == []


def test_a_pilot_that_took_every_prompt_projects_nothing_and_says_so():
    """A small file, or a pilot held long enough to send it all: the levels are counted, but no
    run is left to project (a projection of 0 s would be refused by plan.json's reader)."""
    plan = build_plan(fixed_latency_pilot([8, 16], 100, latency=0.25, gap=0.0), [8, 16], n_servers=1,
                      total=100, done=100, max_tokens=4096)
    assert plan["remaining"] == 0 and plan["best_concurrency"] == 16 and plan["projected_wall_s"] is None
    from gpudeck.agents.workers.plan.render import render_generate
    assert "the pilot did all 100 prompts; nothing is left to run" in render_generate({**plan, "pilot_s": 1.0})
