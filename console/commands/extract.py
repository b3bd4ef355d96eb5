"""``gpudeck extract``: the hidden-state extraction worker, run in this process.

The arguments are the worker's own (agents/workers/extract.py), so the command line is the
same as ``python -m gpudeck.agents.workers.extract`` and as a fleet job's. torch and transformers
are imported only when the command runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers


def register(sub: Subparsers) -> None:
    from ...agents.workers.extract import EXIT_AUDIT, EXIT_DISK, EXIT_FAIL, EXIT_STOPPED, add_arguments
    from .common import exit_codes

    p = sub.add_parser("extract", help="extract hidden states of chosen layers into safetensors shards",
                       description="Extract hidden states of chosen layers into safetensors shards.",
                       epilog=exit_codes({EXIT_FAIL: "the extraction failed (the message says where)",
                                          EXIT_DISK: "the output will not fit the disk (--disk-check exit)",
                                          EXIT_AUDIT: "the data audit found the data degenerate",
                                          EXIT_STOPPED: "stopped by SIGTERM (a relaunch resumes)"}))
    add_arguments(p)
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from ...agents.workers.extract import run_from_args
    return run_from_args(args)
