"""The ``generate`` command (``gpudeck generate``, ``python -m gpudeck.agents.workers.generate``);
its flags, like a fleet job's keys and argv, come from the kind's options
(agents/contract/kinds.py)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Optional

from ..common.dirlock import DirectoryBusy
from ..common.doneset import DoneSetError
from ..common.fence import Fenced
from .options import EXIT_FAIL, EXIT_USAGE, add_arguments, options_from_args
from .servers import UsageError

DESCRIPTION = ("``gpudeck generate``: completions for a JSONL of prompts from one or more\n"
               "OpenAI-compatible servers (SGLang, vLLM, llama.cpp, an sglang-router), written to numbered\n"
               "shards, resumable after a kill -9 at any moment.")


def run(args: argparse.Namespace) -> int:
    """The command: returns the exit status."""
    from .generator import Generator

    logging.basicConfig(level=os.environ.get("GPUDECK_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("botocore").setLevel(logging.WARNING)
    try:
        opts = options_from_args(args)
        gen = Generator(opts)
        gen.prepare()
    except Fenced as exc:  # a newer attempt holds the output (the job was moved): nothing was written
        from ...contract.fencing import EXIT_FENCED
        print(f"gpudeck generate: {exc}", file=sys.stderr)
        return EXIT_FENCED
    except (UsageError, DirectoryBusy) as exc:
        print(f"gpudeck generate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, DoneSetError) as exc:
        print(f"gpudeck generate: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except Exception as exc:  # S3Error and friends: say what, never a traceback
        from ..common.s3sync.remote import S3Error
        if isinstance(exc, S3Error):
            print(f"gpudeck generate: {exc}", file=sys.stderr)
            return EXIT_FAIL
        raise
    return asyncio.run(gen.run())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpudeck generate", description=DESCRIPTION)
    add_arguments(p)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    return run(build_parser().parse_args(argv))
