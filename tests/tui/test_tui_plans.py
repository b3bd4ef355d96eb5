"""The console's plans screen (`p`, or the palette's "plans: compare"): the fleet file's
[[plans]] side by side with the table of `gpudeck plan compare`, read again at each `p`; fewer
than two plans, or plans that cannot be compared, say why. And the same [[plans]] through
`gpudeck plan compare -f FLEET`, and the fleet file's checks of them.

No process: the console is not connected (``connect=False``), the plans are files written here.

The tui tier's tests of this file (the pilots, no process); the others are in
tests/unit/test_tui_plans.py."""

from __future__ import annotations

from gpudeck.console.app import make_app
from gpudeck.console.commands import plan as plan_command
from gpudeck.console.screens.plans import PlansScreen
from support.tui import screen_text, screen_words, wait_until
from support.plan_compare import generate_plan_doc, write
from support.tui_plans import TWO_PLANS, dataset, fleet_with_plans, two_pilots  # noqa: F401

SIZE = (140, 40)


def console(fleet):
    app = make_app(fleet, connect=False, tick_s=0)
    app.animation_level = "none"
    return app


async def test_p_shows_the_fleet_s_plans_side_by_side_as_plan_compare_prints_them(tmp_path, dataset):
    two_pilots(tmp_path, dataset)
    fleet = fleet_with_plans(tmp_path, TWO_PLANS)
    expected = plan_command.compare_plans(fleet.plans, fleet.path)
    assert expected.doc is not None and expected.doc["cheaper"] == "pro6000" and expected.doc["faster"] == "b200"
    app = console(fleet)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        await wait_until(pilot, lambda: isinstance(app.screen, PlansScreen), what="the plans screen")
        text = await wait_until(pilot, lambda: "faster: b200" in (t := screen_text(app)) and t, what="the table")
        # the rows and the verdicts of `gpudeck plan compare`'s own table
        for line in expected.text.splitlines():
            if line.startswith(("FLEET", "pro6000", "b200", "cheaper:", "faster:")):
                assert line.strip() in text, line
        assert "plans compared" in text and "cheaper: pro6000" in text
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, PlansScreen), what="the screen closed")


async def test_fewer_than_two_plans_say_so_and_a_plan_declared_since_counts(tmp_path, dataset):
    two_pilots(tmp_path, dataset)
    fleet = fleet_with_plans(tmp_path, TWO_PLANS.split("\n[[plans]]\nname = \"b200\"")[0])
    assert len(fleet.plans) == 1
    app = console(fleet)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        # the words, not the lines: where the sentence wraps depends on the fleet file's path
        text = await wait_until(pilot, lambda: "no comparison" in (t := screen_words(app)) and t,
                                what="why there is no comparison")
        assert "one plan in the fleet file" in text and "needs two or more" in text and "[[plans]]" in text
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, PlansScreen), what="the screen closed")
        # the operator declares the second plan: the next `p` reads the fleet file again
        (tmp_path / "fleet.toml").write_text(f'[defaults]\nnvml = false\n\n{TWO_PLANS}')
        await pilot.press("p")
        await wait_until(pilot, lambda: "faster: b200" in screen_text(app), what="the table")


async def test_no_plan_at_all_and_plans_that_cannot_be_compared_say_why(tmp_path, dataset):
    app = console(fleet_with_plans(tmp_path, ""))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        await wait_until(pilot, lambda: "no plan in the fleet file" in screen_text(app), what="no plan")
        # a plan that is not there: compare's own message, naming it
        (tmp_path / "fleet.toml").write_text('[[plans]]\npath = "runs/a"\n\n[[plans]]\npath = "runs/missing"\n')
        write(tmp_path / "runs" / "a" / "plan.json", generate_plan_doc(dataset, tok_s_per_server=1, price=1))
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, PlansScreen), what="the screen closed")
        await pilot.press("p")
        await wait_until(pilot, lambda: "No such file" in screen_text(app), what="the refusal")
        assert f"{tmp_path / 'runs' / 'missing'}: No such file" in app.screen.comparison.error
