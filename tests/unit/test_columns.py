"""Columns shrink by rules, not by cutting words (console/widgets/cells.py, console/cost.py), and
describe says a row whole (console/describe.py)."""

from __future__ import annotations

import pytest

from gpudeck.console.cost import money_fit
from gpudeck.console.widgets.cells import gpu_list, gpu_name_fit, phrases_fit, short_gpu_name, words_fit


@pytest.mark.parametrize("v, width, shown", [
    (0.000041, 8, "$41/M"),  # per million of its unit: the meaningful digits kept
    (0.000041, 9, "$0.000041"),  # room for it whole: whole
    (0.0042, 6, "$4.2/k"),
    (0.00042, 6, "$420/M"),
    (0.012, 6, "$0.012"),
    (12_345, 6, "$12k"),
    (1_234_567, 6, "$1.2M"),
    (None, 6, "—"),
])
def test_a_dollar_figure_keeps_its_meaningful_digits(v, width, shown):
    assert money_fit(v, width) == shown and len(shown) <= width


@pytest.mark.parametrize("name, width, shown", [
    ("B200 (simulated)", 17, "B200·sim"),
    ("NVIDIA H200", 17, "H200"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 17, "RTX PRO 6000"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition (simulated)", 17, "RTX PRO 6000·sim"),
    ("node-012: NVIDIA H100 80GB HBM3", 17, "node-012: H100"),
])
def test_a_gpu_name_loses_whole_words_never_part_of_one(name, width, shown):
    assert gpu_name_fit(name, width) == shown
    assert short_gpu_name("B200 (simulated)") == "B200·sim"


def test_flags_are_whole_then_cut_between_words_then_counted():
    flags = [("cut 12", None), ("empty 3", None), ("waiting for extract to finish", None)]
    assert "".join(t for t, _ in phrases_fit(flags, 60)) == "cut 12 empty 3 waiting for extract to finish"
    assert "".join(t for t, _ in phrases_fit(flags, 17)) == "cut 12 empty 3 +1"
    assert "".join(t for t, _ in phrases_fit(flags[2:], 14)) == "waiting for…"
    assert "".join(t for t, _ in phrases_fit(flags[:1], 4)) == "cut…"
    assert "".join(t for t, _ in phrases_fit(flags[2:], 5)) == "+1"  # no word of it fits: counted
    assert words_fit("moved from gpu1 02:10", 12) == "moved from…"


def test_a_jobs_gpus_as_runs_then_counted():
    assert gpu_list([0, 1], 4) == "0,1"
    assert gpu_list(list(range(8)), 4) == "0-7"
    assert gpu_list([0, 2, 4, 6], 4) == "×4"
    assert gpu_list([], 4) == "-"


def test_describe_says_an_alerts_whole_reason_and_when_it_began():
    import time

    from gpudeck.agents.contract.vocab import AlertKind
    from gpudeck.console.describe import describe
    from gpudeck.console.rows import AlertRow
    from gpudeck.console.state import FleetState
    from gpudeck.remote.fleet import parse_fleet

    now = 1_764_504_000.0
    state = FleetState(parse_fleet('[defaults]\nnvml = false\n', "f.toml"), clock=lambda: now)
    reason = "job extract died (exit code 137) on attempt 3 after 2 restarts: " + "x" * 200
    row = AlertRow("k", "local", AlertKind.JOB_DIED, reason, "extract", None, now - 3723)
    said = dict(describe(row, state).fields)
    assert said["reason"] == reason
    began = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now - 3723))
    assert said["began"] == f"{began} (1h 02m ago)" and said["job"] == "extract"
