"""What tests/system/test_extract.py and tests/unit/test_extract.py share (split out of
tests/test_extract.py when the suite went into tiers)."""

from __future__ import annotations

import pytest

from support.extract import build_model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {arch: build_model(str(root / arch), arch) for arch in ("qwen3", "llama", "hybrid")}


def extract(model: str, data: str, out: str, layers: str = "1,3,4", *extra: str) -> int:
    from gpudeck.agents.workers.extract import main
    return main(["--model", model, "--data", data, "--out", out, "--layers", layers, "--device", "cpu", *extra])
