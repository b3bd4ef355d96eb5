"""What every headless command shares: the exit codes, loading the fleet, printing an error,
and the one place where a command's errors become exit codes.

No Textual here, and nothing heavy at import: a command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeAlias, Union

from ...agents.contract import exits

if TYPE_CHECKING:
    from ...remote.fleet import Fleet

# what a command's ``register(sub)`` is given: the sub-command parsers of `gpudeck` (or of a
# command's own sub-commands); a string, since argparse's class is generic only to the checker
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
# a command's ``run``: given the parsed arguments, its exit code, or a coroutine that gives it
Handler: TypeAlias = Callable[[argparse.Namespace], Union[int, Coroutine[Any, Any, int]]]

EXIT_OK = 0  # done
EXIT_FAIL = 1  # refused by a node, a kill that left processes or GPU memory behind, a degenerate dataset
EXIT_USAGE = 2  # a mistake on the command line or in the fleet file
EXIT_UNREACHABLE = 3  # `status`: some node could not be read: unreachable, or its agent failed (the report says why)
EXIT_NOT_YOURS = 4  # `adopt`: the process is another user's (or cannot be read)
EXIT_PID_REUSED = 5  # `adopt`: the pid names another process than the one listed (--started-at)
EXIT_OWNED = 6  # `adopt`: a job already owns the process
EXIT_OWNED_ELSEWHERE = 7  # another fleet owns jobs of this file on a node: `status` shows them, a change is refused
EXIT_HOLDS_NODE = 8  # `adopt`, `kill`: the process's kill would take the node down (agents/holds.py); nothing done
EXIT_INTERRUPTED = 130  # ctrl-c
EXIT_BROKEN_PIPE = 141  # the reader of the output left (`| head`): 128 + SIGPIPE, what `cat` and `kubectl` give
EXIT_TERMINATED = exits.EXIT_TERMINATED  # `generate`, `extract`: stopped by SIGTERM (a relaunch resumes)

# what every command's --help says about its exit codes; a command adds or words its own
EXIT_MEANINGS = {
    EXIT_OK: "done",
    EXIT_FAIL: "a node refused or failed the request",
    EXIT_USAGE: "a mistake on the command line or in the fleet file, or a missing extra (the message says which)",
    EXIT_INTERRUPTED: "interrupted (ctrl-c)",
    EXIT_BROKEN_PIPE: "the reader of its output went away (`gpudeck ... | head`); nothing is printed about it",
}


def exit_codes(specific: Optional[dict[int, str]] = None) -> str:
    """The ``--help`` epilog: each exit code and what it means for this command."""
    codes = {**EXIT_MEANINGS, **(specific or {})}
    return "exit codes:\n" + "\n".join(f"  {code:<4} {text}" for code, text in sorted(codes.items()))


class HelpFormatter(argparse.HelpFormatter):
    """argparse's, except that the epilog's list (the exit codes: a heading line ending in a
    colon, then indented items) keeps one item a line, each wrapped under its text."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        out = []
        for line in text.splitlines():
            item = re.match(r"(\s+\S+\s+)(.*)", line)
            if item:
                out.append(textwrap.fill(item.group(2), width, initial_indent=indent + item.group(1),
                                         subsequent_indent=indent + " " * len(item.group(1))))
            elif line.endswith(":"):
                out.append(indent + line)
            else:
                out.append(super()._fill_text(line, width, indent))
        return "\n".join(out)


def stdout_to_devnull() -> None:
    """Point stdout at /dev/null: its reader is gone (a closed pipe, a closed terminal), and
    the interpreter's last flush on the way out must not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def load_fleet(path: Optional[str], take_over: bool = False) -> Fleet:
    """The fleet file given, else $GPUDECK_FLEET, else this machine alone, with the jobs moved
    from this laptop where they were moved (console/placements.py). ``take_over``: jobs of this
    file that another fleet file owns on a node become this one's (``--take-over``)."""
    import dataclasses

    from ...remote.fleet import load_fleet as load, local_fleet

    from ..placements import PlacementStore, apply

    path = path or os.environ.get("GPUDECK_FLEET")
    declared = load(path) if path else local_fleet()
    for warning in declared.warnings:  # odd but allowed: said once, on stderr
        err(f"warning: {warning}")
    store = PlacementStore()  # jobs moved by `gpudeck move` run where they were moved (console/placements.py)
    fleet: Fleet = apply(declared, store.of(declared.path))  # a Fleet again (placements.apply is typed Any)
    if store.warning:
        err(f"warning: {store.warning}")
    return dataclasses.replace(fleet, take_over=True) if take_over else fleet


OWNED_ELSEWHERE_EXIT = {EXIT_OWNED_ELSEWHERE: "a job of this fleet file belongs to another fleet on its node (one "
                                              "home, two fleet files): refused, naming it; --take-over takes it"}


def take_over_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--take-over", action="store_true",
                   help="jobs of this fleet file that another fleet owns on a node (one home shared by two fleet "
                        "files) become this file's, each said with its former owner; without it the change is "
                        "refused (exit 7), naming the other")


def err(msg: str) -> None:
    print(f"gpudeck: {msg}", file=sys.stderr)


def fleet_arg(p: argparse.ArgumentParser, help: str = "fleet file (TOML); default $GPUDECK_FLEET, else this "
                                                     "machine alone") -> None:
    p.add_argument("-f", "--fleet", help=help)


def run_command(args: argparse.Namespace) -> int:
    """Run the command ``args.run`` (a plain function or a coroutine function returning an
    exit code); a fleet-file or node error is printed and becomes its exit code."""
    from ...agents.contract.errors import HOLDS_NODE, OperatorError
    from ...remote.client import AgentError, RequestFailed

    try:
        run: Handler = args.run
        rv = run(args)
        return asyncio.run(rv) if isinstance(rv, Coroutine) else rv
    except RequestFailed as exc:
        from ...agents.contract.ownership import OWNED_ELSEWHERE

        err(f"{exc.node}: {exc}")
        if exc.refusal == HOLDS_NODE:
            return EXIT_HOLDS_NODE
        if exc.refusal == OWNED_ELSEWHERE:
            return EXIT_OWNED_ELSEWHERE
        return EXIT_USAGE if exc.usage else EXIT_FAIL
    except AgentError as exc:  # a node that cannot be reached or used
        err(str(exc))
        return EXIT_FAIL
    except OperatorError as exc:  # a fleet file's mistake, a job or node it lacks, a bad argument
        err(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except ModuleNotFoundError as exc:  # an extra that is not installed: the line that installs it
        from ...agents.contract.needs import EXTRAS
        extra = EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        err(f"{exc.name} is not installed for {sys.executable}: pip install 'gpudeck[{extra}]'")
        return EXIT_USAGE


