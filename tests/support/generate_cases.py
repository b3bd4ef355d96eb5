"""What tests/system/test_generate.py and tests/unit/test_generate.py share (split out of
tests/test_generate.py when the suite went into tiers)."""

from __future__ import annotations

import json


# ---------------------------------------------------------------- duplicate ids, huge prompt lines

def _p(pid: str, text: str) -> str:
    return json.dumps({"id": pid, "messages": [{"role": "user", "content": text}]}) + "\n"
