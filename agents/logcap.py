"""``python -m gpudeck.agents.logcap LOG MAX_BYTES < PIPE > LOG``: a job's log keeper, the one
writer of its ``job.log``, that lives with the job so the cap holds with no agent alive (no
console, no watcher).

The job's wrapper (supervisor.WRAPPER) points the job's output at a pipe (``job.pipe``) and
starts this in the background, reading the pipe on stdin (its stdout is ``job.log`` too), in the job's own process group and cgroup, before the job's
command. It copies the pipe into ``job.log`` and cuts the log *before* a write would take it
past ``MAX_BYTES`` (joblog.CappedLog: the newest half to ``job.log.1``), so ``job.log`` never
holds more than the cap, however fast the job writes: a job that writes faster than this
copies waits on its pipe. It ends at the pipe's end of file: when the job and all that
inherited its output are gone. It ignores the kill's SIGTERM, so a job that says something
as it stops is heard; the SIGKILL after the grace ends it with the job.

If it is killed anyway, the wrapper starts it again (it holds the pipe open meanwhile, so the
job blocks for that moment rather than dying of SIGPIPE); what it had read and not yet
written, at most one read (``joblog.PIPE_CHUNK``), is lost. A new keeper, like any cutter,
takes the log's lock first and removes a copy a killed one left half-written.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    try:
        path, limit = Path(argv[0]), int(argv[1])
    except (IndexError, ValueError):
        print("usage: python -m gpudeck.agents.logcap LOG MAX_BYTES < PIPE", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # the job's last words come after these
    from .jobs.joblog import CappedLog, drain, size_pipe

    size_pipe(0)
    try:
        out = CappedLog(path, limit)  # waits for the lock: the agent may be writing it
    except FileNotFoundError:
        # the job's directory is gone (its home deleted under it): nothing there to cut or
        # lock; the job must not wait on its pipe, so its output goes on to the log it had
        while data := os.read(0, 1 << 20):
            os.write(1, data)
        return 0
    with out:
        drain(0, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
