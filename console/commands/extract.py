"""``gpudeck extract``: the hidden-state extraction worker, run in this process.

The arguments are the worker's own (agents/workers/extract.py), so the command line is the
same as ``python -m gpudeck.agents.workers.extract`` and as a fleet job's. torch and transformers
are imported only when the command runs."""

from __future__ import annotations


def register(sub) -> None:
    from gpudeck.agents.workers.extract import add_arguments

    p = sub.add_parser("extract", help="extract hidden states of chosen layers into safetensors shards",
                       description="Extract hidden states of chosen layers into safetensors shards.")
    add_arguments(p)
    p.set_defaults(run=_run)


def _run(args) -> int:
    from gpudeck.agents.workers.extract import run_from_args
    return run_from_args(args)
