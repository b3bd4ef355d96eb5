"""What tests/system/test_engine_sources.py and tests/unit/test_engine_sources.py share (split out of
tests/test_engine_sources.py when the suite went into tiers)."""

from __future__ import annotations

from gpudeck.agents.sense.engines import NAMES  # noqa: E402
KIND = {"tokens": "counter", "running": "gauge", "queued": "gauge", "kv": "gauge", "accept": "gauge",
        "accepted": "counter", "drafts": "counter"}


def check_scraper_knows(flavor: str, defined: dict[str, str]) -> None:
    for figure, names in NAMES[flavor].items():
        names = names if isinstance(names, tuple) else (names,)
        # the first name is the engine's current one; later ones are older engines' (gone by now)
        assert defined.get(f"{flavor}:{names[0]}") == KIND[figure], (figure, names[0])
