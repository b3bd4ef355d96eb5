"""docs/morning.svg, the README's second picture: the morning after a night's run, a job's
details with its chart over 24 hours, the plan's line against the real one, the axes.

The fleet is the pinned one of the snapshot tests (tests/support/tui.py); its night is seeded
as the node would send it: the greeting's 12 hours (minute means, then the last hour's
samples) and the page of `ReadHistory` at 1m that picking 24h reads. Nothing is connected, so
the picture is the same on every machine (the clock and the zone are pinned).

    python tests/tools/morning_screenshot.py [docs/morning.svg]      (make morning-screenshot)
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from gpudeck.agents.contract.ops import HistoryPage, HistoryPoint  # noqa: E402
from gpudeck.agents.contract.wire import History, Sample  # noqa: E402
from gpudeck.console.app import make_app  # noqa: E402
from support.tui import PINNED_NOW, feed_pinned, pinned_fleet, wait_until  # noqa: E402

NOW = PINNED_NOW
START = NOW - 7200 - 14 * 3600  # the job began at 20:00 (its first attempt), and was restarted at 11:00


def rate(t: float) -> float:
    """tokens/s over the night: warm-up, a steady plateau with the night's waves, a dip at 03:00
    (a server restarted), the restart at 11:00."""
    h = (t - START) / 3600
    base = 2400 * min(1.0, h / 0.5) + 120 * math.sin(h * 1.7)
    if 7.0 < h < 7.6:
        base *= 0.35
    if 15.0 < h < 15.1:
        base = 0.0
    return max(0.0, base)


_MINUTES = int((NOW - START) / 60)
_CUMULATIVE = [0.0]
for _k in range(_MINUTES):
    _CUMULATIVE.append(_CUMULATIVE[-1] + rate(START + 60 * _k))


def done(t: float) -> float:
    """Items done by ``t``: in step with the tokens, 123,456 by now (the pinned snapshot's)."""
    return 123_456 * _CUMULATIVE[max(0, min(_MINUTES, int((t - START) / 60)))] / _CUMULATIVE[-1]


def seeded(app) -> None:
    minutes = [Sample(t, [], [95.0, 93.0, 0.0, 40.0], {"gen": rate(t)}, {"gen": int(done(t))})
               for t in range(int(NOW - 12 * 3600) + 30, int(NOW - 3600), 60)]
    app.state.apply_history(History("gpu-a", minutes))
    points = [HistoryPoint(t=float(t), job="gen", state="running", n=60,
                           mean={"tokens_per_s": rate(t + 30), "done": done(t + 30)})
              for t in range(int(NOW - 86400), int(NOW), 60) if t >= START]
    app.state.apply_history_page("gpu-a", "gen", "24h", HistoryPage(points=points, resolution="1m", node="gpu-a"),
                                 NOW)


async def main(out: Path) -> None:
    os.environ["TZ"] = "UTC"
    time.tzset()
    app = make_app(pinned_fleet(price_per_hour=36.0), connect=False, clock=lambda: NOW, tick_s=0,
                   initial_view="jobs")
    app.animation_level = "none"
    async with app.run_test(size=(140, 44)) as pilot:
        seeded(app)
        feed_pinned(app)
        await wait_until(pilot, lambda: app.state.nodes["gpu-b"].error is not None, what="the pinned fleet")
        app.refresh_views()
        app.screen.table("jobs").move_cursor_to_key("gpu-a/gen")
        from support.tui import describe

        await describe(pilot, tab="log")  # enter describes the job; its `l` tab: the chart and the log
        await pilot.press("t")
        await wait_until(pilot, lambda: app.screen.query_one("#job-chart").chart.range == "24h", what="24h")
        app.refresh_views()
        await pilot.pause()
        out.write_text(app.export_screenshot(title="gpudeck: the morning after"))
        if "--text" in sys.argv:
            from support.tui import screen_text
            print(screen_text(app))
    print(f"wrote {out}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--text"]
    asyncio.run(main(Path(args[0]) if args else ROOT / "docs" / "morning.svg"))
