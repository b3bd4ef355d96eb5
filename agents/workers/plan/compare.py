"""``gpudeck plan compare``: two or more plans of one dataset side by side, each as planned
or scaled to a node set (so many servers at so much an hour), with the cheaper and the
faster named. Pure arithmetic on plan.json files (stdlib only): nothing is run.

A generate plan is scaled by its own figures: the pilot measured ``completions_per_s`` on
``servers`` servers at its best concurrency; the servers do not share work, so N of them
finish the same prompts in ``servers / N`` of the time, plus the drain at the end (the
plan's ``projected_tail_s``, which does not shrink with more servers). The interval scales
with it. Compare projects the whole dataset (``prompts``, the pilot's own completions
included), so that pilots of different sizes compare. An extract plan's time divides over
its GPUs the same way (its ``gpus``), with no interval: it has none.

A plan of hardware not rented yet (``plan generate --tokens-per-s``, ``assumed`` in its
plan.json) compares beside measured ones, its row marked ``*`` and its interval "assumed": it
has none, and the faster fleet's interval is set against its one figure.

A plan names its dataset (``dataset``: path, size, SHA-256 of its first MiB; dataset.py);
plans of different data, or written before plans named it, are refused: figures of two
datasets side by side would pick a fleet for the wrong reason.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import asdict, dataclass
from typing import Any, Optional

from ...contract.documents import MAX_PLAN_BYTES, PLAN_FILE, read_plan
from ...contract.units import human_bytes, human_duration
from . import dataset
from .units import UsageError

EXIT_OK, EXIT_USAGE = 0, 2
SPEC_KEYS = {"servers": "servers", "gpus": "servers", "price": "price"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("fleets", nargs="*", metavar="[NAME=]PLAN[,servers=N][,price=DOLLARS]",
                   help="a plan.json (or the directory holding it) per fleet, as planned, or scaled to N servers "
                        "(GPUs for an extract plan) at DOLLARS per server-hour; NAME defaults to the plan's directory. "
                        "None: the fleet file's [[plans]] (`gpudeck plan compare -f FLEET`)")
    p.add_argument("--json", action="store_true",
                   help="print the comparison as JSON, naming the cheaper and the faster")


@dataclass(frozen=True)
class Spec:
    """One fleet of the command line."""
    name: Optional[str]
    path: str
    servers: Optional[int] = None
    price: Optional[float] = None


@dataclass(frozen=True)
class Fleet:
    """One fleet's projection of the whole dataset; None where the plan cannot say."""
    name: str
    plan: str
    servers: int
    price_per_hour: Optional[float]
    wall_s: Optional[float]
    wall_s_low: Optional[float]
    wall_s_high: Optional[float]
    days: Optional[float]
    days_low: Optional[float]
    days_high: Optional[float]
    cost: Optional[float]
    cost_per_m_tokens: Optional[float]
    cost_per_useful: Optional[float]
    tokens: Optional[int]
    useful_share: Optional[float]
    projected_bytes: Optional[int]
    # a plan of hardware not rented yet (plan generate --tokens-per-s): nothing measured, no
    # interval; ``assumed_from`` says what it took for granted
    assumed: bool = False
    assumed_from: Optional[str] = None
    prompts: Optional[int] = None  # the prompts it projects (a subset's, for an assumed plan with --subset)


# ---------------------------------------------------------------- the command line

def parse_spec(text: str) -> Spec:
    """``b200=runs/b200,servers=7,price=5.5`` -> Spec; a UsageError names what is wrong."""
    head, *opts = text.split(",")
    name, path = None, head
    m = re.fullmatch(r"([A-Za-z0-9_.-]+)=(.+)", head)
    if m and not os.path.exists(head):
        name, path = m.group(1), m.group(2)
    if not path:
        raise UsageError(f"{text!r}: no plan path")
    got: dict[str, Any] = {}
    for opt in opts:
        key, eq, value = opt.partition("=")
        field = SPEC_KEYS.get(key.strip())
        if not eq or field is None:
            raise UsageError(f"{text!r}: {opt!r} is not servers=N, gpus=N or price=DOLLARS")
        try:
            got[field] = int(value) if field == "servers" else float(value)
        except ValueError:
            got[field] = None
        ok = got[field] is not None and (got[field] >= 1 if field == "servers" else
                                         math.isfinite(got[field]) and got[field] >= 0)
        if not ok:
            raise UsageError(f"{text!r}: {key}={value!r}: expected "
                             + ("a whole number of at least 1" if field == "servers" else "dollars, at least 0"))
    return Spec(name, path, got.get("servers"), got.get("price"))


