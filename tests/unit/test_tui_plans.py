"""The console's plans screen (`p`, or the palette's "plans: compare"): the fleet file's
[[plans]] side by side with the table of `gpudeck plan compare`, read again at each `p`; fewer
than two plans, or plans that cannot be compared, say why. And the same [[plans]] through
`gpudeck plan compare -f FLEET`, and the fleet file's checks of them.

No process: the console is not connected (``connect=False``), the plans are files written here.

The unit tier's tests of this file (starts nothing); the others are in tests/tui/test_tui_plans.py."""

from __future__ import annotations

import argparse
import json

import pytest
from gpudeck.console.commands import plan as plan_command
from gpudeck.remote.fleet import parse_fleet
from gpudeck.remote.fleet_check import FleetError
from support.tui_plans import TWO_PLANS, dataset, fleet_with_plans, two_pilots  # noqa: F401


def test_the_fleet_file_checks_its_plans_with_their_lines(tmp_path):
    with pytest.raises(FleetError) as caught:
        parse_fleet('[[plans]]\npath = "a"\n\n[[plans]]\nname = "b"\nservers = 0\n', "fleet.toml")
    assert str(caught.value).startswith("fleet.toml:6: [[plans]] #2 'servers': expected a whole number of at least 1")
    with pytest.raises(FleetError) as caught:
        parse_fleet('[[plans]]\nname = "b"\n', "fleet.toml")
    assert "fleet.toml:1: [[plans]] #1 needs a 'path'" in str(caught.value)
    with pytest.raises(FleetError) as caught:
        parse_fleet('[[plans]]\npath = "a"\nprise = 3\n', "fleet.toml")
    assert "fleet.toml:3:" in str(caught.value) and "did you mean 'price'" in str(caught.value)
    with pytest.raises(FleetError) as caught:
        parse_fleet('[[plans]]\npath = "a"\nprice = -1\n', "fleet.toml")
    assert "fleet.toml:3: [[plans]] #1 'price'" in str(caught.value)
    # a relative path is the fleet file's directory's; ~ is this machine's home
    fleet = fleet_with_plans(tmp_path, TWO_PLANS + '\n[[plans]]\npath = "~/runs/x"\n')
    assert [p.path for p in fleet.plans[:2]] == [str(tmp_path / "runs" / "pro6000"),
                                                str(tmp_path / "runs" / "b200" / "plan.json")]
    assert fleet.plans[2].path.endswith("/runs/x") and not fleet.plans[2].path.startswith("~")
    assert (fleet.plans[1].servers, fleet.plans[1].price, fleet.plans[0].price) == (7, 5.5, None)


def test_plan_compare_dash_f_compares_the_fleet_s_plans(tmp_path, dataset, capsys, monkeypatch):
    monkeypatch.delenv("GPUDECK_FLEET", raising=False)
    two_pilots(tmp_path, dataset)
    fleet = fleet_with_plans(tmp_path, TWO_PLANS)
    parser = argparse.ArgumentParser()
    plan_command.register(parser.add_subparsers())
    args = parser.parse_args(["plan", "compare", "-f", fleet.path, "--json"])
    assert args.run(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["cheaper"], doc["faster"]) == ("pro6000", "b200")
    assert [(f["name"], f["servers"]) for f in doc["fleets"]] == [("pro6000", 4), ("b200", 7)]
    # what the console's screen shows is this table
    args = parser.parse_args(["plan", "compare", "-f", fleet.path])
    assert args.run(args) == 0
    assert capsys.readouterr().out.strip() == plan_command.compare_plans(fleet.plans, fleet.path).text.strip()
    # no plan given, no fleet file: exit 2, saying what to give
    args = parser.parse_args(["plan", "compare"])
    assert args.run(args) == 2
    assert "no plan given, and no fleet file (-f FLEET" in capsys.readouterr().err
