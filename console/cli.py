"""gpudeck's entry point: the argument parser, then the command. The commands live one
module each in console/commands/ (each with ``register(sub)``); what they share (exit codes,
fleet loading, error printing) lives in console/commands/common.py. Heavy imports (textual,
asyncssh, torch, boto3) stay inside the command that needs them, so `gpudeck status` starts
fast."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from typing import Optional

from gpudeck.console.commands.common import run_command

FIRST = ("status", "jobs")  # listed first in --help, in this order; the others follow by name
NOT_COMMANDS = ("common",)


def command_modules() -> list[str]:
    import gpudeck.console.commands

    names = {m.name for m in pkgutil.iter_modules(gpudeck.console.commands.__path__)} - set(NOT_COMMANDS)
    return [n for n in FIRST if n in names] + sorted(names - set(FIRST))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gpudeck", description="A control console for LLM data pipelines on GPU nodes.")
    ap.add_argument("--version", action="version", version=_version())
    sub = ap.add_subparsers(dest="command", required=True)
    for name in command_modules():
        importlib.import_module(f"gpudeck.console.commands.{name}").register(sub)
    return ap


def _version() -> str:
    from gpudeck.agents import __version__
    return f"gpudeck {__version__}"


def main(argv: Optional[list[str]] = None) -> int:
    return run_command(build_parser().parse_args(argv))
