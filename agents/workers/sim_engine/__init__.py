"""A simulated SGLang server: real HTTP (aiohttp), the routes and metric names of the real
thing, answers made up from the prompt. For tests, benchmarks and the demo.

Routes::

    POST /v1/chat/completions   OpenAI chat; ``reasoning_content`` unless thinking is off;
                                ``"stream": true``: server-sent events as SGLang sends them
    GET  /metrics               the sglang:* names of tests/fixtures (prometheus_client)
    GET  /health                503 for --startup-s seconds, then 200
    GET  /get_server_info       also /server_info: internal_states[].last_gen_throughput
    GET  /get_model_info        also /model_info
    GET  /v1/models

Each completion takes ``latency ± jitter`` plus its decode time: ``tokens / tok_s`` seconds
(``--tok-s 0``: none), or, with ``--batch-tok-s T``, a share of the server's T tokens/s
among the requests running, so that throughput depends on concurrency (decode.py). Its
length is drawn from the prompt's hash, so the same prompt always gets the same answer:
uniform over ``--out-tokens``, or log-normal with ``--out-median``/``--out-sigma`` (a
thinking-like heavy tail). ``--fail-rate F`` answers a fraction F of requests with one of the failure
kinds in ``--fail-kinds``: an HTTP 500, a 200 whose body is not JSON, or a connection closed
without an answer. ``--junk KIND`` answers with junk (a thinking trace cut at max_tokens, an
empty answer, reasoning with no answer, a loop), for ``--junk-rate`` of the prompts, once
``--junk-after`` completions were served (a run that degrades mid-way).

Run it as ``gpudeck sim-engine --port N`` or ``python -m gpudeck.agents.workers.sim_engine``. It
prints ``listening on http://HOST:PORT`` once it accepts connections (``--port 0`` picks a
free port).
"""

from .cli import add_arguments, build_parser, main, serve
from .failures import FAIL_KINDS

__all__ = ["FAIL_KINDS", "add_arguments", "build_parser", "main", "serve"]
