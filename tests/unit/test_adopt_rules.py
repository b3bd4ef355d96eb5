"""The console's side of adopt, as data (console/actions.py) and the command's exit codes: no
process started (tests/system/test_adopt.py drives real agents)."""

from __future__ import annotations

from gpudeck.agents.contract.errors import ADOPT_REFUSALS, AdoptRefused
from gpudeck.console.actions import Confirm, Refuse, adopt_name, plan_process_adopt
from gpudeck.console.commands.adopt import REFUSAL_EXITS


def test_the_console_names_an_adopted_process_after_its_program_and_pid():
    assert adopt_name(4242, "/usr/bin/python3 -m sglang.launch_server --port 1") == "python3-4242"
    assert adopt_name(7, "./[weird] name") == "weird-7"
    assert adopt_name(9, None) == "pid-9" and adopt_name(9, "") == "pid-9"


def test_adopt_asks_first_and_never_in_read_only():
    plan = plan_process_adopt("gpu1", 4242, "python3-4242", "python3 serve.py [b]x[/b]", read_only=False)
    assert isinstance(plan, Confirm) and plan.yes == "Adopt" and "python3-4242" in plan.question
    assert "[b]x[/b]" not in plan.question  # the command line is escaped, not markup
    refused = plan_process_adopt("gpu1", 4242, "python3-4242", None, read_only=True)
    assert isinstance(refused, Refuse) and "read-only" in refused.message


def test_every_refusal_has_its_own_exit_code():
    assert set(REFUSAL_EXITS) == set(ADOPT_REFUSALS)
    mine = {REFUSAL_EXITS[k] for k in ("not_yours", "pid_reused", "owned")}
    assert len(mine) == 3 and not mine & {0, 1, 2, 3}
    assert REFUSAL_EXITS["no_such_pid"] == REFUSAL_EXITS["name_taken"] == 2
    assert REFUSAL_EXITS["holds_node"] == 8 and not {8} & mine  # what `kill --pid` gives it too (common.py)
    assert AdoptRefused("no_such_pid", "x").usage and not AdoptRefused("owned", "x").usage