def load(spec: Spec) -> tuple[str, dict]:
    """(the plan.json's path, the plan) of a spec; a UsageError says why it cannot be used."""
    path = os.path.join(spec.path, PLAN_FILE) if os.path.isdir(spec.path) else spec.path
    try:
        read_plan(path)  # the fields the agent reads, checked
        with open(path, "rb") as f:
            plan = json.loads(f.read(MAX_PLAN_BYTES + 1))
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not a plan: {exc}") from None
    return path, plan


def kind_of(plan: dict) -> Optional[str]:
    """``generate`` or ``extract`` (plans before ``kind`` was written: by their keys)."""
    return plan.get("kind") or ("generate" if "pilot_done" in plan else "extract" if "layers_kept" in plan else None)


# ---------------------------------------------------------------- the arithmetic

def _num(plan: dict, key: str, path: str) -> Optional[float]:
    v = plan.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise UsageError(f"{path}: {key} is {v!r}, not a number of at least 0")
    return float(v)


def project(name: str, path: str, plan: dict, servers: Optional[int] = None,
            price: Optional[float] = None) -> Fleet:
    """A plan's projection of the whole dataset on ``servers`` at ``price`` per server-hour
    (the plan's own when None)."""
    kind = kind_of(plan)
    own = _num(plan, "servers" if kind == "generate" else "gpus", path) or 1
    n = servers or int(own)
    price = price if price is not None else _num(plan, "price_per_hour", path)
    wall = low = high = None
    useful = None
    if kind == "generate":
        wall0 = _num(plan, "projected_wall_s", path)  # the start and the drain do not shrink with more servers
        tail = (_num(plan, "projected_tail_s", path) or 0.0) + (_num(plan, "projected_start_s", path) or 0.0)
        prompts, remaining = _num(plan, "prompts", path) or 0, _num(plan, "remaining", path)
        cps = _num(plan, "completions_per_s", path)
        if wall0 is not None and remaining:
            grow = prompts / remaining * own / n  # the whole dataset, on n servers
            wall = (wall0 - tail) * grow + tail
            lo, hi = _num(plan, "projected_wall_s_low", path), _num(plan, "projected_wall_s_high", path)
            low = None if lo is None else max(0.0, lo - tail) * grow + tail
            high = None if hi is None else max(0.0, hi - tail) * grow + tail
        elif cps:
            wall = prompts / (cps * n / own) + tail
        tokens = _num(plan, "projected_output_tokens", path)
        useful = _useful_share(plan, path)
    else:
        wall0 = _num(plan, "projected_wall_s", path)
        wall = None if wall0 is None else wall0 * own / n
        tokens = _num(plan, "tokens", path)
    cost = None if wall is None or price is None else n * wall / 3600 * price
    per_useful = None
    if cost is not None and useful and kind == "generate":
        per_useful = cost / ((_num(plan, "prompts", path) or 0) * useful or math.inf)
    day = (lambda s: None if s is None else s / 86400)
    assumed = bool(plan.get("assumed"))
    return Fleet(assumed=assumed, assumed_from=_assumed_from(plan) if assumed else None,
                 prompts=None if _num(plan, "prompts", path) is None else int(_num(plan, "prompts", path) or 0),
                 name=name, plan=path, servers=n, price_per_hour=price, wall_s=_r(wall, 1), wall_s_low=_r(low, 1),
                 wall_s_high=_r(high, 1), days=_r(day(wall), 3), days_low=_r(day(low), 3),
                 days_high=_r(day(high), 3), cost=_r(cost, 2),
                 cost_per_m_tokens=_r(cost / tokens * 1e6, 4) if cost is not None and tokens else None,
                 cost_per_useful=_r(per_useful, 6) if per_useful else None,
                 tokens=None if tokens is None else int(tokens), useful_share=_r(useful, 4),
                 projected_bytes=None if plan.get("projected_bytes") is None
                 else int(_num(plan, "projected_bytes", path) or 0))


