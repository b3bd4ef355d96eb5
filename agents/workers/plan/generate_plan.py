"""``gpudeck plan generate``: a pilot of the generation run, then what the whole run will
take (time, tokens, bytes, servers, dollars) and whether to start it.

It takes the options of ``gpudeck generate`` (the same prompts, servers, max_tokens, ...),
with ``--concurrency`` a list of levels to try. It runs the audit, samples ``--pilot``
prompts (seeded, stratified by length, none already done), sends them at each level in
turn through the generate worker itself (pilot.py: the completions are written to the
output's shards and done-set, so the real run does not make them again), counts each
level's rate in its steady state (stats.steady_windows; the latency model of stats.py for a
level never held full, and for the drain at the end), and projects the rest of the run at
the best level.

With ``--tokens-per-s`` there is no pilot and no server: assumed.py projects from published
numbers, the plan marked assumed.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from typing import Any, Optional

from ..common.dirlock import DirectoryBusy
from ...contract.documents import PLAN_FILE, write_plan
from ..common.doneset import DoneSetError
from .dataset import fingerprint_or_why
from .numbers import number
from ..generate.options import add_arguments as add_generate_arguments
from ..generate.options import options_from_args
from ..generate.servers import UsageError as GenerateUsageError
from . import stats
from .render import render_generate
from .units import UsageError, parse_deadline, parse_levels

log = logging.getLogger("gpudeck.plan")

EXIT_GO, EXIT_NO_GO, EXIT_USAGE = 0, 1, 2

BEST_WITHIN = 0.03  # the lowest level within 3% of the fastest is the best: as fast, less memory
MAX_FAILED = 0.05  # no-go thresholds, shares of the pilot
MAX_EMPTY = 0.05
MAX_CUT = 0.10
MIN_TIME_AT_LEVEL = 0.02  # a level the pilot spent less of its time near is not measured
HOLD_S = 20.0  # each level held full at least this long: a fast server counted over a window as long as a slow one
RESERVE = 9  # prompts a pilot may add to hold its levels: this many times --pilot, and half of the others at most
CAUTION_HALF_WIDTH = 0.05  # a wider 90% interval (a share of the projection) is said, with the pilot to narrow it


def add_arguments(p: argparse.ArgumentParser) -> None:
    """generate's options, with --concurrency a list; needs conflict_handler="resolve"."""
    add_generate_arguments(p)
    p.add_argument("--concurrency", default="1,32,64,128",
                   help="levels of requests in flight per server to try (default 1,32,64,128)")
    p.add_argument("--pilot", type=int, default=200, help="prompts in the pilot (default 200)")
    p.add_argument("--hold", type=number(0), default=HOLD_S,
                   help=f"seconds each level is held full at least, with up to {RESERVE}x --pilot more prompts "
                        f"and half of the rest at most (default {HOLD_S:g}; 0: --pilot prompts and no more)")
    p.add_argument("--seed", type=int, default=0, help="seed of the pilot's sample (default 0)")
    p.add_argument("--deadline", help="when the run must be done: a duration (5d, 36h) or an ISO time")
    p.add_argument("--price-per-hour", type=number(0), help="dollars per server-hour")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (the same as OUT/plan.json)")
    # no server, with --tokens-per-s (assumed.py): --server is then not needed
    p.add_argument("--server", dest="servers", action="append", default=None, metavar="URL",
                   help="an OpenAI-compatible server for the pilot (repeat for several); not needed with "
                        "--tokens-per-s")
    from .assumed import add_arguments as add_assumed_arguments
    add_assumed_arguments(p)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=os.environ.get("GPUDECK_LOG_LEVEL", "WARNING" if args.json else "INFO"),
                        stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.tokens_per_s is not None:  # hardware not rented yet: no pilot, no server
        from .assumed import run as run_assumed
        return run_assumed(args)
    try:
        if not args.servers:
            raise UsageError("--server is needed for a pilot; without a server, plan from published numbers with "
                             "--tokens-per-s R --server-count S --output-tokens L")
        for flag, v in (("--server-count", args.server_count), ("--output-tokens", args.output_tokens),
                        ("--lengths-from", args.lengths_from), ("--subset", args.subset),
                        ("--speed-factor", args.speed_factor)):
            if v is not None:
                raise UsageError(f"{flag} goes with --tokens-per-s (a plan with no server); a pilot measures it")
        levels = parse_levels(args.concurrency)
        deadline_s = parse_deadline(args.deadline) if args.deadline else None
        if args.pilot < 1:
            raise UsageError("--pilot must be at least 1")
        if args.price_per_hour is not None and args.price_per_hour < 0:
            raise UsageError("--price-per-hour must not be negative")
        opts = options_from_args(argparse.Namespace(**{**vars(args), "concurrency": max(levels)}))
        from .pilot import PilotGenerator
        gen = PilotGenerator(opts, levels)
        gen.prepare()
    except (UsageError, GenerateUsageError, DirectoryBusy) as exc:
        print(f"gpudeck plan generate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, DoneSetError) as exc:
        print(f"gpudeck plan generate: {exc}", file=sys.stderr)
        return EXIT_NO_GO
    return _pilot_and_plan(args, gen, levels, deadline_s)


def _pilot_and_plan(args, gen, levels: list[int], deadline_s: Optional[float]) -> int:
    import asyncio

    t0 = time.monotonic()
    try:
        total = choose_prompts(gen, args.pilot, levels, args.hold, args.seed)
    except OSError as exc:
        gen._lock.release()
        print(f"gpudeck plan generate: {exc}", file=sys.stderr)
        return EXIT_NO_GO
    sampling_s = time.monotonic() - t0
    asyncio.run(gen.run())
    if gen.result.status != 0:
        print("gpudeck plan generate: stopped during the pilot; its finished completions are kept",
              file=sys.stderr)
        return gen.result.status
    plan = build_plan(gen.result, levels, n_servers=len(gen.o.servers), total=total, done=len(gen.done),
                      max_tokens=gen.o.max_tokens, deadline_s=deadline_s, price=args.price_per_hour,
                      seed=args.seed, startup_s=startup_s(gen.result, sampling_s))
    plan.update(out=gen.out, prompts_file=os.path.abspath(gen.o.prompts), pilot_s=round(time.monotonic() - t0, 1),
                dataset=fingerprint_or_why(gen.o.prompts, gen.o.part), written_at=time.time())
    try:
        write_plan(os.path.join(gen.out, PLAN_FILE), plan)
    except OSError as exc:
        log.error("cannot write %s: %s", os.path.join(gen.out, PLAN_FILE), exc.strerror or exc)
    print(json.dumps(plan, indent=1) if args.json else render_generate(plan))
    return EXIT_GO if plan["verdict"] == "go" else EXIT_NO_GO


def startup_s(result, sampling_s: float) -> float:
    """What a worker's start costs before its first request: this process's own time from its
    start to its first request (the interpreter, the imports, the done-set and the shards
    opened, the servers asked for their model), less the pilot's sampling, which a run does not
    do. 0 when no request went out."""
    import psutil

    if result.first_request_at is None:
        return 0.0
    return max(0.0, result.first_request_at - psutil.Process().create_time() - sampling_s)


def choose_prompts(gen, n: int, levels: list[int], hold_s: float, seed: int = 0) -> int:
    """Sample the pilot's ``n`` prompts, and with ``hold_s`` a reserve of more (another seed,
    none of the first): RESERVE x ``n``, and never more than half of the prompts not done
    otherwise, so that a run is left to project; give them to the pilot ``gen`` (prepared).
    Returns the prompts in the file (or its part). OSError when the file cannot be read."""
    from .sample import sample_prompts, scan_lines, split_levels

    scan = scan_lines(gen.o.prompts)  # read once for both samples: a prompt file can be many GB
    prompts, bad, total = sample_prompts(gen.o.prompts, n, gen._is_taken, seed=seed, scan=scan)
    for b in bad[:5]:
        log.warning("%s; not in the pilot", b)
    if gen.o.part is not None:  # the lines of the part alone (the sample is of the part too: gen._is_taken)
        total = gen.total_estimate
    reserve: list = []
    room = min(RESERVE * n, (total - len(gen.done) - len(prompts)) // 2)
    if hold_s > 0 and room > 0:
        ids = {p.id for p in prompts}
        reserve, _, _ = sample_prompts(gen.o.prompts, room, lambda pid: gen._is_taken(pid) or pid in ids,
                                       seed=seed + 1, scan=scan)
    chunks = split_levels(len(prompts), levels)
    gen.set_prompts(prompts, chunks, reserve, hold_s)
    log.info("pilot: %d prompts of %d, levels %s per server (%s prompts each; each held full %gs, up to %d more)",
             len(prompts), total, ",".join(map(str, levels)), ",".join(map(str, chunks)), hold_s, len(reserve))
    return total


def _level_rows(result, levels: list[int], n_servers: int, tokens: list[int], fit, timeline,
                windows: list) -> list[dict]:
    """A row per level: its rate counted in its steady state (stats.steady_windows) where the
    pilot held it full, else the model's where the pilot spent time near it, else none."""
    mean_n = stats.mean(tokens) or 0.0
    seconds = stats.support(timeline, levels)
    total_s = sum(seconds) or 1.0
    rows = []
    for j, c in enumerate(levels):
        comps = [x for x in result.completions if x.level == j]
        lats = [x.latency_s for x in comps]
        w = windows[j]
        row: dict[str, Any] = {"concurrency": c, "completions": len(comps),
                               "in_flight_per_server": round(stats.known(stats.mean([x.k for x in comps]), "in flight"), 1)
                               if comps else None,
                               "seconds_at_level": round(seconds[j], 2), "completions_per_s": None,
                               "output_tokens_per_s": None, "tokens_per_s_per_request": None,
                               "measured": None, "steady_s": round(w.seconds, 2) if w else None,
                               "steady_completions": len(w.obs) if w else None,
                               "latency_p50_s": _r(stats.percentile(lats, 50)),
                               "latency_p95_s": _r(stats.percentile(lats, 95))}
        cps = None
        if w is not None:
            cps = stats.project_steady(fit, w, tokens, c, n_servers, 0, boots=0).completions_per_s
            row["measured"] = "steady state"
        elif fit is not None and seconds[j] >= MIN_TIME_AT_LEVEL * total_s:
            cps = c * n_servers / fit.mean_latency(mean_n, c)
            row["measured"] = "model"
        if cps is not None:
            row.update(completions_per_s=round(cps, 3), output_tokens_per_s=round(cps * mean_n, 1))
        if fit is not None and row["measured"]:
            row["tokens_per_s_per_request"] = round(fit.rate(c), 1)
        rows.append(row)
    return rows


def _obs(result) -> list:
    return [stats.Obs(x.start, x.end, x.tokens) for x in result.completions]


def _lengths(result, max_tokens: int) -> dict:
    comps = result.completions
    tokens = [x.tokens for x in comps]
    with_r = [x for x in comps if x.reasoning_tokens is not None]
    n = len(comps)
    return {"mean": _r(stats.mean(tokens), 1), "p50": _r(stats.percentile(tokens, 50), 1),
            "p95": _r(stats.percentile(tokens, 95), 1), "max_tokens": max_tokens,
            # the 101 percentiles: what `plan generate --lengths-from` caps with another max_tokens
            "quantiles": [_r(stats.percentile(tokens, p), 1) for p in range(101)] if tokens else None,
            "cut_share": _r(sum(x.cut for x in comps) / n) if n else None,
            "empty_share": _r(sum(x.empty for x in comps) / n) if n else None,
            "reasoning_share": _r(sum(x.reasoning_tokens for x in with_r) / max(1, sum(x.tokens for x in with_r)))
            if with_r else None}


def useful_share(result) -> Optional[float]:
    """The share of the pilot's prompts whose completion is useful: neither cut at max_tokens,
    nor empty, nor failed (what the console counts as ``useful``)."""
    tried = len(result.completions) + result.failed
    return _r(sum(not x.cut and not x.empty for x in result.completions) / tried, 4) if tried else None


def build_plan(result, levels: list[int], *, n_servers: int, total: int, done: int, max_tokens: int,
               deadline_s: Optional[float] = None, price: Optional[float] = None, seed: int = 0,
               startup_s: float = 0.0) -> dict:
    """The plan document from a pilot's result (pure: no I/O). ``startup_s``: a worker's own
    start, before its first request (:func:`startup_s`)."""
    tokens = [x.tokens for x in result.completions]
    timeline = stats.Timeline(result.timeline)
    obs = _obs(result)
    fit = stats.fit(obs, timeline, levels) if tokens else None
    windows = stats.steady_windows(timeline, levels, obs)
    rows = _level_rows(result, levels, n_servers, tokens, fit, timeline, windows)
    measured = [r for r in rows if r["completions_per_s"]]
    best = None
    if measured:
        top = max(r["completions_per_s"] for r in measured)
        best = next(r for r in measured if r["completions_per_s"] >= (1 - BEST_WITHIN) * top)
    remaining = max(0, total - done)
    plan: dict[str, Any] = {
        "kind": "generate", "prompts": total, "done": done, "remaining": remaining, "servers": n_servers,
        "pilot_done": len(result.completions), "pilot_failed": result.failed, "levels": rows,
        "output_length": _lengths(result, max_tokens), "useful_share": useful_share(result),
        "best_concurrency": best["concurrency"] if best else None,
        "completions_per_s": best["completions_per_s"] if best else None,
        "output_tokens_per_s": best["output_tokens_per_s"] if best else None,
        "projected_wall_s": None, "projected_wall_s_low": None, "projected_wall_s_high": None,
        "projected_tail_s": None, "projected_start_s": None, "tail_measured": None,
        "projected_output_tokens": round(total * stats.known(stats.mean(tokens), "lengths")) if tokens else None,
        "projected_bytes": round(total * stats.known(stats.mean([x.bytes for x in result.completions]), "sizes"))
        if tokens else None,
        "deadline_s": deadline_s, "servers_needed": None, "price_per_hour": price, "projected_cost": None,
        "seconds_per_request": round(fit.a, 4) if fit else None,
    }
    if best is not None and remaining > 0:  # a pilot that took every prompt leaves nothing to project
        j = levels.index(best["concurrency"])
        win = windows[j]  # there for a level measured in its steady state; a fit for one by the model
        c = best["concurrency"]
        if best["measured"] == "steady state" and win is not None:
            start = startup_s + stats.admission_s(timeline, win, obs, c)
            proj = stats.project_steady(fit, win, tokens, c, n_servers, remaining, seed=seed, start_s=start,
                                        drained=stats.measured_tail(timeline, win, obs, tokens, c))
        else:
            assert fit is not None, "a level measured by the model has its fit"
            proj = stats.project(fit, obs, timeline, tokens, c, n_servers, remaining, seed=seed, start_s=startup_s)
        _project(plan, proj, c, n_servers, remaining, deadline_s, price)
    plan["cautions"] = cautions(plan, best)
    plan["verdict"], plan["reasons"] = verdict(plan)
    plan["pilot_record"] = pilot_record(result)
    return plan


def pilot_record(result) -> dict:
    """What the pilot measured, kept for a look afterwards (how a projection came about, with
    the run beside it): each completion's start and end (seconds from the pilot's first start),
    output tokens and level, and the requests in flight per server over time."""
    t0 = min([x.start for x in result.completions] + [t for t, _ in result.timeline[:1]], default=0.0)
    return {"completions": [[round(x.start - t0, 3), round(x.end - t0, 3), x.tokens, x.level]
                            for x in result.completions],
            "timeline": [[round(t - t0, 3), round(k, 3)] for t, k in result.timeline]}


def _project(plan: dict, proj, c: int, n_servers: int, remaining: int, deadline_s: Optional[float],
             price: Optional[float]) -> None:
    plan.update(projected_wall_s=round(proj.wall_s, 1) or proj.wall_s,  # a few prompts on a fast server: not 0
                projected_wall_s_low=round(proj.low_s, 1), projected_wall_s_high=round(proj.high_s, 1),
                projected_tail_s=round(proj.tail_s, 1), projected_start_s=round(proj.start_s, 1),
                tail_measured=proj.tail_measured)
    if deadline_s is not None:
        plan["servers_needed"] = stats.servers_for(deadline_s, remaining, proj.mean_latency_s, c,
                                                   proj.tail_s + proj.start_s)
    if price is not None:
        plan["projected_cost"] = round(n_servers * proj.wall_s / 3600 * price, 2)
        if plan["servers_needed"]:
            wall = remaining * proj.mean_latency_s / (c * plan["servers_needed"]) + proj.tail_s + proj.start_s
            plan["projected_cost_at_servers_needed"] = round(plan["servers_needed"] * wall / 3600 * price, 2)


def cautions(plan: dict, best: Optional[dict]) -> list[str]:
    """What the projection is not sure of, in plain sentences (a go stays a go): a 90% interval
    wider than +-CAUTION_HALF_WIDTH, with the hold or the pilot that would narrow it to that. The interval is
    the bootstrap of the completions the best level was counted on; it narrows as one over the
    square root of their number. It does not hold a server whose speed moves between one
    stretch of time and the next: on the 2-core development machine the run's error was about
    1.5 times its half-width, on a 16-core VM about 3 times (bench/results/plan_accuracy/README.md)."""
    wall, low, high = plan["projected_wall_s"], plan["projected_wall_s_low"], plan["projected_wall_s_high"]
    if best is None or not wall or low is None or high is None:
        return []
    half = (high - low) / 2 / wall
    if half <= CAUTION_HALF_WIDTH:
        return []
    counted = (f"{best['steady_completions']} completions in {best['steady_s']:.0f}s held full"
               if best["measured"] == "steady state" else f"the latency model of {best['completions']} completions")
    tried = plan["pilot_done"] + plan["pilot_failed"]
    grow = (half / CAUTION_HALF_WIDTH) ** 2
    more = math.ceil(tried * grow / 10) * 10
    hold = (f"holding it full about {math.ceil(best['steady_s'] * grow / 5) * 5}s (--hold) or "
            if best["measured"] == "steady state" else "")
    return [f"the projection is +-{half:.0%} (90% interval): the rate at {best['concurrency']} per server was "
            f"counted on {counted}; {hold}a pilot of about {more} prompts would narrow it to "
            f"+-{CAUTION_HALF_WIDTH:.0%}"]


def verdict(plan: dict) -> tuple[str, list[str]]:
    """("go" or "no-go", the reasons for a no-go, in plain sentences)."""
    why = []
    n = plan["pilot_done"]
    tried = n + plan["pilot_failed"]
    ol = plan["output_length"]
    if n == 0:
        why.append("no completion came back in the pilot")
    elif plan["pilot_failed"] / tried > MAX_FAILED:
        why.append(f"{plan['pilot_failed']} of {tried} pilot prompts failed")
    if n and ol["empty_share"] > MAX_EMPTY:
        why.append(f"{ol['empty_share']:.0%} of the pilot's answers are empty")
    if n and ol["cut_share"] > MAX_CUT:
        why.append(f"{ol['cut_share']:.0%} of the pilot's answers were cut at max_tokens={ol['max_tokens']} "
                   f"(raise --max-tokens)")
    need = plan["servers_needed"]
    if plan["deadline_s"] is not None and plan["projected_wall_s"] is not None:
        if need is None:
            why.append("the deadline is shorter than the longest requests take; no number of servers meets it")
        elif need > plan["servers"]:
            why.append(f"it needs {need} servers to finish by the deadline; {plan['servers']} given")
    return ("go" if not why else "no-go"), why


def _r(v: Optional[float], nd: int = 3) -> Optional[float]:
    return None if v is None else round(v, nd)
