"""The engines' own code, not hand-made pages: SGLang 0.5.23's metrics collectors write the
/metrics page gpudeck scrapes, and SGLang's argument parser reads the command line gpudeck
builds for the ``sglang-server`` kind. Both run in a process of their own
(tests/tools/sglang_probe.py says how, and why torchvision is a stand-in there).

``make test`` installs sglang==0.5.23 and the packages its imports need (see the Makefile);
elsewhere these tests skip, naming what is missing.


The unit tier's tests of this file (starts nothing); the others are in
tests/system/test_engine_sources.py."""

from __future__ import annotations

import json
import sys
import pytest
from support import ROOT


# ------------------------------------------------------------------ the names, read from the source
# vLLM 0.33 is not installed for the tests: its wheel is 336 MB (837 MB unpacked, most of it CUDA
# kernels) and pins torch==2.14.0. Its metrics module, vllm/v1/metrics/loggers.py, does import on
# a CPU machine from the wheel's Python files (with cbor2, openai-harmony, cachetools,
# cloudpickle, uvloop, py-cpuinfo, xgrammar, partial-json-parser and llguidance beside
# SGLang's set), but that is not wired in here. Its names come from its source instead:
# tests/tools/engine_metric_names.py wrote tests/fixtures/engine_metrics/vllm-0.33.0.json from
# vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl (`pip download --no-deps vllm==0.33.0`).
# Set GPUDECK_VLLM_WHEEL to that wheel to check the file against it.

sys.path.insert(0, str(ROOT / "tests" / "tools"))
import engine_metric_names  # noqa: E402
from support.engine_sources import check_scraper_knows

VLLM_NAMES = ROOT / "tests" / "fixtures" / "engine_metrics" / "vllm-0.33.0.json"


def test_vllm_033_defines_every_name_the_scraper_reads():
    defined = json.loads(VLLM_NAMES.read_text())["metrics"]
    check_scraper_knows("vllm", defined)
    assert "vllm:gpu_cache_usage_perc" not in defined  # the old name, still read for older servers


def test_vllm_names_file_is_what_the_wheel_says():
    import os
    from pathlib import Path

    wheel = os.environ.get("GPUDECK_VLLM_WHEEL")
    if not wheel:
        pytest.skip("GPUDECK_VLLM_WHEEL not set (the vllm==0.33.0 wheel is 336 MB)")
    assert engine_metric_names.engine_metrics(Path(wheel)) == json.loads(VLLM_NAMES.read_text())["metrics"]
