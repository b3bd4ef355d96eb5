"""generate's options: the command-line flags and the :class:`Options` they make (stdlib
only, so that the console can build its parser without aiohttp)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Optional

from ...contract.units import parse_duration
from ..common.audit_gate import AUDIT_SAMPLE
from .prompts import MAX_PROMPT_BYTES
from .servers import UsageError, normalize_server

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_TERM = 0, 1, 2, 143


@dataclass
class Options:
    prompts: str
    out: str
    servers: list[str]
    concurrency: int = 64
    max_tokens: int = 4096
    model: Optional[str] = None  # None: the first id the first server lists at /v1/models
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    thinking: Optional[bool] = None
    extra_body: dict = field(default_factory=dict)
    s3: Optional[str] = None
    s3_endpoint: Optional[str] = None
    force: bool = False
    progress: Optional[str] = None
    shard_size: int = 1000
    request_timeout_s: float = 1800.0
    connect_timeout_s: float = 10.0
    max_attempts: int = 8
    fail_threshold: int = 3
    rest_s: float = 5.0
    max_rest_s: float = 60.0
    flush_interval_s: float = 0.2
    progress_interval_s: float = 1.0
    s3_drain_timeout_s: Optional[float] = None  # None: $GPUDECK_S3_DRAIN_S, default 600
    audit_sample: int = AUDIT_SAMPLE
    max_prompt_bytes: int = MAX_PROMPT_BYTES
    dedupe: Optional[str] = None  # None: refuse a file with duplicate ids; "first": keep the first of each
    give_up_after_s: Optional[float] = 600.0  # no server answering this long: stop (exit 1); None: never


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompts", required=True, help="JSONL of prompts (OpenAI chat or ShareGPT)")
    p.add_argument("--out", required=True, help="output directory: shards, done.txt, progress")
    p.add_argument("--server", action="append", required=True, dest="servers", metavar="URL",
                   help="an OpenAI-compatible server (repeat for several), e.g. http://127.0.0.1:30000")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight per server (default 64)")
    p.add_argument("--max-tokens", type=int, default=4096, help="most tokens per completion (default 4096)")
    p.add_argument("--model", default=None,
                   help="the model name sent with each request (default: what the first server lists at /v1/models)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default: the server's)")
    p.add_argument("--top-p", type=float, help="nucleus sampling's top_p (default: the server's)")
    p.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="chat_template_kwargs.enable_thinking (default: the server's own default)")
    p.add_argument("--extra-body", default=None, metavar="JSON", help="more request fields, e.g. '{\"top_k\": 20}'")
    p.add_argument("--s3", metavar="s3://bucket/prefix", help="upload closed shards and the done-set there")
    p.add_argument("--s3-endpoint", metavar="URL", help="an S3-compatible endpoint (default: AWS)")
    p.add_argument("--force", action="store_true", help="go on even when the audit finds the prompts degenerate")
    p.add_argument("--progress", help="progress.json path (default $GPUDECK_PROGRESS_FILE, else OUT/progress.json)")
    p.add_argument("--shard-size", type=int, default=1000, help="records per output shard (default 1000)")
    p.add_argument("--request-timeout", type=float, default=1800.0, help="seconds for one completion")
    p.add_argument("--max-attempts", type=int, default=8, help="attempts per prompt before it counts as failed")
    p.add_argument("--max-prompt-bytes", type=int, default=MAX_PROMPT_BYTES,
                   help="a prompt line longer than this is a bad prompt line, skipped without being read whole "
                        f"(default {MAX_PROMPT_BYTES})")
    p.add_argument("--give-up-after", default="10m", metavar="TIME",
                   help="stop (exit 1) when no server has answered for this long: 90s, 10m, 2h; "
                        "0 or 'never' waits forever (default 10m)")
    p.add_argument("--dedupe", choices=("first",), default=None,
                   help="prompt lines that repeat an earlier id: keep the first (default: refuse the file)")


def options_from_args(args: argparse.Namespace) -> Options:
    try:
        extra = json.loads(args.extra_body) if args.extra_body else {}
        if not isinstance(extra, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        raise UsageError(f"--extra-body: {exc}") from None
    if args.concurrency < 1 or args.shard_size < 1 or args.max_attempts < 1 or args.max_prompt_bytes < 1:
        raise UsageError("--concurrency, --shard-size, --max-attempts and --max-prompt-bytes must be at least 1")
    if args.s3:
        from ..common.s3sync.remote import S3Location
        try:
            S3Location.parse(args.s3)
        except ValueError as exc:
            raise UsageError(f"--s3: {exc}") from None
    servers = list(dict.fromkeys(normalize_server(u) for u in args.servers))
    try:
        give_up = parse_duration(str(getattr(args, "give_up_after", "10m")), never=True)
    except ValueError as exc:
        raise UsageError(f"--give-up-after: {exc}") from None
    return Options(prompts=args.prompts, out=args.out, servers=servers, concurrency=args.concurrency,
                   max_tokens=args.max_tokens, model=args.model, temperature=args.temperature, top_p=args.top_p,
                   thinking=args.thinking, extra_body=extra, s3=args.s3, s3_endpoint=args.s3_endpoint,
                   force=args.force, progress=args.progress, shard_size=args.shard_size,
                   request_timeout_s=args.request_timeout, max_attempts=args.max_attempts,
                   max_prompt_bytes=args.max_prompt_bytes, dedupe=args.dedupe, give_up_after_s=give_up)
