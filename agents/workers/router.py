"""The ``router`` job kind: SGLang's router (the ``sglang-router`` package, a Rust load
balancer with health checks, retries and circuit breakers) in front of the fleet's
``sglang-server`` jobs. ``generate`` targets its URL like any server.

Fleet file::

    [[jobs]]
    name = "router"
    kind = "router"
    port = 30100                                   # where clients connect
    metrics_url = "http://127.0.0.1:29100/metrics" # its --prometheus-port; the agent scrapes smg_* there
    workers = ["sglang-0", "sglang-1"]             # engine jobs (or URLs), resolved by remote/fleet.py
    router_args = ["--policy", "power_of_two"]

Without ``metrics_url`` the router serves its metrics on its default port (29000). Two
routers on one node need distinct metrics ports.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

DEFAULT_PORT = 30000


def build_argv(spec: Any, python: str) -> list[str]:
    """``python -m sglang_router.launch_router --worker-urls ...`` from the spec."""
    from ..contract.jobs import SpecError

    o = spec.options
    workers = o.get("workers") or []
    if isinstance(workers, str):
        workers = [workers]
    if not workers:
        raise SpecError(f"job {spec.name!r}: kind 'router' needs 'workers' (engine jobs or URLs)")
    argv = [python, "-m", "sglang_router.launch_router", "--host", spec.host, "--port", str(spec.port or DEFAULT_PORT),
            "--worker-urls", *[str(w) for w in workers]]
    if spec.metrics_url:
        parts = urlsplit(spec.metrics_url)
        if not parts.port:
            raise SpecError(f"job {spec.name!r}: 'metrics_url' {spec.metrics_url!r} needs an explicit port "
                            f"(the router's --prometheus-port)")
        argv += ["--prometheus-host", parts.hostname or "127.0.0.1", "--prometheus-port", str(parts.port)]
    extra = o.get("router_args") or []
    if isinstance(extra, str):
        import shlex
        extra = shlex.split(extra)
    return argv + [str(a) for a in extra] + list(spec.args)
