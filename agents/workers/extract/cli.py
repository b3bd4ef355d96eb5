"""The ``extract`` command (``gpudeck extract``, ``python -m gpudeck.agents.workers.extract``);
its flags, like a fleet job's keys and argv, come from the kind's options
(agents/contract/kinds.py). The package docstring says what it does."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional, cast

from .options import EXIT_FAIL, EXIT_USAGE, ExtractOptions


def add_arguments(p: argparse.ArgumentParser) -> None:
    ExtractOptions.add_arguments(p)


def options_from_args(args: argparse.Namespace) -> ExtractOptions:
    return cast(ExtractOptions, ExtractOptions.from_args(args))  # from_args: the class's own


def run_from_args(args: argparse.Namespace) -> int:
    """Run the worker; errors the operator can act on become one line on stderr."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s extract %(levelname)s %(message)s",
                        stream=sys.stderr)
    problem = missing_extras(args) or model_path_problem(args.model)
    if problem:
        print(f"extract: {problem}", file=sys.stderr)
        return EXIT_USAGE
    from ..common.dirlock import DirectoryBusy
    from ..common.fence import Fenced
    from .data import DataError
    from .layout import StoreError
    from .run import run_extraction

    try:
        from .model import ModelError
        return run_extraction(options_from_args(args))
    except Fenced as exc:  # a newer attempt holds the output (the job was moved)
        from ...contract.fencing import EXIT_FENCED
        print(f"extract: {exc}", file=sys.stderr)
        return EXIT_FENCED
    except (DataError, ModelError, StoreError, DirectoryBusy) as exc:
        print(f"extract: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, (DataError, ModelError)) else EXIT_FAIL
    except (RuntimeError, OSError) as exc:
        print(f"extract: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAIL


EXTRA_MODULES = ("torch", "numpy", "transformers", "safetensors")


def missing_extras(args: argparse.Namespace) -> Optional[str]:
    """What the worker needs that this python lacks, with the line that installs it."""
    import importlib.util

    wanted = EXTRA_MODULES + (("zstandard",) if getattr(args, "compress", False) else ())
    def absent(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is None
        except (ImportError, ValueError):
            return True

    missing = [m for m in wanted if absent(m)]
    if not missing:
        return None
    return (f"extraction needs {', '.join(missing)}, not installed for {sys.executable}: "
            f"pip install 'gpudeck[extract]' (torch's CUDA build; for a CPU build first: "
            f"pip install torch --index-url https://download.pytorch.org/whl/cpu)")


def model_path_problem(model: str) -> Optional[str]:
    """--model is a directory in transformers format: say so when it is not there."""
    import os

    path = os.path.expanduser(model)
    if os.path.isdir(path):
        return None if os.path.isfile(os.path.join(path, "config.json")) else \
            f"--model {model}: {os.path.abspath(path)} has no config.json (a transformers model directory)"
    what = "is a file, not a directory" if os.path.exists(path) else "does not exist"
    return f"--model {model}: {os.path.abspath(path)} {what} (expected a transformers model directory)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gpudeck.agents.workers.extract",
                                description="Extract hidden states of chosen layers into safetensors shards.")
    add_arguments(p)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    return run_from_args(build_parser().parse_args(argv))
