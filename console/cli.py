"""gpudeck's entry point: the argument parser, then the command. The commands live one
module each in console/commands/ (each with ``register(sub)``); what they share (exit codes,
fleet loading, error printing) lives in console/commands/common.py. Heavy imports (textual,
asyncssh, torch, boto3) stay inside the command that needs them, so `gpudeck status` starts
fast.

Output into a pipe whose reader leaves early (`gpudeck status --json | head`) ends the
command quietly with 141, as `cat` and `kubectl` do (128 + SIGPIPE): no traceback, and
nothing more is written."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from typing import TYPE_CHECKING, Iterator, Optional

from .commands.common import (EXIT_BROKEN_PIPE, EXIT_UNREACHABLE, HelpFormatter, exit_codes,
                                             run_command, stdout_to_devnull)

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

FIRST = ("status", "jobs")  # listed first in --help, in this order; the others follow by name
NOT_COMMANDS = ("common",)


def command_modules() -> list[str]:
    from . import commands

    names = {m.name for m in pkgutil.iter_modules(commands.__path__)} - set(NOT_COMMANDS)
    return [n for n in FIRST if n in names] + sorted(names - set(FIRST))


class ArgumentParser(argparse.ArgumentParser):
    """argparse's, except that --help into a closed pipe ends as any other output does (141);
    argparse's own would drop the error, or leave it to the interpreter's last flush. The
    sub-commands' parsers are of this class too (add_subparsers makes its own type)."""

    def _print_message(self, message: str, file: Optional[SupportsWrite[str]] = None) -> None:
        if not message:
            return
        out = file or sys.stderr
        try:
            out.write(message)
            if hasattr(out, "flush"):  # argparse passes sys.stdout or sys.stderr; any writer will do
                out.flush()
        except BrokenPipeError:
            raise
        except (AttributeError, OSError):  # no stream at all (pythonw): as argparse does
            pass


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="gpudeck", description="A control console for LLM data pipelines on GPU nodes.",
                        epilog=exit_codes({EXIT_UNREACHABLE: "`status`: some node did not answer, or its agent failed"}))
    ap.add_argument("--version", action="version", version=_version())
    sub = ap.add_subparsers(dest="command", required=True)
    for name in command_modules():
        importlib.import_module(f".commands.{name}", __package__).register(sub)
    for parser in parsers(ap):  # every command's --help ends with its exit codes
        parser.formatter_class = HelpFormatter
        if parser.epilog is None:
            parser.epilog = exit_codes()
    return ap


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every sub-command's parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases share one parser
                yield from parsers(child)


def _version() -> str:
    from ..agents.contract import VERSION as __version__
    return f"gpudeck {__version__}"


def main(argv: Optional[list[str]] = None) -> int:
    try:
        try:
            return run_command(build_parser().parse_args(argv))
        finally:
            sys.stdout.flush()  # here, where a closed pipe can be caught, not in the interpreter's exit
    except BrokenPipeError:
        if not _stdout_gone():
            raise  # some other pipe (not ours to hide)
        stdout_to_devnull()
        return EXIT_BROKEN_PIPE


def _stdout_gone() -> bool:
    """Whether stdout is a pipe that nobody reads any more."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return True  # no poll here, or no descriptor to ask: it was the output, as it nearly always is
