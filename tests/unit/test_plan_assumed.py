"""``gpudeck plan generate --tokens-per-s R --server-count S --output-tokens L``: a plan of
hardware not rented yet, with no server (agents/workers/plan/assumed.py); its levers (a
max_tokens cap on a length distribution or a mean, a subset, a speed factor); and `plan
compare` with it beside a measured plan. Files only: no server, no process."""

from __future__ import annotations

import argparse
import json

import pytest

from gpudeck.agents.workers.plan import compare, generate_plan
from gpudeck.agents.workers.plan.assumed import build_assumed, capped
from gpudeck.agents.workers.plan.dataset import fingerprint
from gpudeck.agents.workers.plan.generate_plan import build_plan
from gpudeck.agents.workers.plan.pilot import Completion, PilotResult
from support.plan_compare import generate_plan_doc, write


def plan_generate(capsys, *argv: str) -> tuple[int, str, str]:
    p = argparse.ArgumentParser(conflict_handler="resolve")
    generate_plan.add_arguments(p)
    rc = generate_plan.run(p.parse_args(list(argv)))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def prompts(tmp_path):
    """The issue's 91,400 prompts."""
    f = tmp_path / "prompts.jsonl"
    f.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"question {i}"}) + "\n" for i in range(91_400)))
    return f


def test_400_tokens_a_second_on_4_servers_for_91400_prompts_of_1500_tokens_is_085688_s(tmp_path, prompts, capsys):
    out = tmp_path / "out"
    rc, text, err = plan_generate(capsys, "--prompts", str(prompts), "--out", str(out), "--tokens-per-s", "400",
                                  "--server-count", "4", "--output-tokens", "1500", "--json")
    assert rc == 0, err
    plan = json.loads(text)
    assert plan["projected_wall_s"] == pytest.approx(85_688, rel=0.01)  # 91,400 x 1,500 / (400 x 4)
    assert plan["projected_wall_s"] / 86400 == pytest.approx(0.99, abs=0.005)
    assert plan["assumed"] is True and plan["prompts"] == 91_400 and plan["servers"] == 4
    assert plan["projected_wall_s_low"] is None and plan["projected_wall_s_high"] is None  # no interval
    assert plan["projected_output_tokens"] == 137_100_000 and plan["verdict"] == "go"
    assert json.loads((out / "plan.json").read_text())["projected_wall_s"] == plan["projected_wall_s"]
    # as text: marked assumed, days, GO
    rc, text, _ = plan_generate(capsys, "--prompts", str(prompts), "--out", str(out), "--tokens-per-s", "400",
                                "--server-count", "4", "--output-tokens", "1500", "--deadline", "12h",
                                "--price-per-hour", "5.5")
    assert rc == 1  # 12 h needs 8 servers
    assert text.startswith("ASSUMED, no server measured: 400 output tokens/s per server x 4 server(s), 1,500 output")
    assert "(85,688 s, 0.99 days)" in text and "no interval: nothing was measured" in text
    assert "deadline in 12h 00m: 8 server(s) needed" in text and "cost at $5.5/server-hour: $523.65" in text
    assert text.rstrip().endswith("verdict: NO-GO: it needs 8 servers to finish by the deadline; 4 given (assumed)")


def test_the_levers_a_subset_a_speed_factor_and_a_cap_on_a_mean(tmp_path, prompts, capsys):
    base = ["--prompts", str(prompts), "--out", str(tmp_path / "out"), "--tokens-per-s", "400", "--server-count",
            "4", "--output-tokens", "1500", "--json"]
    rc, text, _ = plan_generate(capsys, *base, "--subset", "25%", "--speed-factor", "1.6")
    plan = json.loads(text)
    assert plan["prompts"] == 22_850 and plan["prompts_in_file"] == 91_400
    assert plan["projected_wall_s"] == pytest.approx(22_850 * 1500 / (400 * 1.6 * 4), abs=0.1)
    assert plan["levers"] == ["subset: 22,850 of the 91,400 prompts",
                              "speed x1.6: 400 -> 640 output tokens/s per server"]
    rc, text, _ = plan_generate(capsys, *base, "--subset", "50000")
    assert json.loads(text)["prompts"] == 50_000
    # a cap under the assumed mean: the mean is taken as the cap, and it is a NO-GO (a mean cannot say how many are cut)
    rc, text, _ = plan_generate(capsys, *base, "--max-tokens", "1024")
    plan = json.loads(text)
    assert rc == 1 and plan["output_length"]["mean"] == 1024 and plan["output_length"]["cut_share"] is None
    assert plan["reasons"] == ["the assumed mean of 1,500 output tokens is above max_tokens=1024: many answers "
                               "would be cut (raise --max-tokens)"]


def _measured(tmp_path, prompts) -> str:
    """A measured plan whose pilot saw lengths 10, 20, ..., 2000 (200 completions) under max_tokens 4096."""
    comps = [Completion(level=0, start=i * 0.1, end=i * 0.1 + 1, latency_s=1.0, k=1.0, tokens=10 * (i + 1),
                        reasoning_tokens=None, cut=False, empty=False, bytes=100) for i in range(200)]
    plan = build_plan(PilotResult(completions=comps), [1], n_servers=1, total=1000, done=200, max_tokens=4096)
    assert len(plan["output_length"]["quantiles"]) == 101  # what --lengths-from caps
    plan["dataset"] = fingerprint(str(prompts))
    return write(tmp_path / "measured" / "plan.json", plan)


