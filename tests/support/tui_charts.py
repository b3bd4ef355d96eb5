"""What tests/tui/test_tui_charts.py and tests/unit/test_tui_charts.py share (split out of
tests/test_tui_charts.py when the suite went into tiers)."""

from __future__ import annotations

from support.tui import PINNED_NOW

NOW = PINNED_NOW  # 2025-11-30 12:00:00 UTC, a Sunday
