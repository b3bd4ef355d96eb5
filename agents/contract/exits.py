"""The exit codes a job's program ends with that mean something to gpudeck: the built-in
workers' (generate, extract), the stage step's before a job's command, and what the node, its
watcher and the console read in them. One table: each program and reader imports its code
from here.

A ``command`` job's code means whatever its program says: only a built-in worker's
:data:`EXIT_DATA` and :data:`EXIT_FENCED` are final (no restart policy restarts them)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAIL = 1  # it failed; the log says why
EXIT_USAGE = 2  # a mistake in its options
EXIT_DISK = 3  # extract: the output will not fit the disk (--disk-check exit)
EXIT_STAGE_FAILED = 3  # the stage step (agents/staging/run.py): a copy failed; the job's command never ran
# a built-in worker's verdict on its data, which a new attempt would only repeat: extract's audit
# found its input degenerate, or generate ended with its records mostly junk (min_useful_pct)
EXIT_DATA = 4
EXIT_FENCED = 5  # a worker that found a newer attempt and stopped (agents/contract/fencing.py)
EXIT_TERMINATED = 143  # 128 + SIGTERM: stopped by a signal (a relaunch resumes)
