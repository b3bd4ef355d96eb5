"""``gpudeck generate``: completions for a JSONL of prompts, resumable, with S3 upload."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers


def register(sub: Subparsers) -> None:
    from ...agents.workers.generate import EXIT_FAIL, EXIT_QUALITY, EXIT_TERM, add_arguments  # stdlib-only at import; aiohttp loads in run
    from .common import exit_codes

    p = sub.add_parser("generate", help="generate completions for a JSONL of prompts (resumable, S3)",
                       description="Send every prompt of a JSONL file to OpenAI-compatible servers and write the "
                                   "completions to shards of 1,000 records; a relaunch resumes where it stopped.",
                       epilog=exit_codes({EXIT_FAIL: "no server answered for --give-up-after, or the prompts are "
                                                     "degenerate (without --force)",
                                          EXIT_QUALITY: "every prompt done, but fewer records useful than "
                                                        "--min-useful-pct: no _SUCCESS, a _QUALITY document",
                                          EXIT_TERM: "stopped by SIGTERM (finished prompts are kept; a relaunch "
                                                     "resumes)"}))
    add_arguments(p)
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from ...agents.workers.generate import run
    return run(args)
