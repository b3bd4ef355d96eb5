"""The console's keymap (console/keymap.py): one table, no two bindings of one screen on one
key, every binding with an id, the keys k9s, htop and vim hands press, the docs' table of
it, and the user's [keys] (console/userconfig.py) checked before a console opens."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpudeck.console import keymap as km
from gpudeck.console.userconfig import UserConfigError, load_keymap, parse_keys

ROOT = Path(__file__).resolve().parents[2]


def keys_of(binding_id: str) -> tuple[str, ...]:
    return km.BY_ID[binding_id].key_list


def test_no_two_bindings_of_one_screen_take_one_key():
    assert km.collisions() == []
    assert len({k.id for k in km.KEYMAP}) == len(km.KEYMAP)  # an id names one binding


def test_a_collision_is_found_and_named():
    moved = tuple(km.Key(**{**k.__dict__, "keys": "k"}) if k.id == "job.kill" else k for k in km.KEYMAP)
    assert moved and "a view's table: k is job.kill and cursor.up" in km.collisions(moved)


def test_the_keys_a_k9s_htop_or_vim_hand_presses():
    assert "colon" in keys_of("app.command")
    assert keys_of("cursor.down") == ("down", "j") and keys_of("cursor.up") == ("up", "k")
    assert "g" in keys_of("cursor.top") and "G" in keys_of("cursor.bottom")
    assert keys_of("job.kill") == ("ctrl+k", "f9")  # k9s's kill, htop's F9: k moves up now
    assert set(keys_of("app.help")) == {"question_mark", "f1"} and set(keys_of("app.quit")) == {"q", "f10"}
    assert set(keys_of("view.filter")) == {"slash", "f3"} and keys_of("view.sort_by") == ("f6",)
    assert keys_of("view.describe") == ("enter", "d")  # k9s's describe; doctor moved to :doctor (and D)
    assert km.BY_ID["job.ack"].keys == "A" and km.BY_ID["job.ack"].acts  # the gave_up acknowledge key
    for k in km.KEYMAP:  # every key that acts on a job asks first or says why not: they go through actions.plan_*
        if k.acts:
            assert k.action.startswith("job(") or k.action == "adopt_process", k.id


def test_a_sort_key_never_takes_a_key_already_bound():
    letters = {k.keys for k in km.SORT_KEYS}
    assert all(len(x) == 1 and x.isupper() for x in letters) and len(letters) == len(km.SORT_KEYS)
    # the shift+letters the other keys hold: chart range back, previous match, reverse, last row,
    # launch, acknowledge, doctor
    assert letters.isdisjoint({"T", "N", "S", "G", "L", "A", "D"})


def test_every_binding_the_console_declares_has_an_id():
    from gpudeck.console.app import GpuDeckApp
    from gpudeck.console.screens.command_line import CommandLine
    from gpudeck.console.screens.confirm import ConfirmScreen
    from gpudeck.console.screens.describe import DescribeScreen, Scroller
    from gpudeck.console.screens.doctor import DoctorScreen
    from gpudeck.console.screens.error import ErrorScreen
    from gpudeck.console.screens.help import HelpScreen
    from gpudeck.console.screens.main import MainScreen
    from gpudeck.console.screens.plans import PlansScreen
    from gpudeck.console.screens.sort_picker import SortPicker
    from gpudeck.console.widgets.filter_bar import FilterBar
    from gpudeck.console.widgets.live_table import LiveTable
    from gpudeck.console.widgets.log_panel import KeyedLog

    classes = (GpuDeckApp, MainScreen, DescribeScreen, Scroller, LiveTable, KeyedLog, ConfirmScreen, HelpScreen,
               DoctorScreen, PlansScreen, ErrorScreen, CommandLine, SortPicker, FilterBar)
    for cls in classes:
        own = cls.__dict__["BINDINGS"]
        assert own, cls.__name__
        for b in own:
            assert b.id in km.BY_ID and km.BY_ID[b.id].keys == b.key, (cls.__name__, b)


def test_docs_list_every_key_with_its_origin():
    """docs/console.md's keymap: one row per binding: its keys, its id and where a hand knows it from."""
    doc = (ROOT / "docs" / "console.md").read_text()
    rows = {m.group(3): m for m in re.finditer(r"^\| (.+?) \| (.+?) \| `([a-z_.]+)` \| (.+?) \| (.+?) \|$", doc, re.M)}
    missing = [k.id for k in km.KEYMAP if k.id not in rows]
    assert not missing, f"docs/console.md#keys lacks {missing}"
    for k in km.KEYMAP:
        row = rows[k.id]
        assert row.group(1) == " ".join(f"`{x}`" for x in k.shown.split(" ")), (k.id, row.group(1))
        assert row.group(5) == k.origin, (k.id, row.group(5))
    assert set(rows) == set(km.BY_ID), set(rows) - set(km.BY_ID)  # no row for a binding that is gone


# ---------------------------------------------------------------- the user's [keys]


def test_keys_move_by_binding_id(tmp_path):
    path = tmp_path / "console.toml"
    path.write_text('[keys]\n"job.kill" = "k"\n"cursor.up" = ["up"]\n"scroll.up" = "up"\n"view.describe" = "enter"\n'
                    '"node.doctor" = "d"\n')
    assert load_keymap(path) == {"job.kill": "k", "cursor.up": "up", "scroll.up": "up", "view.describe": "enter",
                                 "node.doctor": "d"}


def test_no_file_moves_nothing(tmp_path):
    assert load_keymap(tmp_path / "absent.toml") == {}


@pytest.mark.parametrize("text, said", [
    ('[keys]\n"job.kil" = "k"\n', "[keys] 'job.kil': no binding has this id"),
    ('[keys]\n"kill" = "k"\n', "(did you mean 'job.kill'?)"),
    ('[keys]\n"job.kill" = "k"\n', "two bindings on one key: a view's table: k is job.kill and cursor.up"),
    ('[keys]\n"job.kill" = 3\n', "[keys] 'job.kill': 3 is no key"),
    ('[keys]\n"job.kill" = ""\n', "is no key"),
    ('[key]\n"job.kill" = "x"\n', "unknown table or key 'key'"),
    ('[keys\n', "not TOML"),
])
def test_a_mistake_names_the_file_and_the_key(tmp_path, text, said):
    path = tmp_path / "console.toml"
    path.write_text(text)
    with pytest.raises(UserConfigError) as err:
        load_keymap(path)
    assert str(err.value).startswith(f"{path}: ") and said in str(err.value), str(err.value)


def test_keys_as_a_hand_writes_them():
    assert parse_keys({"app.help": "?", "view.filter": "/,F3", "job.kill": "Ctrl+K", "app.command": ":"}, "x") == \
        {"app.help": "question_mark", "view.filter": "slash,f3", "job.kill": "ctrl+k", "app.command": "colon"}


def test_the_config_file_is_under_xdg_config_home(monkeypatch, tmp_path):
    from gpudeck.console.userconfig import ENV, config_path

    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config_path() == tmp_path / "gpudeck" / "console.toml"
    monkeypatch.setenv(ENV, str(tmp_path / "mine.toml"))
    assert config_path() == tmp_path / "mine.toml"
