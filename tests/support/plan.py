"""What tests/e2e/test_plan.py and tests/system/test_plan.py and tests/unit/test_plan.py share (split out of
tests/test_plan.py when the suite went into tiers)."""

from __future__ import annotations

import json
import random
import subprocess
from support.generate import PY, ROOT, child_env

SEED_LAYERS, SEED_HIDDEN, SEED_SAMPLES, SEED_TOKENS_EACH = 5, 5120, 902_087, 2000


def plan_cli(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpudeck.console", "plan", *argv], capture_output=True, text=True,
                          env=child_env(), cwd=ROOT, timeout=timeout)


def write_prompts(path, n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            words = " ".join(f"w{rng.randint(0, 999)}" for _ in range(rng.randint(3, 120)))
            f.write(json.dumps({"id": f"p{i}", "prompt": f"question {i}: {words}"}) + "\n")
    return [f"p{i}" for i in range(n)]
