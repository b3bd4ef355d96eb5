"""``gpudeck plan generate --tokens-per-s R --server-count S --output-tokens L``: a plan of
hardware not rented yet, from published numbers, with no server at all (stdlib only).

``R`` is one server's output tokens/s at its best concurrency (a vendor's figure, a
benchmark's, another team's); ``S`` servers share the prompts, each answer ``L`` output tokens
on average. The run takes ``prompts x L / (R x S)`` seconds: 91,400 prompts x 1,500 tokens
at 400 tokens/s on 4 servers is 85,688 s, 0.99 days. Nothing was measured, so the plan has no
interval, no drain at the end, and says ``assumed``; `plan compare` marks it beside measured
plans.

The levers, each said in the plan's ``levers``:

- ``--max-tokens C`` caps the answers' lengths. On a length distribution (``--lengths-from
  PLAN``: the output lengths a measured plan's pilot saw, its 101 percentiles) the mean becomes
  the mean of ``min(length, C)`` and the share of answers at or above ``C`` is cut (and not
  useful); a cap above the pilot's own ``max_tokens`` changes nothing it can know of. On a
  mean alone (``--output-tokens``) the mean becomes ``min(L, C)``, and a mean above ``C`` is a
  NO-GO: many answers would be cut, and a mean cannot say how many.
- ``--subset N`` or ``--subset P%``: plan N of the prompts (P percent of them).
- ``--speed-factor F``: every server ``F`` times as fast (1.6 for FP8, say).

Bytes: each record holds its prompt (the file's mean line, measured) and its answer at
:data:`BYTES_PER_TOKEN` bytes per output token, plus :data:`RECORD_BYTES` of fields.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any, Optional

from ...contract.documents import MAX_PLAN_BYTES, PLAN_FILE, write_plan
from .dataset import fingerprint_or_why
from .units import UsageError, parse_deadline

EXIT_GO, EXIT_NO_GO, EXIT_USAGE = 0, 1, 2
BYTES_PER_TOKEN = 4.0  # an output token as UTF-8 JSON text, about (English prose and code)
RECORD_BYTES = 300  # a record's fields beside its prompt and answer: id, finish_reason, counts, server
MAX_CUT = 0.10  # as a measured plan's NO-GO (generate_plan.MAX_CUT)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of a plan with no server (on `plan generate`'s parser)."""
    p.add_argument("--tokens-per-s", type=_above0("--tokens-per-s"), metavar="R",
                   help="plan with no server: one server's output tokens/s at its best concurrency (a published or "
                        "measured figure); the plan is marked assumed, with no interval")
    p.add_argument("--server-count", type=_int1("--server-count"), metavar="S",
                   help="with --tokens-per-s: the servers that share the prompts (default: the --server given, "
                        "else 1)")
    p.add_argument("--output-tokens", type=_above0("--output-tokens"), metavar="L",
                   help="with --tokens-per-s: the mean output tokens of an answer")
    p.add_argument("--lengths-from", metavar="PLAN",
                   help="with --tokens-per-s: the output lengths a measured plan's pilot saw (its plan.json or "
                        "directory), instead of --output-tokens: --max-tokens then cuts that distribution")
    p.add_argument("--subset", metavar="N|P%", help="with --tokens-per-s: plan N of the prompts (or P percent)")
    p.add_argument("--speed-factor", type=_above0("--speed-factor"), default=None, metavar="F",
                   help="with --tokens-per-s: each server F times as fast (1.6 for FP8, say; default 1)")


def _above0(flag: str):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and v > 0):
            raise argparse.ArgumentTypeError(f"expected a finite number above 0, got {text!r}")
        return v
    return parse


