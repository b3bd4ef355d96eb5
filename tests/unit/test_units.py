"""The contract's units: one grammar of a duration (fleet file, command line, plan) and one
spelling of a duration and a size."""

from __future__ import annotations

import pytest

from gpudeck.agents.contract.units import human_bytes, human_duration, parse_duration


@pytest.mark.parametrize("text, seconds", [
    ("500ms", 0.5), ("45s", 45), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1w", 7 * 86400),
    ("1d12h", 36 * 3600), ("1m30s", 90), ("3600", 3600), (90, 90), (2.5, 2.5), (" 10m ", 600), ("1.5h", 5400)])
def test_one_grammar_of_a_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["soon", "", "1y", "-5m", "0", "0s", True, None, "nan", "inf", "5m garbage", [1]])
def test_a_bad_duration_says_what_was_expected(bad):
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(bad)


def test_never_is_no_limit_only_where_asked_for():
    for text in ("never", "0", "0s", 0, "NEVER"):
        assert parse_duration(text, never=True) is None
    with pytest.raises(ValueError, match="'never'"):
        parse_duration("forever", never=True)
    with pytest.raises(ValueError):
        parse_duration("never")


def test_one_spelling_of_a_duration_and_a_size():
    assert [human_duration(s) for s in (None, 12, 250, 7500, 5 * 86400 + 3 * 3600)] == \
        ["-", "12s", "4m 10s", "2h 05m", "5d 3h"]
    assert human_bytes(None) == "-" and human_bytes(999) == "999 B" and human_bytes(1.5e12) == "1.5 TB"
    assert human_bytes(3 * 2**30, binary=True) == "3.0 GiB" and human_bytes(2**60, binary=True) == "1024.0 PiB"
