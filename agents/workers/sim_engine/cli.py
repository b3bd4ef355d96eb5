"""The simulated server's command line (argparse only: aiohttp and prometheus_client load
in :func:`serve`); the package docstring says what it simulates."""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Optional

from .answer import JUNK_KINDS
from .failures import FAIL_KINDS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpudeck sim-engine", description="A simulated SGLang server (real HTTP).")
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, required=True, help="TCP port (0: a free one, printed at start)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--tok-s", type=float, default=0.0, help="decode speed per request in tokens/s (0: instant)")
    p.add_argument("--latency-ms", type=float, default=0.0, help="fixed time per request")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="uniform +- spread around --latency-ms")
    p.add_argument("--fail-rate", type=float, default=0.0, help="fraction of requests that fail")
    p.add_argument("--fail-kinds", default=",".join(FAIL_KINDS),
                   help=f"comma-separated failure kinds to draw from: {', '.join(FAIL_KINDS)}")
    p.add_argument("--model", default="sim-model", help="the served model name")
    p.add_argument("--startup-s", type=float, default=0.0,
                   help="seconds of /health 503 before ready, printing SGLang's loading lines meanwhile")
    p.add_argument("--shards", type=int, default=8,
                   help="checkpoint shards it says it loads during --startup-s, one SGLang progress line "
                        "each on stderr (default 8; 0: none)")
    p.add_argument("--out-tokens", default="16-96", help="completion length range MIN-MAX (tokens)")
    p.add_argument("--batch-tok-s", type=float, default=0.0,
                   help="decode tokens/s of the whole server, shared by the requests running: each decodes at "
                        "min(--tok-s, this / running) (0: no limit, every request at --tok-s)")
    p.add_argument("--out-median", type=float, default=None,
                   help="log-normal completion lengths with this median (a heavy tail, like thinking models), "
                        "clipped to --out-tokens; default: uniform over --out-tokens")
    p.add_argument("--out-sigma", type=float, default=1.0, help="the log-normal's sigma (default 1.0)")
    p.add_argument("--junk", choices=JUNK_KINDS, default=None,
                   help="answer with junk: cut (a thinking trace past max_tokens, finish_reason length), empty, "
                        "no-answer (reasoning only), loop (one phrase repeated)")
    p.add_argument("--junk-rate", type=float, default=1.0,
                   help="the share of the prompts (by their hash) answered with --junk (default 1: all)")
    p.add_argument("--junk-after", type=int, default=0,
                   help="completions served as usual before the junk begins: a run that degrades mid-way "
                        "(default 0)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the random latency jitter and failures (default: a new one each run)")


async def serve(args: argparse.Namespace) -> int:
    kinds = tuple(k.strip() for k in args.fail_kinds.split(",") if k.strip())
    bad = [k for k in kinds if k not in FAIL_KINDS]
    if bad or not kinds:
        raise SystemExit(f"sim-engine: --fail-kinds: unknown kind(s) {', '.join(bad) or '(none)'}; "
                         f"expected some of {', '.join(FAIL_KINDS)}")
    try:
        lo, hi = (int(x) for x in args.out_tokens.split("-"))
    except ValueError:
        raise SystemExit(f"sim-engine: --out-tokens {args.out_tokens!r}: expected MIN-MAX, e.g. 16-96") from None
    if args.out_median is not None and (args.out_median <= 0 or args.out_sigma < 0):
        raise SystemExit("sim-engine: --out-median must be > 0 and --out-sigma >= 0")
    from aiohttp import web
    from prometheus_client import disable_created_metrics

    from .app import SimEngine

    disable_created_metrics()  # SGLang serves its metrics in multiprocess mode: no *_created series
    engine = SimEngine(tok_s=args.tok_s, latency_ms=args.latency_ms, jitter_ms=args.jitter_ms,
                       fail_rate=args.fail_rate, fail_kinds=kinds, model=args.model, startup_s=args.startup_s,
                       out_tokens=(lo, hi), seed=args.seed, batch_tok_s=args.batch_tok_s,
                       out_median=args.out_median, out_sigma=args.out_sigma, junk=args.junk,
                       junk_rate=args.junk_rate, junk_after=args.junk_after)
    # SIGTERM drops the requests in flight within 0.2 s, as SGLang's own shutdown does: a kill
    # then frees the server's GPU memory at once (aiohttp would wait up to 60 s for them)
    runner = web.AppRunner(engine.app(), access_log=None, handle_signals=False, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, backlog=1024, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise SystemExit(f"sim-engine: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    port = runner.addresses[0][1]
    print(f"listening on http://{args.host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loading = loop.create_task(print_loading(args.startup_s, args.shards)) if args.startup_s > 0 else None
    got: list[int] = []

    def on_signal(s: int) -> None:
        got.append(s)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    await stop.wait()
    if loading is not None:
        loading.cancel()
    await runner.cleanup()
    return 130 if got[:1] == [signal.SIGINT] else 0  # ctrl-c: 130, as every gpudeck command


# SGLang's own bar (BAR_FORMAT in sglang/srt/utils/common.py) and its loader's description
# (sglang/srt/model_loader/weight_utils.py), as tqdm prints them on stderr after a carriage return
LOADING_DESC = "Loading safetensors checkpoint shards"


def loading_line(n: int, total: int, elapsed_s: float, total_s: float) -> str:
    """One of SGLang's loading lines: ``Loading safetensors checkpoint shards:  13% Completed |
    2/15 [00:05<00:32,  2.50s/it]``."""
    def clock(s: float) -> str:
        m, s = divmod(int(s), 60)
        return f"{m:02d}:{s:02d}"
    if n == 0:
        remaining, rate = "?", "?it/s"
    else:
        per = elapsed_s / n
        remaining, rate = clock(max(0.0, total_s - elapsed_s)), f"{per:5.2f}s/it" if per >= 1 else f"{1 / per:5.2f}it/s"
    return f"{LOADING_DESC}: {100 * n / total:3.0f}% Completed | {n}/{total} [{clock(elapsed_s)}<{remaining}, {rate}]"


async def print_loading(startup_s: float, shards: int) -> None:
    """SGLang's loading lines over ``startup_s``, one shard at a time, then its ready line."""
    import sys
    import time

    if shards > 0:
        t0 = time.monotonic()
        print(f"Load weight begin. avail mem={80.0:.2f} GB", file=sys.stderr, flush=True)
        for n in range(shards + 1):
            await asyncio.sleep(max(0.0, t0 + startup_s * n / (shards + 1) - time.monotonic()))
            sys.stderr.write("\r" + loading_line(n, shards, time.monotonic() - t0, startup_s * shards / (shards + 1)))
            sys.stderr.flush()
        sys.stderr.write("\n")
        print(f"Load weight end. elapsed={time.monotonic() - t0:.2f} s, type=SimModel", file=sys.stderr, flush=True)
        await asyncio.sleep(max(0.0, t0 + startup_s - time.monotonic()))
    print("The server is fired up and ready to roll!", file=sys.stderr, flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return asyncio.run(serve(args))
