"""What tests/system/test_generate_parts.py and tests/unit/test_generate_parts.py share (split out of
tests/test_generate_parts.py when the suite went into tiers)."""

from __future__ import annotations

N = 3
