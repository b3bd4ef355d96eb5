"""The detached watcher: an agent in its own session, stdio on ``<home>/watch.log``.

`gpudeck watch start` only sets the ``watching`` flag. When the last console of an agent
that watches leaves, that agent (whose stdin and stdout are the console's SSH channel or
pipes) starts ``python -m gpudeck.agents ... --detached`` with :func:`spawn_detached` and ticks
on; the new one takes the node over through the agent lock (agents/node/agent.py AgentLock: a
SIGTERM, upon which the old one exits at once), so the history has no gap and there is never
more than one agent per home. A console that connects later relays to it through
``<home>/agent.sock`` as to any agent.

After a kill -9 (or a reboot) nothing runs until someone connects: the next console, or
`gpudeck watch start`, starts an agent that sees the flag and hands over again when it is
left alone; its jobs are adopted, not relaunched. ``python -m gpudeck.agents --detached`` (from
cron's @reboot, say) does the same without a console.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from .config import WatchConfig

log = logging.getLogger("agents")

LOG_FILE = "watch.log"
LOG_MAX_BYTES = 8 * 2**20


REPLACES_ENV = "GPUDECK_REPLACES_WATCHER"  # the pid of the watcher a new one replaces (new settings)


def spawn_detached(home: Path, argv: list[str], started_by: Optional[str] = None,
                   replaces: Optional[int] = None) -> subprocess.Popen[bytes]:
    """Start the detached watcher for ``home`` with this agent's arguments; ``started_by``
    (``cron``) is what it writes into the timeline if it finds that the watcher before it died;
    ``replaces``: the pid of the detached watcher it takes over from (one told new settings)."""
    from .life import STARTED_BY_ENV

    home = Path(home)
    log_path = home / LOG_FILE
    try:
        if log_path.stat().st_size > LOG_MAX_BYTES:
            os.replace(log_path, log_path.with_name(LOG_FILE + ".1"))
    except FileNotFoundError:
        pass
    from ..contract.watching import agent_args
    args = agent_args(argv)  # its own --home and mode are added below, once
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        return subprocess.Popen([sys.executable, "-m", "gpudeck.agents", *args, "--home", str(home), "--detached"],
                                stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
                                close_fds=True, cwd=str(home),
                                env={**os.environ, **({STARTED_BY_ENV: started_by} if started_by else {}),
                                     **({REPLACES_ENV: str(replaces)} if replaces else {})})
    finally:
        os.close(fd)


def detached_may_start(home: Path, found: Any) -> bool:
    """For ``--detached``, before taking the node over: False when there is nothing to do (the
    node is not watched, or the agent serving it is the detached watcher already).
    ``found``: find_agent's answer, a connection that is closed here."""
    from ..contract import wire

    try:
        if not WatchConfig.load(home).watching:
            log.info("%s is not watched (`gpudeck watch start` sets it): not starting a watcher", home)
            return False
        if found is None:
            return True
        hello = wire.decode(found[2])
        if isinstance(hello, wire.Hello) and hello.detached and os.environ.pop(REPLACES_ENV, None) != str(hello.pid):
            log.info("%s is watched already by the agent with pid %d", home, hello.pid)
            return False
        return True
    finally:
        if found is not None:
            found[0].close()
