"""The ``generate`` command (``gpudeck generate``, ``python -m gpudeck.agents.workers.generate``)
and the command line of the fleet's ``generate`` job kind."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Optional

from ...contract.jobs import JobKind, SpecError
from ..common.dirlock import DirectoryBusy
from ..common.doneset import DoneSetError
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


# ---------------------------------------------------------------- the fleet's job kind

def build_argv(spec, python: str) -> list[str]:
    """The command line of a ``kind = "generate"`` job, from its options (JobKind.GENERATE.options;
    ``servers`` already resolved to URLs)."""
    o = spec.options
    missing = [k for k in ("prompts", "out", "servers") if not o.get(k)]
    if missing:
        raise SpecError(f"job {spec.name!r}: kind 'generate' needs {', '.join(repr(k) for k in missing)}")
    servers = o["servers"] if isinstance(o["servers"], list) else [o["servers"]]
    argv = [python, "-m", JobKind.GENERATE.worker_module, "--prompts", str(o["prompts"]), "--out", str(o["out"])]
    for url in servers:
        argv += ["--server", str(url)]
    for key, flag in (("concurrency", "--concurrency"), ("max_tokens", "--max-tokens"), ("model_name", "--model"),
                      ("temperature", "--temperature"), ("top_p", "--top-p"), ("s3", "--s3"),
                      ("s3_endpoint", "--s3-endpoint"), ("give_up_after", "--give-up-after")):
        if o.get(key) is not None:
            argv += [flag, str(o[key])]
    if o.get("thinking") is not None:
        argv.append("--thinking" if o["thinking"] else "--no-thinking")
    if o.get("force"):
        argv.append("--force")
    return argv + list(spec.args)
