"""ctrl-c in the console, in a real terminal (tmux): at its first frame, and once it is drawn
(the app's ctrl+c key). Both end quietly with 130, the exit code of an interrupted command
(docs/commands.md)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from support.cli import gpudeck_cmd
from support.core import env_with_repo, reap
from support.tmux import Tmux

pytestmark = [pytest.mark.system, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


@pytest.fixture
def tmux(home):
    t = Tmux(f"gpudeck-ctrl-c-{os.getpid()}")
    yield t
    subprocess.run(["tmux", "-L", t.socket, "kill-server"], capture_output=True)
    reap(home)


def _start(tmux: Tmux, tmp_path, home) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{home}"\nnvml = false\n')
    env = " ".join(f"{k}={v!r}" for k, v in env_with_repo().items() if k in ("PYTHONPATH", "PATH"))
    cmd = " ".join(gpudeck_cmd())
    # the exit code and any traceback stay on the pane after the console has left the screen
    tmux("new-session", "-d", "-s", "demo", "-x", "120", "-y", "40",
         f"env {env} {cmd} up -f {fleet}; echo EXIT=$?; sleep 600")


@pytest.mark.parametrize("when", ["first_frame", "once_drawn"])
def test_ctrl_c_ends_the_console_quietly_with_130(tmp_path, home, tmux, when):
    _start(tmux, tmp_path, home)
    if when == "first_frame":  # the app's first second: its first frame, the node not yet answered
        tmux.wait(lambda s: "gpudeck" in s, "the console's first frame")
    else:
        tmux.wait(lambda s: "Overview" in s and "local" in s, "the console drawn")
    tmux.keys("C-c")
    screen = tmux.wait(lambda s: "EXIT=" in s and s, "the console gone", timeout=60)
    assert "EXIT=130" in screen, screen
    assert "Traceback" not in screen and "Error" not in screen, screen
