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
                                "user turn), generated records, or tokenized (input_ids + loss_mask)")
    p.add_argument("--prompts", action="store_true",
                   help="audit as prompts for `gpudeck generate` (answers will be generated again); the default "
                        "when no sample has an answer")
    p.add_argument("--sample", type=int, default=None, metavar="N",
                   help="read about N lines spread over the file instead of all of it")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=_run)


def _run(args) -> int:
    import json
    import sys

    from ...agents.workers.audit import audit_file

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
