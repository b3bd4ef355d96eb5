"""The systemd path of `watch start --supervise`, on our side: which unit is written and which
systemctl and loginctl calls are made. No user manager can run in this test's container, so
`systemctl` and `loginctl` are stand-ins on PATH that record their calls and answer as a
working systemd would; the cron path runs against the real cron daemon
(tests/system/test_watch_supervised.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpudeck.agents.watch import supervise

pytestmark = pytest.mark.system  # systemctl and loginctl stand-ins run as processes

STANDIN = '''#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
case "$*" in
  *is-active*) echo active ;;
  *show-user*) echo Linger=yes ;;
esac
exit 0
'''


def test_a_systemd_unit_with_restart_always_and_linger_and_its_removal(tmp_path, monkeypatch):
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name in ("systemctl", "loginctl"):
        (bin_dir / name).write_text(STANDIN.format(log=log))
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("GPUDECK_SUPERVISE", "auto")
    home = tmp_path / "home"
    home.mkdir()

    assert supervise.choose("auto") == ("systemd", "")  # the first that works
    said = supervise.install("systemd", home, ["--node", "gpu1", "--interval", "2", "--home", str(home),
                                               "--detached"])
    assert "Restart=always" in said and "linger on" in said
    unit = next((tmp_path / "config" / "systemd" / "user").glob("gpudeck-watch-*.service"))
    text = unit.read_text()
    assert "Restart=always" in text and "WantedBy=default.target" in text
    exec_start = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
    assert exec_start.endswith(f"-m gpudeck.agents --node gpu1 --interval 2 --home {home.resolve()} --detached")
    calls = log.read_text().splitlines()
    assert "systemctl --user daemon-reload" in calls and f"systemctl --user enable {unit.name}" in calls
    assert any(c.startswith("loginctl enable-linger ") for c in calls)

    state = supervise.state("systemd", home)
    assert state.present and state.healthy and unit.name in state.detail

    assert supervise.remove(home) == ["systemd"]
    assert not unit.exists() and f"systemctl --user disable --now {unit.name}" in log.read_text()
    assert not supervise.state("systemd", home).present


def test_without_linger_rights_the_status_says_what_an_admin_must_run(tmp_path, monkeypatch):
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(STANDIN.format(log=log))
    (bin_dir / "loginctl").write_text('#!/bin/sh\necho "Access denied" >&2\nexit 1\n')
    for name in ("systemctl", "loginctl"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    said = supervise.install("systemd", Path(tmp_path), ["--node", "gpu1"])
    assert "an admin must run `sudo loginctl enable-linger" in said
    assert "sudo loginctl enable-linger" in supervise.state("systemd", Path(tmp_path)).detail
