"""What tests/system/test_cli_output.py and tests/unit/test_cli_output.py share (split out of
tests/test_cli_output.py when the suite went into tiers)."""

from __future__ import annotations

import argparse


# ---------------------------------------------------------------- --help


def _parsers(parser: argparse.ArgumentParser, path: str = "gpudeck"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")
