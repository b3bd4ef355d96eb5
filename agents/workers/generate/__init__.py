"""``gpudeck generate``: completions for a JSONL of prompts from one or more
OpenAI-compatible servers (SGLang, vLLM, llama.cpp, an sglang-router), written to numbered
shards, resumable after a kill -9 at any moment.

How it runs (one asyncio loop, aiohttp; measured in bench/generate_client.py):

- ``servers x concurrency`` worker tasks; each takes the next prompt not in the done-set
  (streamed from the file, never loaded whole) and sends it to the server with the fewest
  outstanding requests that has room (``--concurrency`` is per server).
- A failed attempt (timeout, 5xx, an answer that is not a chat completion, a dropped
  connection) is retried with exponential backoff, on any server. A server that fails
  ``min(concurrency, 8)`` times in a row (at least 3) rests (5 s, doubling up to 60 s),
  then gets one probe request; a success brings it back. Connection refusals never count
  against a prompt, so while every server is down the worker waits instead of burning
  through the prompts. A 4xx answer (a prompt the server refuses) is not retried.
- Before the first request the prompts are audited (agents/workers/audit.py through
  common/audit_gate.py, a sample of 20,000 lines, cached in ``OUT/audit.json``); degenerate
  prompts are refused unless ``--force``.
- Records go to ``shard-NNNNNN.jsonl`` (1,000 each) through shards.ShardWriter,
  which keeps the order of writes that makes kill -9 harmless; the done-set is
  ``OUT/done.txt``; ``OUT/resume.json`` remembers how far the file is done so a restart
  over a million done prompts does not parse them again (the done-set stays the authority).
- ``--s3``: closed shards and the done-set go to S3 from a background thread
  (common/s3sync ShardUploader); a start without a local done-set restores it from S3.
- progress.json (``$GPUDECK_PROGRESS_FILE`` when run as a job, else ``OUT/progress.json``)
  every second: done, total, tokens, tokens/s, quality counters.
- ``--part I/N``: only the prompts of part I of N (common/parts.py, extract's rule), into
  ``OUT/part-I-of-N`` and the S3 prefix ``part-I-of-N``; the total is the part's.

Exit status: 0 when every prompt is done (and uploaded), 1 when some failed or uploads are
still pending (a relaunch retries them), 2 for a usage error, 4 when every prompt is done but
fewer than ``--min-useful-pct`` of the records are useful (no ``_SUCCESS``: a ``_QUALITY``
document with the figures; quality.py says what junk is), 143 after SIGTERM.

The modules: options.py (flags, :class:`Options`), cli.py (the command, the fleet's job
kind), generator.py (the run: its workers and ticker), startup.py (what comes before the
first request), finish.py (the run's end and exit status), servers.py (the server pool, one
attempt), prompts.py (the prompt reader), shards.py (the JSONL shard writer), resume.py (the
resume hint), progress.py (the progress document). Importing this package loads the stdlib
only; aiohttp loads in :func:`run`.
"""

from .cli import build_parser, main, run
from .options import EXIT_FAIL, EXIT_OK, EXIT_QUALITY, EXIT_TERM, EXIT_USAGE, Options, add_arguments, options_from_args

__all__ = ["EXIT_FAIL", "EXIT_OK", "EXIT_QUALITY", "EXIT_TERM", "EXIT_USAGE", "Options", "add_arguments", "build_parser", "main", "options_from_args", "run"]
