"""A webhook URL put in the wrong key of [[notify]] or [heartbeat] (url_env, format, events,
method) or used as a key is never echoed by the fleet file's error: only the key and line."""

from __future__ import annotations

import pytest

from gpudeck.remote.fleet import FleetError, parse_fleet

URL = "https://hooks.example.com/services/T000/B000/secret-token-123"


@pytest.mark.parametrize("text, line", [
    (f'[[notify]]\nurl_env = "{URL}"\n', 2),
    (f'[[notify]]\nurl = "https://x.example/a"\nformat = "{URL}"\n', 3),
    (f'[[notify]]\nurl = "https://x.example/a"\nevents = ["{URL}"]\n', 3),
    (f'[[notify]]\nurl = "https://x.example/a"\n"{URL}" = "slack"\n', 3),
    (f'[heartbeat]\nurl = "https://x.example/a"\nmethod = "{URL}"\n', 3),
    (f'[heartbeat]\nurl_env = "{URL}"\n', 2),
    (f'[heartbeat]\n"{URL}" = 1\n', 2),
])
def test_a_url_in_the_wrong_place_is_never_echoed(text, line):
    with pytest.raises(FleetError) as e:
        parse_fleet(text, "fleet.toml")
    assert f"fleet.toml:{line}:" in str(e.value), str(e.value)
    assert "secret-token" not in str(e.value) and "hooks.example" not in str(e.value), str(e.value)
