"""The suite's one waiter (tests/support/wait.py): what it returns, and what a timeout says."""

from __future__ import annotations

import itertools

import pytest

from support.wait import wait_for, wait_for_async


def test_returns_the_first_truthy_value():
    counter = itertools.count()
    assert wait_for(lambda: next(counter) >= 3 and "found", timeout=5, interval=0.001) == "found"


def test_a_timeout_names_what_was_awaited_the_timeout_and_the_detail_of_that_moment():
    seen = []

    def cond():
        seen.append(len(seen))
        return None

    with pytest.raises(AssertionError) as exc:
        wait_for(cond, timeout=0.05, what="the moon", interval=0.01, detail=lambda: f"polled {len(seen)} times")
    message = str(exc.value)
    assert message.startswith("timed out after 0.05 s waiting for the moon\npolled ")
    assert message.endswith(f"polled {len(seen)} times") and len(seen) >= 2


def test_a_condition_that_raises_fails_at_once():
    with pytest.raises(KeyError):
        wait_for(lambda: {}["missing"], timeout=30)


async def test_async_returns_the_value_and_lets_the_loop_run_between_polls():
    pauses = []

    async def pause(interval):
        pauses.append(interval)

    assert await wait_for_async(lambda: len(pauses) >= 2 and pauses, timeout=5, interval=0.01, pause=pause) == [0.01, 0.01]


async def test_async_timeout_says_the_same_as_the_sync_one():
    with pytest.raises(AssertionError, match=r"^timed out after 0\.05 s waiting for the sun\nstill dark$"):
        await wait_for_async(lambda: 0, timeout=0.05, what="the sun", interval=0.01, detail=lambda: "still dark")
