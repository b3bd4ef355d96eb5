"""``gpudeck generate``: completions for a JSONL of prompts, resumable, with S3 upload."""

from __future__ import annotations


def register(sub) -> None:
    from gpudeck.agents.workers.generate import add_arguments  # stdlib-only at import; aiohttp loads in run

    p = sub.add_parser("generate", help="generate completions for a JSONL of prompts (resumable, S3)",
                       description="Send every prompt of a JSONL file to OpenAI-compatible servers and write the "
                                   "completions to shards of 1,000 records; a relaunch resumes where it stopped.")
    add_arguments(p)
    p.set_defaults(run=_run)


def _run(args) -> int:
    from gpudeck.agents.workers.generate import run
    return run(args)
