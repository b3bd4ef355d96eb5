"""`gpudeck demo`: the console on a demo fleet of two simulated GPU nodes on this machine.

The demo's jobs end with its console (unless ``--keep``): on ``q``, on ctrl-c, when the
console is told to stop (SIGTERM), and when its terminal closes (SIGHUP). A laptop is left
with nothing running; a real fleet's jobs outlive the console, as they should.

SIGHUP is the odd one: the terminal is gone, and Textual's shutdown writes to it and can hang
(its writer thread dies on EIO while its queue is full). So the console leaves at once, and
a process of its own, in its own session, stops the demo (``python -m gpudeck.console.demo
stop DIR``).
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Callable, Optional

from .common import EXIT_OK, stdout_to_devnull

if TYPE_CHECKING:
    import argparse
    from pathlib import Path
    from types import FrameType

    from .common import Subparsers
    from ..app import GpuDeckApp

# a signal's handler, as signal.signal takes it
SignalHandler = Callable[[int, Optional["FrameType"]], None]


def register(sub: Subparsers) -> None:
    p = sub.add_parser("demo", help="open the console on a demo fleet on this machine: nodes b200 (7 simulated "
                                    "B200) and pro6000 (4 simulated RTX PRO 6000), SGLang servers, jobs",
                       description="Open the console on a demo fleet on this machine. Its jobs stop when the "
                                   "console ends: on q, ctrl-c, SIGTERM or a closed terminal (SIGHUP).")
    from ..demo import demo_dir

    p.add_argument("--dir", help=f"where the demo keeps its files (default {demo_dir()}: a folder of this "
                                 f"checkout's own, $GPUDECK_DEMO_DIR overrides it); its fleet.toml works with the "
                                 f"other commands (gpudeck status -f DIR/fleet.toml)")
    p.add_argument("--reset", action="store_true", help="start over: forget what the demo jobs have done")
    p.add_argument("--keep", action="store_true", help="leave the demo's jobs running on exit")
    p.add_argument("--read-only", action="store_true", help="watch only: kill, relaunch and launch are off")
    p.add_argument("--screenshot", metavar="SVG", help="run without a terminal, save an SVG screenshot once "
                                                       "the numbers are in, then exit (for the README)")
    p.set_defaults(run=_demo)


def _demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..app import make_app
    from ..demo import build_demo, demo_dir, demo_fleet, demo_jobs, has_router, start_stranger, stop_demo

    from ..userconfig import UserConfigError, load_keymap
    from .common import EXIT_USAGE, err

    try:
        keymap = load_keymap()  # before anything starts: a mistake there stops the demo as it stops `up`
    except UserConfigError as exc:
        err(f"demo: {exc}")
        return EXIT_USAGE
    root = Path(args.dir) if args.dir else demo_dir()
    router = has_router()
    fleet = demo_fleet(build_demo(root, reset=args.reset, router=router))
    if not router:
        print("gpudeck demo: sglang-router is not installed: generate talks to the 7 servers itself "
              "(pip install sglang-router to put SGLang's router in front of them)")
    start_stranger(root)
    shot = dict(screenshot=args.screenshot, initial_view="fleet", screenshot_wait_s=(25.0, 90.0)) \
        if args.screenshot else {}  # the fleet view, once the launch notices are gone and the numbers in
    app = make_app(fleet, fleet_name="demo", autostart=demo_jobs(router), read_only=args.read_only, keymap=keymap,
                   freeze_startup=True, **shot)
    stopped_by: list[int] = []
    signal.signal(signal.SIGHUP, _hang_up(root, args.keep))
    signal.signal(signal.SIGTERM, _exit_app(app, stopped_by))
    try:
        if args.screenshot:
            app.run(headless=True, size=(120, 40))
            _say(f"screenshot saved to {args.screenshot}")
        else:
            app.run()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up below finishes
        if not args.keep:
            for line in stop_demo(root):
                _say(line)
            _say(f"jobs stopped (--keep leaves them running); `gpudeck demo` again resumes, files in {root}")
    return 128 + stopped_by[0] if stopped_by else EXIT_OK


def _exit_app(app: GpuDeckApp, stopped_by: list[int]) -> SignalHandler:
    """SIGTERM: end the app from its own event loop (it restores the terminal), then clean up."""
    def handler(signum: int, frame: Optional[FrameType]) -> None:
        import asyncio

        stopped_by.append(signum)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # the app's loop is not running yet (or any more): stop as ctrl-c does
            raise KeyboardInterrupt from None
        loop.call_soon_threadsafe(app.exit)
    return handler


def _hang_up(root: Path, keep: bool) -> SignalHandler:
    """SIGHUP: the terminal is gone. Leave now; a process of its own stops the demo."""
    def handler(signum: int, frame: Optional[FrameType]) -> None:
        import os

        from ..demo import start_stopper

        if not keep:
            start_stopper(root)
        os._exit(128 + signum)  # not through Textual's shutdown, which writes to the closed terminal
    return handler


def _say(line: str) -> None:
    """A line for the operator, if the terminal is still there."""
    try:
        print(f"gpudeck demo: {line}", flush=True)
    except OSError:
        stdout_to_devnull()
