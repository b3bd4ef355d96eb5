"""What tests/tui/test_tui_plans.py and tests/unit/test_tui_plans.py share (split out of
tests/test_tui_plans.py when the suite went into tiers)."""

from __future__ import annotations

import json

import pytest

from gpudeck.agents.workers.plan.dataset import fingerprint
from gpudeck.remote.fleet import parse_fleet
from support.plan_compare import generate_plan_doc, write


@pytest.fixture
def dataset(tmp_path):
    f = tmp_path / "prompts.jsonl"
    f.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"question {i}"}) + "\n" for i in range(100)))
    return fingerprint(str(f))


def fleet_with_plans(tmp_path, plans: str):
    path = tmp_path / "fleet.toml"
    path.write_text(f'[defaults]\nnvml = false\n\n{plans}')
    return parse_fleet(path.read_text(), str(path))


TWO_PLANS = '''
[[plans]]
name = "pro6000"
path = "runs/pro6000"
servers = 4

[[plans]]
name = "b200"
path = "runs/b200/plan.json"
servers = 7
price = 5.5
'''


def two_pilots(tmp_path, dataset) -> None:
    write(tmp_path / "runs" / "pro6000" / "plan.json", generate_plan_doc(dataset, tok_s_per_server=400, price=0.5))
    write(tmp_path / "runs" / "b200" / "plan.json", generate_plan_doc(dataset, tok_s_per_server=3000, price=9.9))
