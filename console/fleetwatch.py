"""``gpudeck watch fleet``: a console with no screen that keeps the whole fleet connected
(``FleetClient.watch``) and moves the jobs of a lost node to a spare.

A node is lost once it has been unreachable for ``[alerts] node_lost_s``; each of its jobs with
``on_node_lost = "move"`` then moves to a ``spare = true`` node that is up and holds no job
(console/moving.py: ``lost_node_moves`` chooses, ``move_job`` moves: the old attempt is
fenced, since its node cannot be reached to kill it). It runs wherever it is started (a laptop,
a login node, a small VM): the watchers on the nodes cannot do this, as a lost node's own
watcher is lost with it. One line a move on stdout; ctrl-c ends it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional

from .moving import MoveFailed, lost_node_moves, move_job
from .placements import PlacementStore


class LostNodes:
    """What the watch loop's events say: which nodes are up, and since when each other one is
    down (the first NodeDown of an outage)."""

    def __init__(self) -> None:
        self.up: set[str] = set()
        self.down_since: dict[str, float] = {}

    def __call__(self, node: str, event: Any) -> None:
        from ..remote.client import NodeDown, NodeUp

        if isinstance(event, NodeUp):
            self.up.add(node)
            self.down_since.pop(node, None)
        elif isinstance(event, NodeDown):
            self.up.discard(node)
            self.down_since.setdefault(node, event.since)


async def watch_fleet(client: Any, *, grace_s: float = 10.0, store: Optional[PlacementStore] = None,
                      say: Callable[[str], None] = print, tick_s: float = 1.0,
                      clock: Callable[[], float] = time.time) -> None:
    """Until cancelled: keep ``client``'s nodes connected and move the jobs of lost nodes."""
    from ..agents.contract.errors import OperatorError
    from ..remote.client import AgentError, RequestFailed

    nodes = LostNodes()
    watcher = asyncio.create_task(client.watch(nodes), name="fleet watch")
    told: set[tuple[str, str]] = set()
    try:
        while not watcher.done():
            await asyncio.sleep(tick_s)
            lost_s = client.fleet.alerts.node_lost_s
            for m in lost_node_moves(client.fleet, nodes.down_since, nodes.up, clock(), lost_s):
                say(f"node {m.src} lost ({m.lost_for_s:.0f} s unreachable, node_lost_s {lost_s:g}): moving {m.job} "
                    f"to spare {m.dest}")
                try:
                    report = await move_job(client, m.job, m.dest, grace_s, store)
                except MoveFailed as exc:
                    for line in exc.done:
                        say(line)
                    say(f"move of {m.job} failed: {exc}")
                    continue
                except (AgentError, RequestFailed, OperatorError) as exc:
                    say(f"move of {m.job} failed: {exc}")
                    continue
                for line in report.lines:
                    say(line)
            # a lost node's jobs that stay, said once per outage
            for spec in client.fleet.jobs:
                src = spec.node or "local"
                if src in nodes.down_since and (spec.name, src) not in told and \
                        clock() - nodes.down_since[src] >= lost_s and spec.on_node_lost != "move":
                    told.add((spec.name, src))
                    say(f"node {src} lost: {spec.name} stays (on_node_lost = \"stay\")")
        await watcher  # its error, if it ended
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
