"""``python -m gpudeck.agents.logcap LOG MAX_BYTES PARENT``: a job's log cap that lives with
the job, so that it holds with no agent alive (no console, no watcher).

The job's wrapper (supervisor.WRAPPER) starts it in the background, in the job's own process
group and cgroup, before the job's command; it stops it when the command ends. It is not in
the data path (the job writes ``job.log`` itself, in append mode), so if it dies the job goes
on, only uncapped until the agent's own check (joblog.Capper) sees it. Every half second it
cuts ``job.log`` past ``MAX_BYTES`` the way joblog.cap does (the newest half to ``job.log.1``),
so the logs take at most about 1.5 times the cap on disk. It exits when its parent, the
wrapper, is gone.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

POLL_S = 0.5


def main(argv: list[str]) -> int:
    try:
        path, limit, parent = Path(argv[0]), int(argv[1]), int(argv[2])
    except (IndexError, ValueError):
        print("usage: python -m gpudeck.agents.logcap LOG MAX_BYTES PARENT_PID", file=sys.stderr)
        return 2
    from .joblog import cap

    while os.getppid() == parent:
        try:
            cap(path, limit)
        except OSError:
            pass  # a full disk: the agent's alert says so; try again at the next poll
        time.sleep(POLL_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