def _int1(flag: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = 0
        if v < 1:
            raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
        return v
    return parse


# ---------------------------------------------------------------- the input

def count_prompts(path: str, part: Optional[tuple[int, int]] = None) -> tuple[int, float]:
    """(prompt lines, their mean bytes) of the file, or of its part ``I/N`` (the id hash of
    generate's --part); streamed, no JSON parsed without a part."""
    from ..common.parts import in_part
    from ..generate.prompts import line_id

    n = size = 0
    try:
        with open(path, "rb") as f:
            for no, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                if part is not None:
                    pid = line_id(path, no, raw)
                    if pid is None or not in_part(pid, part):
                        continue
                n += 1
                size += len(raw)
    except OSError as exc:
        raise UsageError(f"--prompts {path}: {exc.strerror or exc}") from None
    return n, (size / n if n else 0.0)


def parse_subset(text: Optional[str], total: int) -> Optional[int]:
    """``--subset 50000`` or ``--subset 25%``: the prompts planned (at most ``total``)."""
    if text is None:
        return None
    t = text.strip()
    try:
        if t.endswith("%"):
            pct = float(t[:-1])
            if not (math.isfinite(pct) and 0 < pct <= 100):
                raise ValueError
            return max(1, round(total * pct / 100))
        n = int(t.replace(",", "").replace("_", ""))
        if n < 1:
            raise ValueError
        return min(n, total)
    except ValueError:
        raise UsageError(f"--subset {text!r}: expected a number of prompts (50000) or a share of them (25%)") from None


def lengths_of(path: str) -> dict[str, Any]:
    """A measured generate plan's output lengths: its percentiles (``quantiles``), or its mean
    alone in a plan written before they were kept; a UsageError says why it cannot be used."""
    file = os.path.join(path, PLAN_FILE) if os.path.isdir(path) else path
    try:
        with open(file, "rb") as f:
            plan = json.loads(f.read(MAX_PLAN_BYTES + 1))
    except OSError as exc:
        raise UsageError(f"--lengths-from {file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"--lengths-from {file}: not a plan: {exc}") from None
    ol = plan.get("output_length") if isinstance(plan, dict) else None
    if not isinstance(ol, dict) or plan.get("assumed") or plan.get("kind", "generate") != "generate":
        raise UsageError(f"--lengths-from {file}: not a measured plan of `gpudeck plan generate` (no pilot's lengths)")
    q = ol.get("quantiles")
    ok = isinstance(q, list) and len(q) >= 2 and all(isinstance(x, (int, float)) and x >= 0 for x in q)
    mean = ol.get("mean")
    if not ok and not (isinstance(mean, (int, float)) and mean > 0):
        raise UsageError(f"--lengths-from {file}: its pilot has no output lengths")
    return {"path": file, "quantiles": [float(x) for x in q] if ok and isinstance(q, list) else None,
            "mean": float(mean) if isinstance(mean, (int, float)) else None,
            "max_tokens": ol.get("max_tokens"), "cut_share": ol.get("cut_share")}


# ---------------------------------------------------------------- the arithmetic

def capped(lengths: dict[str, Any], cap: int) -> dict[str, Any]:
    """The output lengths under ``--max-tokens cap``: mean, p50, p95, the share cut."""
    q = lengths.get("quantiles")
    pilot_cap = lengths.get("max_tokens")
    if q:
        # the 101 percentiles stand for the distribution, the two ends half-weighted (a trapezoid)
        cut_q = [min(x, cap) for x in q]
        w = [0.5] + [1.0] * (len(q) - 2) + [0.5]
        mean = sum(a * b for a, b in zip(cut_q, w)) / sum(w)
        if isinstance(pilot_cap, int) and cap >= pilot_cap:  # no tighter than the pilot's: its own cut share
            share = lengths.get("cut_share")
        else:
            share = sum(wi for x, wi in zip(q, w) if x >= cap) / sum(w)
        return {"mean": mean, "p50": _pct(cut_q, 50), "p95": _pct(cut_q, 95), "cut_share": share,
                "source": "distribution"}
    mean = float(lengths["mean"])
    return {"mean": min(mean, cap), "p50": None, "p95": None, "cut_share": None, "source": "mean",
            "mean_above_cap": mean > cap}


def _pct(q: list[float], p: int) -> float:
    """The ``p``-th percentile of 101 percentiles (interpolated on fewer)."""
    x = p / 100 * (len(q) - 1)
    lo = int(x)
    return q[lo] + (q[min(lo + 1, len(q) - 1)] - q[lo]) * (x - lo)


def build_assumed(*, prompts_in_file: int, prompt_bytes: float, subset: Optional[int], tokens_per_s: float,
                  servers: int, lengths: dict[str, Any], max_tokens: int, speed_factor: float = 1.0,
                  deadline_s: Optional[float] = None, price: Optional[float] = None) -> dict:
    """The plan document of hardware not rented yet (pure: no I/O). ``lengths``: ``{"mean":
    L}``, or a measured plan's (:func:`lengths_of`)."""
    n = subset if subset is not None else prompts_in_file
    ol = capped(lengths, max_tokens)
    rate = tokens_per_s * speed_factor  # one server's output tokens/s
    tokens = n * ol["mean"]
    wall = tokens / (rate * servers) if n else 0.0
    levers = _levers(lengths, ol, max_tokens, n, prompts_in_file, subset, speed_factor, tokens_per_s, rate)
    cut = ol["cut_share"]
    plan: dict[str, Any] = {
        "kind": "generate", "assumed": True,
        "assumptions": {"tokens_per_s": tokens_per_s, "server_count": servers,
                        "output_tokens": lengths.get("mean") if not lengths.get("path") else None,
                        "lengths_from": lengths.get("path"), "speed_factor": speed_factor,
                        "max_tokens": max_tokens, "subset": subset, "bytes_per_token": BYTES_PER_TOKEN},
        "levers": levers,
        "prompts": n, "prompts_in_file": prompts_in_file, "done": 0, "remaining": n, "servers": servers,
        "pilot_done": 0, "pilot_failed": 0, "levels": [],
        "output_length": {"mean": _r(ol["mean"], 1), "p50": _r(ol["p50"], 1), "p95": _r(ol["p95"], 1),
                          "max_tokens": max_tokens, "cut_share": _r(cut, 3), "empty_share": None,
                          "reasoning_share": None},
        "useful_share": _r(1.0 - cut, 4) if cut is not None else None,
        "best_concurrency": None,
        "completions_per_s": _r(rate * servers / ol["mean"], 4) if ol["mean"] else None,
        "output_tokens_per_s": _r(rate * servers, 1),
        "projected_wall_s": _r(wall, 1) if wall else None,
        "projected_wall_s_low": None, "projected_wall_s_high": None, "projected_tail_s": 0.0,
        "projected_output_tokens": round(tokens),
        "projected_bytes": round(n * (prompt_bytes + ol["mean"] * BYTES_PER_TOKEN + RECORD_BYTES)),
        "deadline_s": deadline_s, "servers_needed": None, "price_per_hour": price, "projected_cost": None,
        "seconds_per_request": None, "cautions": [],
    }
    if deadline_s is not None and n:
        plan["servers_needed"] = max(1, math.ceil(tokens / (rate * deadline_s)))
    if price is not None:  # the same on any number of servers: with no drain, the server-hours do not change
        plan["projected_cost"] = round(servers * wall / 3600 * price, 2)
    why = []
    if ol.get("mean_above_cap"):
        why.append(f"the assumed mean of {lengths['mean']:,.0f} output tokens is above max_tokens={max_tokens}: "
                   f"many answers would be cut (raise --max-tokens)")
    if cut is not None and cut > MAX_CUT:
        why.append(f"{cut:.0%} of the answers would be cut at max_tokens={max_tokens} (raise --max-tokens)")
    need = plan["servers_needed"]
    if need is not None and need > servers:
        why.append(f"it needs {need} servers to finish by the deadline; {servers} given")
    plan["verdict"], plan["reasons"] = ("go" if not why else "no-go"), why
    return plan


def _levers(lengths: dict[str, Any], ol: dict[str, Any], max_tokens: int, n: int, prompts_in_file: int,
            subset: Optional[int], speed_factor: float, tokens_per_s: float, rate: float) -> list[str]:
    """What the assumed plan's levers change: max_tokens on the lengths, the subset, the speed."""
    levers = []
    if lengths.get("path"):
        base = capped(lengths, 1 << 62)
        levers.append(f"max_tokens {max_tokens} on the lengths of {lengths['path']}: mean {base['mean']:,.0f} -> "
                      f"{ol['mean']:,.0f} tokens" + (f", {ol['cut_share']:.0%} cut" if ol["cut_share"] is not None
                                                     else ""))
    elif ol.get("mean_above_cap"):
        levers.append(f"max_tokens {max_tokens} under the mean of {lengths['mean']:,.0f}: the mean is taken as "
                      f"{max_tokens} (a mean cannot say how many answers are cut)")
    if subset is not None:
        levers.append(f"subset: {n:,} of the {prompts_in_file:,} prompts")
    if speed_factor != 1.0:
        levers.append(f"speed x{speed_factor:g}: {tokens_per_s:,.0f} -> {rate:,.0f} output tokens/s per server")
    return levers


def _r(v: Optional[float], nd: int) -> Optional[float]:
    return None if v is None else round(v, nd)


# ---------------------------------------------------------------- the command

def run(args: argparse.Namespace) -> int:
    """`plan generate --tokens-per-s`: the plan, written to OUT/plan.json and printed."""
    from .render import render_assumed

    try:
        if args.output_tokens is None and args.lengths_from is None:
            raise UsageError("--tokens-per-s needs the answers' length: --output-tokens L (their mean) or "
                             "--lengths-from PLAN (a measured plan's)")
        if args.output_tokens is not None and args.lengths_from is not None:
            raise UsageError("--output-tokens and --lengths-from are two answers to one question: give one")
        deadline_s = parse_deadline(args.deadline) if args.deadline else None
        lengths = lengths_of(args.lengths_from) if args.lengths_from else {"mean": args.output_tokens}
        if not os.path.isfile(args.prompts):
            raise UsageError(f"--prompts {args.prompts}: no such file")
        total, prompt_bytes = count_prompts(args.prompts, args.part)
        servers = args.server_count or len(args.servers or []) or 1
        plan = build_assumed(prompts_in_file=total, prompt_bytes=prompt_bytes,
                             subset=parse_subset(args.subset, total), tokens_per_s=args.tokens_per_s,
                             servers=servers, lengths=lengths, max_tokens=args.max_tokens,
                             speed_factor=args.speed_factor or 1.0, deadline_s=deadline_s,
                             price=args.price_per_hour)
    except UsageError as exc:
        print(f"gpudeck plan generate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from ..common.parts import part_name
    out = os.path.abspath(args.out if args.part is None else os.path.join(args.out, part_name(args.part)))
    plan.update(out=out, prompts_file=os.path.abspath(args.prompts),
                dataset=fingerprint_or_why(args.prompts, args.part), written_at=time.time())
    try:
        os.makedirs(out, exist_ok=True)
        write_plan(os.path.join(out, PLAN_FILE), plan)
    except OSError as exc:
        print(f"gpudeck plan generate: cannot write {os.path.join(out, PLAN_FILE)}: {exc.strerror or exc}",
              file=sys.stderr)
    print(json.dumps(plan, indent=1) if args.json else render_assumed(plan))
    return EXIT_GO if plan["verdict"] == "go" else EXIT_NO_GO
