"""Engine scrapers on the fixture pages (tests/system/test_engines.py: a real HTTP server playing every
state; tests/e2e/test_engines.py: a real llama-server).

The unit tier's tests of this file (starts nothing); the others are in tests/system/test_engines.py,
tests/e2e/test_engines.py."""

from __future__ import annotations

import pytest

from gpudeck.agents.sense.engines import MetricsParseError, parse_metrics
from support import FIXTURES


def test_sglang_fixture_sums_data_parallel_ranks():
    m = parse_metrics((FIXTURES / "sglang_metrics_sample.txt").read_text())
    assert m.flavor == "sglang"
    assert m.generation_tokens == 134155001.0
    assert m.running == 207 + 212 and m.queued == 51 + 44
    assert m.kv_usage == pytest.approx((0.7649 + 0.7812) / 2)
    assert m.accept_length is None  # spec_accept_length 0: speculative decoding off


def test_vllm_fixture_sums_engines():
    m = parse_metrics((FIXTURES / "vllm_metrics_sample.txt").read_text())
    assert m.flavor == "vllm"
    assert m.generation_tokens == 6.6903122e07 + 6.6611804e07
    assert m.running == 205 + 211 and m.queued == 38 + 29
    assert m.kv_usage == pytest.approx((0.8121 + 0.7968) / 2)


def test_tensor_parallel_ranks_are_not_summed():
    page = "\n".join([
        "# TYPE sglang:num_running_reqs gauge",
        'sglang:num_running_reqs{dp_rank="0",tp_rank="0"} 10.0',
        'sglang:num_running_reqs{dp_rank="0",tp_rank="1"} 10.0',
        'sglang:num_running_reqs{dp_rank="1",tp_rank="0"} 5.0',
        'sglang:num_running_reqs{dp_rank="1",tp_rank="1"} 5.0',
        "# TYPE sglang:spec_accept_length gauge",
        'sglang:spec_accept_length{dp_rank="0",tp_rank="0"} 3.2',
        ""])
    m = parse_metrics(page)
    assert m.running == 15.0 and m.accept_length == 3.2


def test_vllm_speculative_accept_length():
    page = "\n".join([
        "# TYPE vllm:spec_decode_num_drafts counter",
        'vllm:spec_decode_num_drafts_total{engine="0"} 100.0',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 250.0', ""])
    assert parse_metrics(page).accept_length == 3.5


@pytest.mark.parametrize("page", ["<html><body>Welcome to nginx</body></html>", "garbage here\n",
                                  'sglang:num_running_reqs{dp_rank="0" 1\n', "\x00\x01\x02"])
def test_garbage_pages_raise_a_clear_error(page):
    with pytest.raises(MetricsParseError, match="not a Prometheus text page"):
        parse_metrics(page)
