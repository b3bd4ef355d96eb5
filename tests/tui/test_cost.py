"""Plans against reality and dollars, as pure functions: the drift text and the plan_drift
condition on the seed's figures, plan.json read only when it changes (and a broken one named,
never a crash), the cost arithmetic, and the console state and header over a priced fleet.

The tui tier's tests of this file (the pilots, no process); the others are in
tests/unit/test_cost.py."""

from __future__ import annotations

from support.cost import NOW, _priced_state


async def test_the_header_and_the_jobs_view_show_the_dollars_and_the_plan():
    from gpudeck.console.app import make_app
    from gpudeck.console.messages import SnapshotReceived
    from support.tui import screen_text, wait_until

    state = _priced_state()
    app = make_app(state.fleet, connect=False, clock=lambda: NOW, tick_s=0, initial_view="jobs")
    async with app.run_test(size=(200, 20)) as pilot:
        for view in state.nodes.values():
            app.post_message(SnapshotReceived(view.snapshot))
        text = await wait_until(pilot, lambda: "to finish" in (s := screen_text(app)) and "gen-b" in s and s,
                                what="the dollars in the header")
        assert "$180 spent, $90.00 to finish" in text
        (gen,) = [line for line in text.splitlines() if line.startswith("gen ")]
        assert "5d 2h→16d 11h" in gen and "+224%" in gen and "$1.00" in gen and "$0.0056" in gen
        (gen_b,) = [line for line in text.splitlines() if line.startswith("gen-b ")]
        assert gen_b.count("—") == 2  # its node has no price
