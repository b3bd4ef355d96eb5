"""What the commands print and how they end, run as a user would: into a pipe whose reader has
gone (`gpudeck status | head`), with nothing to show, on ctrl-c, and in --help.

The unit tier's tests of this file (starts nothing); the others are in
tests/system/test_cli_output.py."""

from __future__ import annotations

import argparse
from support.cli_output import _parsers


def test_every_argument_and_option_of_every_command_has_a_help_text():
    from gpudeck.console.cli import build_parser

    missing = [f"{path} {'/'.join(a.option_strings) or a.dest}" for path, p in _parsers(build_parser())
               for a in p._actions if not isinstance(a, argparse._SubParsersAction) and not a.help]
    assert missing == []