def _assumed_from(plan: dict) -> str:
    """What an assumed plan took for granted, in a few words."""
    a = got if isinstance(got := plan.get("assumptions"), dict) else {}
    rate = a.get("tokens_per_s")
    speed = a.get("speed_factor")
    length = (f"the lengths of {a['lengths_from']}" if a.get("lengths_from") else
              f"{a['output_tokens']:,.0f} output tokens an answer" if isinstance(a.get("output_tokens"), (int, float))
              else "an assumed length")
    told = f"{rate:,.0f} output tokens/s per server" if isinstance(rate, (int, float)) else "an assumed rate"
    if isinstance(speed, (int, float)) and speed != 1:
        told += f" x{speed:g}"
    return f"{told}, {length}, max_tokens {a.get('max_tokens')}"


def _useful_share(plan: dict, path: str) -> Optional[float]:
    """The share of prompts that give a useful completion (neither cut at max_tokens, nor
    empty, nor failed): the plan's ``useful_share``, or, in a plan written before it, from the
    shares of cut and empty answers (which may overlap: it then leans low)."""
    share = _num(plan, "useful_share", path)
    if share is not None:
        return share
    done, failed = _num(plan, "pilot_done", path) or 0, _num(plan, "pilot_failed", path) or 0
    ol = got if isinstance(got := plan.get("output_length"), dict) else {}
    if not done:
        return None
    ok = max(0.0, 1.0 - (_num(ol, "cut_share", path) or 0) - (_num(ol, "empty_share", path) or 0))
    return ok * done / (done + failed)


def _r(v: Optional[float], nd: int) -> Optional[float]:
    return None if v is None else round(v, nd)


def compare(specs: list[Spec]) -> dict:
    """The comparison document; a UsageError for input that cannot be compared."""
    if len(specs) < 2:
        raise UsageError(f"compare needs at least two plans, got {len(specs)}: give one per fleet, "
                         f"e.g. pro6000=runs/pro6000,servers=4,price=1.8 b200=runs/b200,servers=7,price=5.5")
    loaded = [(s, *load(s)) for s in specs]
    names: list[str] = []
    for s, path, _ in loaded:
        name = s.name or os.path.basename(os.path.dirname(os.path.abspath(path))) or path
        if name in names:
            raise UsageError(f"two fleets are named {name!r}: name them, NAME=PLAN (e.g. b200={s.path})")
        names.append(name)
    kinds = {name: kind_of(plan) for name, (_, path, plan) in zip(names, loaded)}
    if None in kinds.values():
        bad = next(path for (_, path, plan) in loaded if kind_of(plan) is None)
        raise UsageError(f"{bad}: not a plan of gpudeck plan generate or extract")
    if len(set(kinds.values())) > 1:
        raise UsageError("plans of different kinds cannot be compared: "
                         + ", ".join(f"{n} is {k}" for n, k in kinds.items()))
    first = None
    for name, (_, path, plan) in zip(names, loaded):
        d = plan.get("dataset")
        if not isinstance(d, dict):
            raise UsageError(f"{name} ({path}): this plan does not name its dataset (written before plans did); "
                             f"plan it again to compare it")
        if d.get("head_sha256") is None:
            raise UsageError(f"{name} ({path}): its dataset {dataset.describe(d)}: it cannot be matched "
                             f"to the others")
        if first is None:
            first = (name, d)
        elif not dataset.same(first[1], d):
            raise UsageError(f"{first[0]} and {name} plan different datasets: {first[0]}: "
                             f"{dataset.describe(first[1])}; {name}: {dataset.describe(d)}")
    fleets = [project(name, path, plan, s.servers, s.price) for name, (s, path, plan) in zip(names, loaded)]
    assert first is not None
    return {"kind": next(iter(kinds.values())), "dataset": first[1], "fleets": [asdict(f) for f in fleets],
            **verdicts(fleets)}


