"""``gpudeck audit FILE``: what a human should see about a dataset before a long launch."""

from __future__ import annotations

from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, exit_codes


def register(sub) -> None:
    p = sub.add_parser("audit", help="check a chat or tokenized JSONL dataset before a long launch",
                       description="Samples, roles, turns, target tokens per sample, placeholder answers and "
                                   "duplicates. Exits 1 with a plain sentence when the data is degenerate.",
                       epilog=exit_codes({EXIT_FAIL: "the data is degenerate (the report says why)",
                                          EXIT_USAGE: "a mistake on the command line, or the file cannot be read"}))
    p.add_argument("file", help="JSONL: chat (messages / conversations), prompts (prompt / messages ending in a "
                                "user turn), generated records, or tokenized (input_ids + loss_mask); or "
                                "s3://bucket/prefix: what it holds (objects, bytes, dollars a month), listed now")
    p.add_argument("--prompts", action="store_true",
                   help="audit as prompts for `gpudeck generate` (answers will be generated again); the default "
                        "when no sample has an answer")
    p.add_argument("--sample", type=int, default=None, metavar="N",
                   help="read about N lines spread over the file instead of all of it")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--s3-endpoint", metavar="URL", help="with FILE an s3://bucket/prefix: an S3-compatible endpoint "
                                                        "(default: AWS)")
    p.add_argument("--s3-price-per-gb-month", type=float, default=None, metavar="DOLLARS",
                   help="with FILE an s3://bucket/prefix: dollars per GB-month (default 0.023)")
    p.set_defaults(run=_run)


def _run(args) -> int:
    import json
    import sys

    from ...agents.workers.audit import audit_file

    if args.file.startswith("s3://"):
        return _inventory(args)
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


def _inventory(args) -> int:
    """``gpudeck audit s3://bucket/prefix``: what the prefix holds, listed now (a job's own
    figure in `status` is its run's listing at its start plus its uploads), and what it costs
    a month; by top-level folder (a part's ``part-I-of-N/``, say)."""
    import json
    import math
    import sys

    from ...agents.contract.units import human_bytes
    from ...agents.workers.audit import s3_inventory
    from ...remote.fleet import S3_PRICE_PER_GB_MONTH
    from ..cost import dollars, s3_monthly

    price = args.s3_price_per_gb_month if args.s3_price_per_gb_month is not None else S3_PRICE_PER_GB_MONTH
    if not (price >= 0 and math.isfinite(price)):
        print(f"gpudeck audit: --s3-price-per-gb-month {price!r}: expected dollars, at least 0", file=sys.stderr)
        return EXIT_USAGE
    try:
        doc = s3_inventory(args.file, args.s3_endpoint)
    except ValueError as exc:
        print(f"gpudeck audit: {args.file}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as exc:
        print(f"gpudeck audit: {exc}", file=sys.stderr)
        return EXIT_FAIL
    doc.update(price_per_gb_month=price, cost_per_month=s3_monthly(doc["bytes"], price))
    if args.json:
        print(json.dumps(doc, indent=1))
        return EXIT_OK
    print(f"{doc['prefix']}: {doc['objects']:,} objects, {human_bytes(doc['bytes'])}; "
          f"{dollars(doc['cost_per_month'])} a month at ${price:g}/GB-month")
    for f in doc["folders"]:
        if f["folder"]:
            print(f"  {f['folder']:<24} {f['objects']:>8,} objects  {human_bytes(f['bytes']):>10}")
    return EXIT_OK
