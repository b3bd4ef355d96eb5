"""``gpudeck plan generate|extract|compare``: what a run will cost in time, bytes and dollars,
before it starts, and which fleet does it cheaper or sooner (agents/workers/plan)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

from .common import exit_codes, fleet_arg

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers
    from ...remote.fleet_plans import PlanRef


def register(sub: Subparsers) -> None:
    p = sub.add_parser("plan", help="project a generate or extract run (time, bytes, servers, cost) before it starts",
                       description="Plan before you spend: a pilot, then a projection of the whole run and a verdict.")
    kinds = p.add_subparsers(dest="plan_kind", required=True)

    from ...agents.workers.plan import generate_plan  # stdlib-only at import; aiohttp loads in run
    g = kinds.add_parser("generate", conflict_handler="resolve",
                         help="a pilot against the servers, then time, tokens, bytes, servers and cost of the run",
                         description="Run a pilot of the prompts at several concurrency levels through the generate "
                                     "worker (its completions are kept), project the whole run, write OUT/plan.json.",
                         epilog=exit_codes({generate_plan.EXIT_NO_GO: "NO-GO (the verdict says why)"}))
    generate_plan.add_arguments(g)
    g.set_defaults(run=_generate)

    from ...agents.workers.plan import extract_plan  # stdlib-only at import; torch loads in run
    e = kinds.add_parser("extract", help="the output's size against the disk and S3, the time, and what would fit",
                         description="Count the data's tokens after the chat template, project the hidden states' "
                                     "bytes from the model's config, against the free disk; write OUT/plan.json.",
                         epilog=exit_codes({extract_plan.EXIT_FAIL: "the data or the disk cannot be read",
                                            extract_plan.EXIT_NO_FIT: "the output does not fit the disk (the plan "
                                                                      "says what would)"}))
    extract_plan.add_arguments(e)
    e.set_defaults(run=_extract)

    from ...agents.workers.plan import compare  # stdlib only: reads plan.json files
    c = kinds.add_parser("compare", help="plans of one dataset side by side: days, dollars, bytes; the cheaper and "
                                         "the faster fleet",
                         description="Set two or more plans of the same dataset side by side, each as planned or "
                                     "scaled to a node set (servers=N, price=DOLLARS per server-hour): days with "
                                     "their interval, dollars in all, per million output tokens and per useful "
                                     "completion, and bytes; name the cheaper and the faster fleet.",
                         epilog=exit_codes({compare.EXIT_USAGE: "fewer than two plans, plans of different datasets "
                                                                "or kinds, or a plan that cannot be read (the "
                                                                "message says which)"}))
    compare.add_arguments(c)
    fleet_arg(c, help="with no PLAN given: compare this fleet file's [[plans]] (default $GPUDECK_FLEET)")
    c.set_defaults(run=_compare)


def _generate(args: argparse.Namespace) -> int:
    from ...agents.workers.plan.generate_plan import run
    return run(args)


def _extract(args: argparse.Namespace) -> int:
    from ...agents.workers.plan.extract_plan import run
    return run(args)


def _compare(args: argparse.Namespace) -> int:
    import json
    import sys

    from ...agents.workers.plan.compare import EXIT_OK, EXIT_USAGE, run
    from .common import load_fleet

    if args.fleets:
        return run(args)
    fleet = load_fleet(args.fleet)
    got = compare_plans(fleet.plans, fleet.path)
    if got.doc is None:
        print(f"gpudeck plan compare: {got.error}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(got.doc, indent=1) if args.json else got.text)
    return EXIT_OK


@dataclass(frozen=True)
class Comparison:
    """`plan compare` of a fleet file's [[plans]] (the CLI's `-f`, the console's plans screen):
    the comparison and its table, or why there is none."""

    plans: int  # how many the fleet file declares
    doc: Optional[dict[str, Any]] = None  # compare's document (its --json); None: no comparison
    text: str = ""  # the table `gpudeck plan compare` prints
    error: Optional[str] = None  # why there is no comparison, for the operator


def compare_plans(plans: Sequence["PlanRef"], fleet_path: Optional[str]) -> Comparison:
    """The plans side by side, with the arithmetic and the table of `gpudeck plan compare`
    (agents/workers/plan/compare.py); with fewer than two, what to declare."""
    from ...agents.workers.plan.compare import Spec, UsageError, compare, render

    if len(plans) < 2:
        got = {0: "no plan", 1: "one plan"}[len(plans)]
        where = (f"in the fleet file {fleet_path}" if fleet_path else
                 "given, and no fleet file (-f FLEET, $GPUDECK_FLEET)")
        return Comparison(len(plans), error=f"{got} {where}: a comparison needs two or more. Declare each "
                                            f"fleet's plan as a [[plans]] table (path = its plan.json or the "
                                            f"directory of `gpudeck plan generate --out DIR`; name, servers, "
                                            f"price optional), or give them to `gpudeck plan compare PLAN PLAN`")
    try:
        doc = compare([Spec(p.name, p.path, p.servers, p.price) for p in plans])
    except UsageError as exc:
        return Comparison(len(plans), error=str(exc))
    return Comparison(len(plans), doc, render(doc))
