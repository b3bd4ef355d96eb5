"""``gpudeck audit FILE``: what a human should see about a dataset before a long launch; of a
generate output (a directory, or an S3 prefix), its records' quality figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, exit_codes

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser("audit", help="check a chat or tokenized JSONL dataset before a long launch",
                       description="Samples, roles, turns, target tokens per sample, placeholder answers and "
                                   "duplicates. Exits 1 with a plain sentence when the data is degenerate. Of a "
                                   "`gpudeck generate` output (its directory, or its S3 prefix): the records cut at "
                                   "max_tokens, empty, with no answer, looping, and the useful share, per shard and "
                                   "in total, as the worker counts them.",
                       epilog=exit_codes({EXIT_FAIL: "the data is degenerate, or a generate output has fewer useful "
                                                     "records than --min-useful-pct (the report says why); an S3 "
                                                     "prefix cannot be read",
                                          EXIT_USAGE: "a mistake on the command line, or the file cannot be read"}))
    p.add_argument("file", help="JSONL: chat (messages / conversations), prompts (prompt / messages ending in a "
                                "user turn), generated records, or tokenized (input_ids + loss_mask); a "
                                "`gpudeck generate` output directory: its quality figures; or s3://bucket/prefix: "
                                "what it holds (objects, bytes, dollars a month), listed now, and the quality "
                                "figures of the generate shards it holds")
    p.add_argument("--prompts", action="store_true",
                   help="audit as prompts for `gpudeck generate` (answers will be generated again); the default "
                        "when no sample has an answer")
    p.add_argument("--sample", type=int, default=None, metavar="N",
                   help="read about N lines spread over the file instead of all of it")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--min-useful-pct", type=_pct, default=None, metavar="PCT",
                   help="of a generate output: exit 1 when fewer records than this share (0 to 100) are useful "
                        "(default 50, generate's own --min-useful-pct; 0: never)")
    p.add_argument("--s3-endpoint", metavar="URL", help="with FILE an s3://bucket/prefix: an S3-compatible endpoint "
                                                        "(default: AWS)")
    p.add_argument("--s3-price-per-gb-month", type=float, default=None, metavar="DOLLARS",
                   help="with FILE an s3://bucket/prefix: dollars per GB-month (default 0.023)")
    p.set_defaults(run=_run)


def _pct(text: str) -> float:
    import argparse
    import math
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (0 <= v <= 100):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a share in percent, 0 to 100")
    return v


def _min_useful(args: argparse.Namespace) -> float:
    if args.min_useful_pct is not None:
        return float(args.min_useful_pct)  # _pct's float
    from ...agents.contract.kinds import GenerateOptions
    return GenerateOptions().min_useful_pct  # generate's own default


def _run(args: argparse.Namespace) -> int:
    import json
    import os
    import sys

    from ...agents.workers.audit import audit_file

    if args.file.startswith("s3://"):
        return _inventory(args)
    if os.path.isdir(args.file):
        return _generate_output(args)
    try:
        report = audit_file(args.file, mode="prompts" if args.prompts else "auto", sample=args.sample)
    except OSError as exc:
        print(f"gpudeck audit: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(report.render())
    return EXIT_FAIL if report.degenerate else EXIT_OK


def _inventory(args: argparse.Namespace) -> int:
    """``gpudeck audit s3://bucket/prefix``: what the prefix holds, listed now (a job's own
    figure in `status` is its run's listing at its start plus its uploads), and what it costs
    a month; by top-level folder (a part's ``part-I-of-N/``, say)."""
    import json
    import math
    import sys

    from ...agents.contract.units import human_bytes
    from ...agents.workers.audit import s3_listing, audit_generate_s3, render_generate_quality, s3_inventory
    from ...remote.fleet import S3_PRICE_PER_GB_MONTH
    from ..cost import dollars, s3_monthly

    price = args.s3_price_per_gb_month if args.s3_price_per_gb_month is not None else S3_PRICE_PER_GB_MONTH
    if not (price >= 0 and math.isfinite(price)):
        print(f"gpudeck audit: --s3-price-per-gb-month {price!r}: expected dollars, at least 0", file=sys.stderr)
        return EXIT_USAGE
    try:
        listing = s3_listing(args.file, args.s3_endpoint)
        doc = s3_inventory(args.file, args.s3_endpoint, listing=listing[2])
        quality = audit_generate_s3(args.file, args.s3_endpoint, _min_useful(args), listing=listing)
    except ValueError as exc:
        print(f"gpudeck audit: {args.file}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as exc:
        print(f"gpudeck audit: {exc}", file=sys.stderr)
        return EXIT_FAIL
    doc.update(price_per_gb_month=price, cost_per_month=s3_monthly(doc["bytes"], price), quality=quality)
    status = EXIT_FAIL if quality is not None and quality["degenerate"] else EXIT_OK
    if args.json:
        print(json.dumps(doc, indent=1))
        return status
    print(f"{doc['prefix']}: {doc['objects']:,} objects, {human_bytes(doc['bytes'])}; "
          f"{dollars(doc['cost_per_month'])} a month at ${price:g}/GB-month")
    for f in doc["folders"]:
        if f["folder"]:
            print(f"  {f['folder']:<24} {f['objects']:>8,} objects  {human_bytes(f['bytes']):>10}")
    if quality is not None:
        print(render_generate_quality(quality))
    return status


def _generate_output(args: argparse.Namespace) -> int:
    """``gpudeck audit OUT``: the quality figures of the generate output in the directory
    ``OUT``, counted by the worker's own code (agents/workers/generate/quality.py)."""
    import json
    import sys

    from ...agents.workers.audit import audit_generate_dir, render_generate_quality

    try:
        doc = audit_generate_dir(args.file, _min_useful(args))
    except OSError as exc:
        print(f"gpudeck audit: cannot read {exc.filename or args.file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    if doc is None:
        print(f"gpudeck audit: {args.file} is a directory without generate shards (shard-NNNNNN.jsonl, in it or "
              f"in its part-I-of-N folders): give a JSONL file, a generate output or an s3:// prefix",
              file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(doc, indent=1) if args.json else render_generate_quality(doc))
    return EXIT_FAIL if doc["degenerate"] else EXIT_OK
