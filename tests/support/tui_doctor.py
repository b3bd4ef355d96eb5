"""What tests/system/test_tui_doctor.py and tests/tui/test_tui_doctor.py share (split out of
tests/test_tui_doctor.py when the suite went into tiers)."""

from __future__ import annotations

SIZE = (160, 45)
