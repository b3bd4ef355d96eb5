"""What the commands print and how they end, run as a user would: into a pipe whose reader has
gone (`gpudeck status | head`), with nothing to show, on ctrl-c, and in --help.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_cli_output.py."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import textwrap
import threading

import pytest

from support import ROOT, env_with_repo, free_port
from support.cli import NOISE, at_a_terminal, gpudeck, gpudeck_cmd, into_closed_pipe
from support.wait import wait_for
from support.watch import TOKEN
from support.cli_output import _parsers


@pytest.fixture
def fleet(tmp_path, home):
    path = tmp_path / "fleet.toml"
    path.write_text(textwrap.dedent(f'''
        [defaults]
        home = "{home}"
        nvml = false
        interval = 0.2

        [[jobs]]
        name = "talker"
        command = ["sh", "-c", "i=0; while [ $i -lt 200 ]; do i=$((i+1)); echo line $i; done"]
    '''))
    return path


@pytest.mark.system
@pytest.mark.usefixtures("reap_jobs")
def test_output_into_a_closed_pipe_ends_quietly_with_141(tmp_path, fleet):
    f = ["-f", str(fleet)]
    gpudeck("launch", *f, "talker")
    wait_for(lambda: gpudeck("events", *f, "--json").stdout.count("\n") >= 2, 60, what="events of the launch")
    wait_for(lambda: "line 200" in gpudeck("logs", *f, "talker", "-n", "5").stdout, 60, what="the job's log")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"num_hidden_layers": 32, "hidden_size": 4096}')
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt": f"Question {i}?"}) + "\n" for i in range(100)))
    commands = [
        ("status", *f), ("status", "--json", *f), ("events", *f), ("events", "--json", *f),
        ("logs", *f, "talker", "-n", "100"), ("logs", *f, "talker", "--follow"),
        ("watch", "status", *f), ("watch", "status", "--json", *f), ("watch", "status", "--follow", *f),
        ("plan", "extract", "--model", str(model), "--data", "x.jsonl", "--out", str(tmp_path / "o"), "--layers",
         "1,7", "--tokens", "1000000", "--samples", "1000", "--tokens-per-s", "5000"),
        ("audit", str(prompts)), ("audit", "--json", str(prompts)),
        ("--help",), ("status", "--help"), ("plan", "extract", "--help"),
    ]
    for args in commands:
        for buffered in (False, True):  # print() straight to the pipe, or from a buffer flushed on the way out
            r = into_closed_pipe(*args, timeout=60, env={"PYTHONUNBUFFERED": "" if buffered else "1"})
            assert r.returncode == 141 and not any(n in r.stderr for n in NOISE), (args, buffered, r.stderr)


@pytest.mark.system
def test_events_with_nothing_to_show_say_so(tmp_path, home):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\nhome = "{home}"\nnvml = false\ninterval = 0.2\n')
    r = gpudeck("events", "-f", str(fleet))
    assert r.stdout == "" and r.stderr.startswith("gpudeck: no events on local since ") and r.stderr.count("\n") == 1
    r = gpudeck("events", "-f", str(fleet), "--since", "all", "--json")
    assert r.stdout == "" and r.stderr == "gpudeck: no events on local ever\n"  # JSON lines: none


@pytest.mark.system
def test_watch_status_follow_prints_each_change_once_and_exits_130_on_ctrl_c(tmp_path, home, receiver):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(textwrap.dedent(f'''
        [defaults]
        home = "{home}"
        nvml = false
        interval = 0.2

        [[nodes]]
        name = "local"

        [[nodes]]
        name = "ghost"
        host = "127.0.0.1"
        port = {free_port()}
        connect_timeout = 1

        [[jobs]]
        name = "idle"
        command = ["sleep", "1"]

        [[notify]]
        url = "{receiver.url}"
        events = ["node_unreachable"]
    '''))
    proc = subprocess.Popen([*gpudeck_cmd(), "watch", "status", "-f", str(fleet), "--follow", "--unreachable-after",
                             "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=env_with_repo(), preexec_fn=at_a_terminal)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        receiver.wait(lambda ms: len(ms) == 1, 60, what="node_unreachable for ghost")
        # the local node's agent starts slower than the ghost's 1 s on a busy machine: both said, then ctrl-c
        wait_for(lambda: any(" local: " in ln for ln in lines), 60, what="the local node's line")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=90)  # a hang detector: a busy machine is slow to close links
        reader.join(10)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "Traceback" not in err, (proc.returncode, err)
    lines = [ln.rstrip("\n") for ln in lines]
    out = "\n".join(lines)
    local = [ln for ln in lines if " local: " in ln]
    ghost = [ln for ln in lines if " ghost: " in ln]
    assert len(local) == 1 and "connected" in local[0], out
    (down,) = [ln for ln in ghost if "unreachable:" in ln]  # the node's change, once, with its reason
    assert down.count("ghost") == 1 and "Connection refused" in down, out
    assert [ln for ln in ghost if ln != down] == [ln for ln in ghost if "node_unreachable sent to json " in ln], out
    assert out.count("Connection refused") == 1, out  # the notice says who was told, not the reason again
    assert TOKEN not in out + err


@pytest.mark.system
def test_every_help_ends_with_the_exit_codes():
    from gpudeck.console.cli import build_parser
    from gpudeck.console.commands.common import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

    for path, p in _parsers(build_parser()):
        text = p.format_help()
        assert "\nexit codes:\n" in text, path
        tail = text[text.index("\nexit codes:\n"):]
        for code in (EXIT_OK, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE):
            assert re.search(rf"\n  {code} +\w", tail), (path, code, tail)
    kill = gpudeck("kill", "--help").stdout
    assert "exit codes:\n  0    done\n  1    the agent refused, or the kill left processes or GPU memory" in kill
    assert "\n  130  interrupted (ctrl-c)\n" in kill and "\n  141  " in kill
    assert "\n  3    some node could not be read: it did not answer, or its agent failed" in gpudeck(
        "status", "--help").stdout


@pytest.mark.system
def test_events_help_says_what_it_shows_not_where_the_code_is():
    text = gpudeck("events", "--help").stdout
    assert "events.jsonl" in text and ".py" not in text and "agents/" not in text, text
