"""``gpudeck sim-engine``: a simulated SGLang server for tests, benchmarks and the demo."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .common import EXIT_OK

if TYPE_CHECKING:
    import argparse

    from .common import Subparsers


def register(sub: Subparsers) -> None:
    from ...agents.workers.sim_engine import add_arguments  # argparse only; aiohttp loads when serving

    p = sub.add_parser("sim-engine", help="a simulated SGLang server (real HTTP, SGLang metric names)",
                       description="Serve /v1/chat/completions (with reasoning_content), /metrics, /health, "
                                   "/get_server_info and /v1/models like SGLang, with made-up answers.")
    add_arguments(p)
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    import asyncio

    from ...agents.workers.sim_engine import serve
    return asyncio.run(serve(args)) or EXIT_OK