def verdicts(fleets: list[Fleet]) -> dict:
    """The cheaper and the faster fleet (null when a fleet has no figure to rank it by: a
    fleet with no price makes the cheaper unknown), and whether the faster one's interval
    clears every other's."""
    timed = [f for f in fleets if f.wall_s is not None]
    faster = min(timed, key=lambda f: f.wall_s or 0.0) if len(timed) == len(fleets) else None
    priced = [f for f in fleets if f.cost is not None]
    cheaper = min(priced, key=lambda f: f.cost or 0.0) if len(priced) == len(fleets) else None
    clear = None
    if faster is not None and faster.wall_s_high is not None:
        # an assumed plan has no interval: its one figure is what the faster's interval must clear
        others = [f.wall_s if f.assumed else f.wall_s_low for f in fleets if f is not faster]
        clear = all(lo is not None and faster.wall_s_high < lo for lo in others)
    return {"cheaper": cheaper.name if cheaper else None, "faster": faster.name if faster else None,
            "faster_beyond_interval": clear,
            "unpriced": [f.name for f in fleets if f.cost is None],
            "untimed": [f.name for f in fleets if f.wall_s is None],
            "assumed": [f.name for f in fleets if f.assumed]}


# ---------------------------------------------------------------- the text

def render(doc: dict) -> str:
    gen = doc["kind"] == "generate"
    f2 = (lambda v, fmt: "-" if v is None else fmt.format(v))
    # a time as `plan generate` says it (human_duration: 9d 18h, 2h 05m, 4m 10s), never 0.01 days;
    # --json keeps its days (and wall_s) as numbers
    head = (f"{'FLEET':<14} {'SERVERS' if gen else 'GPUS':>7} {'$/HOUR':>7} {'TIME':>7} {'90% INTERVAL':>15} "
            f"{'$ TOTAL':>12} {'$/M TOK':>8} {'$/USEFUL':>9} {'BYTES':>9}")
    lines = [f"dataset: {dataset.describe(doc['dataset'])}; the whole of it on each fleet ({doc['kind']})", "", head]
    for f in doc["fleets"]:
        interval = ("assumed" if f.get("assumed") else "-") if f["wall_s_low"] is None else \
            f"{human_duration(f['wall_s_low'])}-{human_duration(f['wall_s_high'])}"
        name = f["name"][:13] + "*" if f.get("assumed") else f["name"][:14]
        lines.append(f"{name:<14} {f['servers']:>7} {f2(f['price_per_hour'], '{:.2f}'):>7} "
                     f"{human_duration(f['wall_s']):>7} {interval:>15} {f2(f['cost'], '{:,.2f}'):>12} "
                     f"{f2(f['cost_per_m_tokens'], '{:.3f}'):>8} {f2(f['cost_per_useful'], '{:.5f}'):>9} "
                     f"{human_bytes(f['projected_bytes']) if f['projected_bytes'] is not None else '-':>9}")
    by = {f["name"]: f for f in doc["fleets"]}
    for f in doc["fleets"]:
        if f.get("assumed"):
            lines.append(f"* {f['name']}: assumed, not measured ({f['assumed_from']}); no interval")
    counts = {f.get("prompts") for f in doc["fleets"]}
    if len(counts) > 1:
        lines.append("prompts differ: " + ", ".join(f"{f['name']} {f['prompts']:,}" for f in doc["fleets"]
                                                   if f.get("prompts") is not None) + " (an assumed plan's --subset)")
    lines.append("")
    if doc["cheaper"]:
        lines.append(f"cheaper: {doc['cheaper']} (${by[doc['cheaper']]['cost']:,.2f})")
    else:
        lines.append(f"cheaper: unknown ({', '.join(doc['unpriced'])} without a price: add ,price=DOLLARS)")
    if doc["faster"]:
        note = {True: "beyond the others' intervals", False: "within the intervals' overlap",
                None: "no interval"}[doc["faster_beyond_interval"]]
        lines.append(f"faster: {doc['faster']} ({human_duration(by[doc['faster']]['wall_s'])}; {note})")
    else:
        lines.append(f"faster: unknown ({', '.join(doc['untimed'])} without a projected time)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        doc = compare([parse_spec(s) for s in args.fleets])
    except UsageError as exc:
        print(f"gpudeck plan compare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(doc, indent=1) if args.json else render(doc))
    return EXIT_OK
