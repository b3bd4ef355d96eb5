"""`gpudeck up` and `demo` move what start-up made out of the collector's sight once the first
screen is drawn (gc.freeze: a full collection then walks only what the updates make); an app
built without ``freeze_startup`` (the tests' apps) leaves the collector alone."""

from __future__ import annotations

import gc

from gpudeck.console.app import make_app
from gpudeck.console.commands import demo, up
from gpudeck.remote.fleet import parse_fleet
from support.tui import wait_until


async def frozen_calls(tmp_path, monkeypatch, **kw) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(1))  # the real one would outlive the test
    path = tmp_path / "fleet.toml"
    path.write_text('[defaults]\nnvml = false\n')
    app = make_app(parse_fleet(path.read_text(), str(path)), connect=False, tick_s=0, **kw)
    async with app.run_test() as pilot:
        await pilot.pause()
        if kw.get("freeze_startup"):
            await wait_until(pilot, lambda: calls, what="gc.freeze once the first screen is drawn")
    return calls


async def test_an_app_that_freezes_its_start_calls_gc_freeze_once_drawn(tmp_path, monkeypatch):
    assert await frozen_calls(tmp_path, monkeypatch, freeze_startup=True) == [1]


async def test_an_app_built_without_it_never_freezes(tmp_path, monkeypatch):
    assert await frozen_calls(tmp_path, monkeypatch) == []


def test_up_and_demo_ask_for_it():
    import inspect
    for command in (up, demo):
        assert "freeze_startup=True" in inspect.getsource(command), command.__name__
