"""What tests/system/test_plan_compare.py and tests/unit/test_plan_compare.py share (split out of
tests/test_plan_compare.py when the suite went into tiers)."""

from __future__ import annotations

import json

import pytest

SEED_PROMPTS, SEED_MEAN_TOKENS = 902_087, 1500


def generate_plan_doc(dataset: dict, *, tok_s_per_server: float, price: float, servers: int = 1,
                      pilot: int = 200, tail_s: float = 600.0, useful: float = 0.9) -> dict:
    """A generate plan as `gpudeck plan generate` writes it, for a server that makes
    ``tok_s_per_server`` output tokens a second on answers of the seed's mean length."""
    cps = servers * tok_s_per_server / SEED_MEAN_TOKENS
    remaining = SEED_PROMPTS - pilot
    wall = remaining / cps + tail_s
    return {"kind": "generate", "prompts": SEED_PROMPTS, "done": pilot, "remaining": remaining, "servers": servers,
            "pilot_done": pilot, "pilot_failed": 0, "best_concurrency": 64, "completions_per_s": cps,
            "projected_wall_s": wall, "projected_wall_s_low": 0.95 * (wall - tail_s) + tail_s,
            "projected_wall_s_high": 1.05 * (wall - tail_s) + tail_s, "projected_tail_s": tail_s,
            "projected_output_tokens": SEED_PROMPTS * SEED_MEAN_TOKENS, "projected_bytes": SEED_PROMPTS * 9000,
            "price_per_hour": price, "useful_share": useful, "output_length": {"cut_share": 0.05, "empty_share": 0.0},
            "dataset": dataset, "written_at": 1.7e9, "verdict": "go", "reasons": []}


def write(path, doc) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.fixture
def prompts(tmp_path):
    f = tmp_path / "prompts.jsonl"
    f.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"question {i}"}) + "\n" for i in range(1000)))
    return f
