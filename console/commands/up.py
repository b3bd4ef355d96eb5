"""`gpudeck up`: the console on a fleet."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .common import EXIT_OK, OWNED_ELSEWHERE_EXIT, EXIT_USAGE, err, exit_codes, fleet_arg, load_fleet, take_over_arg

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser("up", help="open the console (TUI) on a fleet", epilog=exit_codes(OWNED_ELSEWHERE_EXIT))
    fleet_arg(p)
    take_over_arg(p)
    p.add_argument("--read-only", action="store_true", help="watch only: kill, relaunch and launch are off")
    p.add_argument("--view", choices=("overview", "fleet", "jobs", "logs", "alerts", "events"), default="overview",
                   help="the view shown first (default: the overview of GPUs, jobs and alerts)")
    p.add_argument("--no-bell", action="store_true", help="no terminal bell for live events (died, gave up, ...)")
    p.add_argument("--no-auto-move", action="store_true",
                   help="leave the jobs of a lost node where they are (on_node_lost = \"move\" is then for "
                        "`gpudeck watch fleet` alone); --read-only implies it")
    p.set_defaults(run=_up)


def _up(args: argparse.Namespace) -> int:
    from ..app import make_app

    if args.read_only and args.take_over:  # a look takes nothing (docs/nodes.md#who-owns-a-nodes-jobs)
        err("up: --take-over is for a console that changes something; --read-only takes nothing")
        return EXIT_USAGE
    from ..userconfig import UserConfigError, load_keymap

    try:
        keymap = load_keymap()  # [keys]: the keys moved by binding id (docs/console.md#keys)
    except UserConfigError as exc:
        err(f"up: {exc}")
        return EXIT_USAGE
    fleet = load_fleet(args.fleet, getattr(args, "take_over", False))
    app = make_app(fleet, read_only=args.read_only, initial_view=args.view, bell=not args.no_bell,
                   auto_move=not args.no_auto_move, keymap=keymap, freeze_startup=True)
    app.run()
    return app.return_code or EXIT_OK  # ctrl+c: 130
