"""How often the console redraws (console/pacing.py): no more often than a redraw's cost
allows, snapshots that arrive meanwhile drawn together, a key drawn at once. Redraws are
counted through the pacer (``app.pacer.redraws``), never timed: the pacer's own rule is
tested on a clock the test moves.

The unit tier's tests of this file (starts nothing); the others are in tests/tui/test_tui_pacing.py."""

from __future__ import annotations

import pytest
from gpudeck.console.pacing import RedrawPacer


# ---------------------------------------------------------------- the rule, on a clock the test moves


def test_snapshots_arriving_within_one_interval_make_one_redraw():
    pacer = RedrawPacer(least_s=0.05, share=0.05, most_s=1.0)
    now, armed_until, drawn_at = 0.0, None, []
    for k in range(1000):  # a snapshot every 2 ms for 2 s, as 1,000 agents out of phase
        now = k * 0.002
        if armed_until is not None and now >= armed_until:  # the armed timer fires: one redraw
            pacer.drawing(armed_until)
            pacer.measured(0.020)  # each redraw costs 20 ms of CPU
            drawn_at.append(armed_until)
            armed_until = None
        if armed_until is None:
            armed_until = now + pacer.delay(now)
    # 20 ms a redraw at most 5% of the time: at most one redraw in 400 ms
    assert pacer.interval_s == pytest.approx(0.4)
    gaps = [b - a for a, b in zip(drawn_at[1:], drawn_at[2:])]  # (the first gap follows the first, unknown cost)
    assert len(drawn_at) <= 1 + 2.0 / 0.4 and all(g >= 0.4 - 1e-9 for g in gaps), drawn_at


def test_the_interval_follows_the_cost_between_its_bounds():
    pacer = RedrawPacer(least_s=0.05, share=0.05, most_s=1.0)
    assert pacer.interval_s == 0.05 and pacer.delay(10.0) == 0.05  # nothing drawn yet: the coalescing window
    pacer.drawing(10.0)
    pacer.measured(0.001)  # cheap: every 50 ms at most
    assert pacer.interval_s == 0.05
    assert pacer.delay(10.01) == pytest.approx(0.05) and pacer.delay(12.0) == 0.05
    for _ in range(50):
        pacer.measured(0.5)  # dear: 10 s by the share, but the screen is never more than 1 s old
    assert pacer.interval_s == 1.0 and pacer.delay(10.2) == pytest.approx(0.8)
    pacer.measured(0.0)  # one cheap redraw moves the average, not all the way
    assert 0.05 < pacer.interval_s <= 1.0
