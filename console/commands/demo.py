"""`gpudeck demo`: the console on a demo fleet on this machine."""

from __future__ import annotations

from gpudeck.console.commands.common import EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("demo", help="open the console on a demo fleet: a simulated SGLang server and a "
                                    "generation job on this machine")
    p.add_argument("--dir", help="where the demo keeps its files (default ~/.cache/gpudeck-demo)")
    p.add_argument("--reset", action="store_true", help="start over: forget what the demo job has done")
    p.add_argument("--keep", action="store_true", help="leave the demo's jobs running on exit")
    p.add_argument("--read-only", action="store_true", help="watch only: kill, relaunch and launch are off")
    p.add_argument("--screenshot", metavar="SVG", help="run without a terminal, save an SVG screenshot once "
                                                       "the numbers are in, then exit (for the README)")
    p.set_defaults(run=_demo)


def _demo(args) -> int:
    import asyncio
    from pathlib import Path

    from gpudeck.console.app import make_app
    from gpudeck.console.demo import JOBS, build_demo, demo_dir, stop_demo_jobs
    from gpudeck.remote.fleet import load_fleet

    root = Path(args.dir) if args.dir else demo_dir()
    fleet = load_fleet(build_demo(root, reset=args.reset))
    app = make_app(fleet, fleet_name="demo", autostart=JOBS, read_only=args.read_only,
                   screenshot=args.screenshot)
    if args.screenshot:
        app.run(headless=True, size=(120, 32))
        print(f"gpudeck demo: screenshot saved to {args.screenshot}")
    else:
        app.run()
    if not args.keep:
        for line in asyncio.run(stop_demo_jobs(fleet)):
            print(f"gpudeck demo: {line}")
        print(f"gpudeck demo: jobs stopped (--keep leaves them running); `gpudeck demo` again resumes, "
              f"files in {root}")
    return EXIT_OK
