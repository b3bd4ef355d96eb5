"""`gpudeck demo`: the console on a demo fleet of two simulated GPU nodes on this machine."""

from __future__ import annotations

from gpudeck.console.commands.common import EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("demo", help="open the console on a demo fleet on this machine: nodes b200 (7 simulated "
                                    "B200) and pro6000 (4 simulated RTX PRO 6000), SGLang servers, jobs")
    p.add_argument("--dir", help="where the demo keeps its files (default ~/.cache/gpudeck-demo)")
    p.add_argument("--reset", action="store_true", help="start over: forget what the demo jobs have done")
    p.add_argument("--keep", action="store_true", help="leave the demo's jobs running on exit")
    p.add_argument("--read-only", action="store_true", help="watch only: kill, relaunch and launch are off")
    p.add_argument("--screenshot", metavar="SVG", help="run without a terminal, save an SVG screenshot once "
                                                       "the numbers are in, then exit (for the README)")
    p.set_defaults(run=_demo)


def _demo(args) -> int:
    import asyncio
    from pathlib import Path

    from gpudeck.console.app import make_app
    from gpudeck.console.demo import (build_demo, demo_dir, demo_fleet, demo_jobs, has_router, start_stranger,
                                      stop_demo_jobs, stop_stranger)

    root = Path(args.dir) if args.dir else demo_dir()
    router = has_router()
    fleet = demo_fleet(build_demo(root, reset=args.reset, router=router))
    jobs = demo_jobs(router)
    if not router:
        print("gpudeck demo: sglang-router is not installed: generate talks to the 7 servers itself "
              "(pip install sglang-router to put SGLang's router in front of them)")
    start_stranger(root)
    shot = dict(screenshot=args.screenshot, initial_view="fleet", screenshot_wait_s=(25.0, 90.0)) \
        if args.screenshot else {}  # the fleet view, once the launch notices are gone and the numbers in
    app = make_app(fleet, fleet_name="demo", autostart=jobs, read_only=args.read_only, **shot)
    try:
        if args.screenshot:
            app.run(headless=True, size=(120, 40))
            print(f"gpudeck demo: screenshot saved to {args.screenshot}")
        else:
            app.run()
    finally:
        if not args.keep:
            for line in asyncio.run(stop_demo_jobs(fleet, jobs)):
                print(f"gpudeck demo: {line}")
            stop_stranger(root)
            print(f"gpudeck demo: jobs stopped (--keep leaves them running); `gpudeck demo` again resumes, "
                  f"files in {root}")
    return EXIT_OK
