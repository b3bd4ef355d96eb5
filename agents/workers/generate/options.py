"""generate's options: the command-line flags and the :class:`Options` they make (stdlib
only, so that the console can build its parser without aiohttp)."""

from __future__ import annotations

import argparse
from typing import cast

from ...contract import exits
from ...contract.kinds import GenerateOptions
from .servers import UsageError, normalize_server

# the codes are the contract's (agents/contract/exits.py)
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_TERM = exits.EXIT_OK, exits.EXIT_FAIL, exits.EXIT_USAGE, exits.EXIT_TERMINATED
# every prompt done, but fewer useful records than --min-useful-pct: no _SUCCESS, a _QUALITY
# document instead; as extract's on a failed audit, EXIT_DATA: no restart policy restarts it
EXIT_QUALITY = exits.EXIT_DATA


# the options are the kind's: agents/contract/kinds.py, the one source of flags and fleet keys
Options = GenerateOptions


def add_arguments(p: argparse.ArgumentParser) -> None:
    GenerateOptions.add_arguments(p)


def options_from_args(args: argparse.Namespace) -> Options:
    """The options of a command line, checked: a UsageError names the flag."""
    # the numbers' ranges are the kind's (option(min=) in agents/contract/kinds.py): argparse refused them
    if args.s3:
        from ..common.s3sync.remote import S3Location
        try:
            S3Location.parse(args.s3)
        except ValueError as exc:
            raise UsageError(f"--s3: {exc}") from None
    servers = list(dict.fromkeys(normalize_server(u) for u in args.servers))
    return cast(GenerateOptions, GenerateOptions.from_args(args, servers=servers))  # from_args: the class's own
