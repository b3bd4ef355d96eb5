"""The built-in ``extract`` worker: hidden states of chosen layers, at GPU speed.

    gpudeck extract --model PATH --data FILE_OR_DIR --out DIR --layers 1,7,14,21,27
        [--max-tokens-per-batch N] [--device cuda|cpu] [--dtype bfloat16] [--s3 URI]

Also ``python -m gpudeck.agents.workers.extract ...``, and the ``extract`` job kind of the fleet file
(agents/contract/kinds.py; one job per GPU, each with ``gpus = [i]`` and, to split one dataset,
``args = ["--part", "i/N"]``).

This package stays light on import (no torch): the agent imports it to build command
lines (cli.py, options.py). The work itself is in run.py (one run, from options to exit
status), pipeline.py (the threads), forward.py (the GPU stage), context.py (what the stages
share), progress.py (the progress document, the disk check), model.py (the forward pass),
data.py (input), store.py (shards, index, resume), layout.py (names, format), codec.py
(``--compress``), reader.py (reading the output back) and perf.py (FLOPs, peak, disk
projection).
"""

from .cli import add_arguments, build_parser, main, run_from_args
from .options import EXIT_AUDIT, EXIT_DISK, EXIT_FAIL, EXIT_OK, EXIT_STOPPED, EXIT_USAGE, ExtractOptions

__all__ = ["EXIT_AUDIT", "EXIT_DISK", "EXIT_FAIL", "EXIT_OK", "EXIT_STOPPED", "EXIT_USAGE", "ExtractOptions", "add_arguments", "build_parser", "main", "run_from_args"]