def test_a_cap_on_a_measured_plan_s_lengths_cuts_its_distribution(tmp_path, prompts, capsys):
    measured = _measured(tmp_path, prompts)
    rc, text, err = plan_generate(capsys, "--prompts", str(prompts), "--out", str(tmp_path / "out"),
                                  "--tokens-per-s", "1000", "--server-count", "2", "--lengths-from", measured,
                                  "--max-tokens", "1500", "--json")
    plan = json.loads(text)
    ol = plan["output_length"]
    # lengths 10..2000 uniform: a quarter at or above 1500; the mean of min(x, 1500) is about 943 (1,005 uncapped)
    assert ol["cut_share"] == pytest.approx(0.25, abs=0.01) and ol["mean"] == pytest.approx(943, rel=0.01)
    assert plan["useful_share"] == pytest.approx(0.75, abs=0.01)
    assert rc == 1 and plan["reasons"][0].startswith("26% of the answers would be cut at max_tokens=1500")
    assert plan["levers"][0].startswith(f"max_tokens 1500 on the lengths of {measured}: mean 1,005 -> 94")
    assert plan["projected_wall_s"] == pytest.approx(91_400 * ol["mean"] / 2000, rel=1e-3)
    # above every length: nothing cut, the mean as measured
    assert capped({"quantiles": [10.0 * (i + 1) for i in range(101)], "max_tokens": 4096}, 4096)["mean"] == \
        pytest.approx(510.0)


def test_plan_compare_takes_an_assumed_plan_beside_a_measured_one_and_marks_it(tmp_path, prompts, capsys):
    ds = fingerprint(str(prompts))
    measured = write(tmp_path / "h200" / "plan.json", {**generate_plan_doc(ds, tok_s_per_server=900, price=3.0),
                                                       "prompts": 91_400, "remaining": 91_200})
    rc, _, err = plan_generate(capsys, "--prompts", str(prompts), "--out", str(tmp_path / "b200"),
                               "--tokens-per-s", "3000", "--server-count", "4", "--output-tokens", "1500",
                               "--price-per-hour", "5.5")
    assert rc == 0, err
    p = argparse.ArgumentParser()
    compare.add_arguments(p)
    assert compare.run(p.parse_args([measured, str(tmp_path / "b200"), "--json"])) == 0
    doc = json.loads(capsys.readouterr().out)
    h200, b200 = doc["fleets"]
    assert (h200["assumed"], b200["assumed"]) == (False, True) and doc["assumed"] == ["b200"]
    assert b200["days_low"] is None and b200["days"] == pytest.approx(91_400 * 1500 / (4 * 3000) / 86400, abs=1e-3)
    assert b200["assumed_from"] == "3,000 output tokens/s per server, 1,500 output tokens an answer, max_tokens 4096"
    assert doc["faster"] == "b200" and doc["faster_beyond_interval"] is None  # the faster has no interval
    # scaled like a measured plan: 8 servers, half the time
    assert compare.run(p.parse_args([measured, f"{tmp_path / 'b200'},servers=8", "--json"])) == 0
    assert json.loads(capsys.readouterr().out)["fleets"][1]["days"] == pytest.approx(b200["days"] / 2, abs=1e-3)
    assert compare.run(p.parse_args([measured, str(tmp_path / "b200")])) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.startswith("b200*"))
    assert "assumed" in row.split()
    assert "* b200: assumed, not measured (3,000 output tokens/s per server, 1,500 output tokens an answer, " \
           "max_tokens 4096); no interval" in text


@pytest.mark.parametrize("argv, message", [
    ([], "--server is needed for a pilot; without a server, plan from published numbers with --tokens-per-s"),
    (["--server", "http://h:1", "--output-tokens", "1500"], "--output-tokens goes with --tokens-per-s"),
    (["--tokens-per-s", "400"], "--tokens-per-s needs the answers' length: --output-tokens L"),
    (["--tokens-per-s", "400", "--output-tokens", "9", "--subset", "0"], "--subset '0': expected a number of prompts"),
])
def test_mistakes_say_what_and_exit_2(tmp_path, capsys, argv, message):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "prompt": "x"}\n')
    rc, out, err = plan_generate(capsys, "--prompts", str(f), "--out", str(tmp_path / "o"), *argv)
    assert rc == 2 and out == "" and message in err, err


def test_the_pure_arithmetic_of_servers_needed_and_cost():
    plan = build_assumed(prompts_in_file=1000, prompt_bytes=100.0, subset=None, tokens_per_s=100.0, servers=2,
                         lengths={"mean": 360.0}, max_tokens=4096, deadline_s=600.0, price=2.0)
    assert plan["projected_wall_s"] == 1800.0 and plan["servers_needed"] == 6 and plan["projected_cost"] == 2.0
    assert plan["projected_bytes"] == 1000 * (100 + 360 * 4 + 300) and plan["verdict"] == "no-go"
