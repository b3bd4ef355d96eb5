"""ConsoleConfig: what a console session is told at start (the CLI, the demo and the tests)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..remote.fleet import Fleet


@dataclass(frozen=True)
class ConsoleConfig:
    """What a console session is told at start."""

    fleet: Fleet
    """The nodes and jobs to show."""

    fleet_name: Optional[str] = None
    """The name in the header; default the fleet file's name, or "this machine"."""

    read_only: bool = False
    """Kill, relaunch and launch are off: for watching a fleet someone else drives."""

    connect: bool = True
    """Connect to the nodes. Off: the app only renders what it is handed (snapshot tests,
    the benchmark); nothing is asked of any node, not even a log."""

    clock: Callable[[], float] = time.time
    """Where "now" comes from: pinned by snapshot tests."""

    autostart: tuple[str, ...] = ()
    """Jobs to launch once their node answers, if they are not running (the demo)."""

    grace_s: float = 10.0
    """Seconds between SIGTERM and SIGKILL on kill and relaunch."""

    auto_move: bool = True
    """Move the jobs of a lost node with ``on_node_lost = "move"`` to a spare, as ``gpudeck watch
    fleet`` does (console/automove.py). Never in read-only mode, nor when not connected."""

    move_check_s: float = 1.0
    """Seconds between two looks for lost nodes (each armed after the last returned)."""

    refresh_s: float = 0.05
    """Snapshots arriving within this window are drawn together: the least time between two
    redraws (a key press is drawn at once)."""

    redraw_share: float = 0.05
    """Redraws take at most this part of the wall time: they come at most every ``cost /
    redraw_share`` seconds, ``cost`` the moving average of a redraw's CPU time (pacing.py)."""

    refresh_most_s: float = 1.0
    """However dear a redraw, the screen shows what arrived within this long."""

    fleet_poll_s: float = 0.25
    """Seconds between two looks at the fleet file's mtime; a change is applied once the file
    parsed and stayed unchanged 1 s (console/reload.py). 0: the file is never looked at again."""

    tick_s: float = 1.0
    """Redraw at least this often (clocks, "unreachable for ..."); 0: only on snapshots."""

    log_lines: int = 200
    """Lines of a log's tail shown first."""

    log_poll_s: float = 1.0
    """Seconds between two reads of a followed log (each armed after the last returned)."""

    spark_bucket_s: float = 15.0
    """Seconds of tokens/s in one sparkline cell."""

    initial_view: str = "overview"
    """overview, fleet, jobs, logs, alerts or events."""

    bell: bool = True
    """Ring the terminal's bell for each live event that is notified (died, gave up, ...)."""

    freeze_startup: bool = False
    """Once the first screen is drawn, move what start-up made (modules, widgets, the fleet) out
    of the garbage collector's sight (gc.freeze): a full collection then walks only what the
    updates make, a fifth of an update's time at 64 nodes (bench/console_scale.py). `up` and
    `demo` do; a test process, which starts many apps, does not (what it froze would never be
    collected)."""

    events_poll_s: float = 1.0
    """Seconds between two reads of a node's new events (each armed after the last returned)."""

    events_kept: int = 2000
    """The newest events of the fleet the console keeps and the events view lists."""

    looked_file: Optional[str] = None
    """Where the last look at each fleet is kept; default
    ``$XDG_STATE_HOME/gpudeck/last-looked.json`` (``~/.local/state/gpudeck/``)."""

    summary_wait_s: float = 15.0
    """The opening "since you last looked" waits this long at most for every node's events."""

    nodes: tuple[str, ...] = field(default=())
    """Nodes to show as connecting before they answer; default those the client will use."""

    screenshot: Optional[str] = None
    """Save an SVG screenshot here once tokens/s and an ETA are on screen, then exit."""

    screenshot_wait_s: tuple[float, float] = (12.0, 90.0)
    """At least this long (the sparklines fill), at most this long (whatever is there)."""

    keymap: dict[str, str] = field(default_factory=dict)
    """Keys moved by binding id ("job.kill": "k"), from the user's ``[keys]`` table
    (console/userconfig.py); applied with Textual's ``App.set_keymap``."""
