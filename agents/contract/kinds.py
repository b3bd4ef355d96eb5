"""Each built-in job kind's options as one dataclass: the single source of its fleet keys,
its command-line flags and the argv the node runs.

A field is one option. Its metadata (made by :func:`option`) says its flag, its help, whether
the fleet file may set it, and how a value is read from text (``parse``) and written back on
a command line (``show``). From the dataclass come:

- the fleet parser's keys for ``kind = "generate"`` etc. (:meth:`KindOptions.from_fleet`,
  which checks each value's type and names a key it does not know),
- the worker's argparse (:meth:`KindOptions.add_arguments`, :meth:`KindOptions.from_args`),
- the command line of a fleet job (:meth:`KindOptions.argv`).

Adding an option is adding a field. An option once spelled otherwise keeps its old spelling
for one release (``old_key``, ``old_flag``), with a deprecation warning. How a field becomes all
of that is :mod:`.options`.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from .options import (BadValue, KindOptions, OptionError, duration_or_never, json_object, layers, option, part,
                      show_layers, show_part, show_seconds, size)

__all__ = ["BY_KIND", "DEFAULT_AUDIT_SAMPLE", "DEFAULT_PROMPT_BYTES", "ExtractOptions", "GenerateOptions",
           "KindOptions", "LlamaServerOptions", "OptionError", "RouterOptions", "option"]

# ---------------------------------------------------------------- the kinds


DEFAULT_PROMPT_BYTES = 1 << 20  # a prompt line longer than this is refused unread (generate/prompts.py)
DEFAULT_AUDIT_SAMPLE = 20000  # lines the data audit reads before a start (workers/common/audit_gate.py)


@dataclass
class GenerateOptions(KindOptions):
    """``kind = "generate"``: completions for a JSONL of prompts from OpenAI-compatible servers."""

    kind: ClassVar[str] = "generate"
    module: ClassVar[Optional[str]] = "gpudeck.agents.workers.generate"

    prompts: str = option(required=True, help="JSONL of prompts (OpenAI chat or ShareGPT)")
    out: str = option(required=True, help="output directory: shards, done.txt, progress")
    servers: list[str] = option(required=True, flag="--server", metavar="URL", default_factory=list,
                                help="an OpenAI-compatible server (repeat for several), e.g. http://127.0.0.1:30000; "
                                     "in a fleet file also the name of an engine job")
    concurrency: int = option(64, min=1, help="requests in flight per server (default 64)")
    max_tokens: int = option(4096, min=1, help="most tokens per completion (default 4096)")
    model_name: Optional[str] = option(None, old_flag="--model",
                                       help="the model name sent with each request (default: what the first server "
                                            "lists at /v1/models)")
    temperature: Optional[float] = option(None, body="temperature", help="sampling temperature (default: the server's)")
    top_p: Optional[float] = option(None, body="top_p", help="nucleus sampling's top_p (default: the server's)")
    top_k: Optional[int] = option(None, body="top_k", help="top-k sampling (default: the server's)")
    thinking: Optional[bool] = option(None, help="chat_template_kwargs.enable_thinking (default: the server's own "
                                                 "default)")
    extra_body: dict[str, Any] = option(default_factory=dict, parse=json_object, show=json.dumps, metavar="JSON",
                                        help="more request fields, e.g. '{\"top_k\": 20}'")
    s3: Optional[str] = option(None, metavar="s3://bucket/prefix",
                               help="upload closed shards and the done-set there")
    s3_endpoint: Optional[str] = option(None, metavar="URL", help="an S3-compatible endpoint (default: AWS)")
    force: bool = option(False, help="go on even when the audit finds the prompts degenerate")
    progress: Optional[str] = option(None, fleet=False,
                                     help="progress.json path (default $GPUDECK_PROGRESS_FILE, else OUT/progress.json)")
    shard_size: int = option(1000, min=1, help="records per output shard (default 1000)")
    request_timeout: float = option(1800.0, min=0.001, help="seconds for one completion (default 1800)")
    max_attempts: int = option(8, min=1, help="attempts per prompt before it counts as failed (default 8)")
    max_prompt_bytes: int = option(DEFAULT_PROMPT_BYTES, min=1,
                                   help="a prompt line longer than this is a bad prompt line, skipped without being "
                                        f"read whole (default {DEFAULT_PROMPT_BYTES})")
    give_up_after: Optional[float] = option(600.0, parse=duration_or_never, show=show_seconds, metavar="TIME",
                                            help="stop (exit 1) when no server has answered for this long: 90s, "
                                                 "10m, 2h; 0 or 'never' waits forever (default 10m)")
    dedupe: Optional[str] = option(None, choices=("first",),
                                   help="prompt lines that repeat an earlier id: keep the first (default: refuse "
                                        "the file)")
    part: Optional[tuple[int, int]] = option(None, parse=part, show=show_part, metavar="I/N",
                                             help="I/N: take only the prompts of part I of N (one job per array "
                                                  "task), chosen by a hash of the prompt's id as extract's --part; "
                                                  "output goes to OUT/part-I-of-N, uploads under the S3 prefix "
                                                  "part-I-of-N")
    min_useful_pct: float = option(50.0, min=0, max=100, metavar="PCT",
                                   help="a run that ends with fewer useful records than this share (0 to 100) of "
                                        "those counted exits 4 and writes _QUALITY instead of _SUCCESS (default 50; "
                                        "0: never)")
    # the worker's own settings: neither flags nor fleet keys
    connect_timeout_s: float = option(10.0, fleet=False, cli=False)
    fail_threshold: int = option(3, fleet=False, cli=False)
    rest_s: float = option(5.0, fleet=False, cli=False)
    max_rest_s: float = option(60.0, fleet=False, cli=False)
    flush_interval_s: float = option(0.2, fleet=False, cli=False)
    progress_interval_s: float = option(1.0, fleet=False, cli=False)
    s3_drain_timeout_s: Optional[float] = option(None, fleet=False, cli=False)  # None: $GPUDECK_S3_DRAIN_S, 600
    fence_interval_s: float = option(5.0, fleet=False, cli=False)  # how often the attempt id is read (fencing)
    audit_sample: int = option(DEFAULT_AUDIT_SAMPLE, fleet=False, cli=False)


@dataclass
class ExtractOptions(KindOptions):
    """``kind = "extract"``: hidden states of chosen layers into safetensors shards."""

    kind: ClassVar[str] = "extract"
    module: ClassVar[Optional[str]] = "gpudeck.agents.workers.extract"

    model: str = option(required=True, from_spec="model", help="model directory (transformers format)")
    data: str = option(required=True, help="tokenized JSONL (input_ids, loss_mask) or chat JSONL, or a directory of "
                                          "the generation worker's shard-*.jsonl")
    out: str = option(required=True, help="output directory (shards, index.jsonl, done.txt)")
    layers: list[int] = option(required=True, parse=layers, show=show_layers, default_factory=list,
                               help="layers to keep, counted like output_hidden_states: 0 = embeddings, L = output of "
                                    "decoder layer L (e.g. 1,7,14,21,27)")
    max_tokens_per_batch: int = option(32768, min=1, help="token budget of one forward pass (batch size x padded length); "
                                                    "default 32768")
    device: str = option("cuda", help="cuda, cuda:N or cpu (default cuda)")
    dtype: str = option("bfloat16", help="bfloat16 (default), float16 or float32")
    s3: Optional[str] = option(None, help="s3://bucket/prefix: upload closed shards and the done-set; restore on a "
                                          "fresh node")
    s3_endpoint: Optional[str] = option(None, help="S3-compatible endpoint URL")
    force: bool = option(False, help="extract even when the data audit refuses the data")
    audit: bool = option(True, flag="--no-audit", help="skip the data audit")
    chat_template: Optional[str] = option(None, help="a jinja chat template (file or text) instead of the "
                                                     "tokenizer's")
    part: Optional[tuple[int, int]] = option(None, parse=part, show=show_part, metavar="I/N",
                                             help="I/N: take only the ids of part I of N (one job per GPU); output "
                                                  "goes to OUT/part-I-of-N")
    shard_bytes: int = option(2 << 30, parse=size, help="close a shard at this size (default 2G)")
    shard_samples: int = option(1000, min=1, help="close a shard at this many samples (default 1000)")
    max_seq_len: Optional[int] = option(None, min=1, help="truncate longer samples (counted as 'truncated'); also caps the "
                                                    "model's context and --max-tokens-per-batch for one sample "
                                                    "(without it, a longer sample is refused)")
    dedupe: Optional[str] = option(None, choices=("first",),
                                   help="records that repeat an earlier id: keep the first (default: refuse the input)")
    compile: Optional[bool] = option(None, help="torch.compile the decoder layers (default: on for CUDA; --no-compile: "
                                                "run them uncompiled)")
    cache_dir: Optional[str] = option(None, metavar="DIR",
                                      help="where compiled kernels and torch.compile's caches are kept, keyed by the "
                                           "model's shape, dtype, torch, Triton and GPU, so a restart on this node "
                                           "reuses them (default $GPUDECK_HOME/cache/compile, else "
                                           "~/.gpudeck/cache/compile; 'off': torch's own defaults)")
    generic_forward: bool = option(False, help="use the model's own forward (all layers) instead of the fast path")
    host_buffers: int = option(4, min=1, help="pinned host buffers in flight (default 4)")
    writers: int = option(8, min=1, help="shards written and fsynced at once (default 8: on the H200 node 8 kept its disk "
                                   "busier than 4 or 1)")
    compress: bool = option(False, help="store hidden states losslessly compressed (byte planes + zstd): about 0.67 of "
                                         "the bytes; open_extract reads them back bit for bit, other safetensors "
                                         "readers do not")
    disk_check: str = option("exit", choices=("exit", "warn", "off"),
                             help="when the projected output does not fit the free disk: exit (default, status 3), "
                                  "warn, off")
    peak_tflops: Optional[float] = option(None, help="the device's dense bf16 peak, for MFU, when not in the table")
    progress_file: Optional[str] = option(None, from_spec="progress",
                                          help="where to write progress.json (default $GPUDECK_PROGRESS_FILE, "
                                               "else OUT)")
    throttle_ms: float = option(0.0, fleet=False)  # tests only: sleep after each batch, so a kill lands mid-run
    progress_interval_s: float = option(2.0, fleet=False, cli=False)
    fence_interval_s: float = option(5.0, fleet=False, cli=False)  # how often the attempt id is read (fencing)


@dataclass
class RouterOptions(KindOptions):
    """The ``router`` job kind: SGLang's router (the ``sglang-router`` package, a Rust load
    balancer with health checks, retries and circuit breakers) in front of the fleet's
    ``sglang-server`` jobs. ``generate`` targets its URL like any server.

    Fleet file::

        [[jobs]]
        name = "router"
        kind = "router"
        port = 30100                                   # where clients connect
        metrics_url = "http://127.0.0.1:29100/metrics" # its --prometheus-port; the agent scrapes smg_* there
        workers = ["sglang-0", "sglang-1"]             # engine jobs (or URLs), resolved by remote/fleet_jobs.py
        router_args = ["--policy", "power_of_two"]

    Without ``metrics_url`` the router serves its metrics on its default port (29000). Two
    routers on one node need distinct metrics ports.
    """

    kind: ClassVar[str] = "router"
    module: ClassVar[Optional[str]] = "sglang_router.launch_router"

    workers: list[str] = option(required=True, cli=False, default_factory=list,
                                help="the engine servers: URLs, or names of engine jobs of the fleet")
    router_args: list[str] = option(default_factory=list, cli=False, parse=shlex.split,
                                    help="more arguments for sglang_router.launch_router")

    DEFAULT_PORT: ClassVar[int] = 30000

    def argv(self, spec: Any, python: str) -> list[str]:
        from urllib.parse import urlsplit

        argv = [python, "-m", str(self.module), "--host", spec.host, "--port", str(spec.port or self.DEFAULT_PORT),
                "--worker-urls", *self.workers]
        if spec.metrics_url:
            parts = urlsplit(spec.metrics_url)
            if not parts.port:
                raise OptionError(f"job {spec.name!r}: 'metrics_url' {spec.metrics_url!r} needs an explicit port "
                                  f"(the router's --prometheus-port)")
            argv += ["--prometheus-host", parts.hostname or "127.0.0.1", "--prometheus-port", str(parts.port)]
        return argv + list(self.router_args) + list(spec.args)


def _gpu_layers(text: object) -> object:
    """``gpu_layers``: a count of layers, or llama-server's own words ``auto`` and ``all``."""
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    if isinstance(text, str) and text in ("auto", "all"):
        return text
    if isinstance(text, str) and text.isdigit():
        return int(text)
    raise BadValue(f"expected a number of layers (0 or more), 'auto' or 'all', got {text!r}")


@dataclass
class LlamaServerOptions(KindOptions):
    """``kind = "llama-server"``: llama.cpp's HTTP server, a continuous-batching engine with an
    OpenAI API, Prometheus metrics (``llamacpp:*``, always on: ``--metrics``) and ``/slots``
    (the tokens each slot holds: the engine's KV use). Ready when ``/health`` answers 200.

    Fleet file::

        [[jobs]]
        name = "llama"
        kind = "llama-server"
        model = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"   # a GGUF file
        port = 8080
        binary = "/opt/llama.cpp/build/bin/llama-server"      # default: llama-server on the node's PATH
        slots = 64            # requests decoded at once (--parallel)
        context = 16384       # tokens each slot holds, prompt and completion (--ctx-size is context x slots)
        gpu_layers = "all"    # --n-gpu-layers: a count, "auto" or "all" (default: the server's own, auto)
        args = ["--threads", "8"]
    """

    kind: ClassVar[str] = "llama-server"

    binary: str = option("llama-server", cli=False,
                         help="the llama-server program: a path, or a name on the node's PATH (default llama-server)")
    slots: int = option(4, min=1, cli=False, help="requests decoded at once: --parallel (default 4)")
    context: int = option(4096, min=1, cli=False,
                          help="tokens each slot holds, prompt and completion; --ctx-size is context x slots "
                               "(default 4096)")
    gpu_layers: Optional[Any] = option(None, cli=False, parse=_gpu_layers,
                                       help="layers kept on the GPU: --n-gpu-layers N, 'auto' or 'all' (default: "
                                            "the server's own, auto)")

    DEFAULT_PORT: ClassVar[int] = 8080

    def __post_init__(self) -> None:
        if self.gpu_layers is not None:
            try:
                self.gpu_layers = _gpu_layers(self.gpu_layers)
            except BadValue as exc:
                raise OptionError(f"'gpu_layers': {exc}", "gpu_layers") from None
        if not isinstance(self.binary, str) or not self.binary:
            raise OptionError("'binary' must be the path or the name of the llama-server program", "binary")

    def argv(self, spec: Any, python: str) -> list[str]:
        if not spec.model:
            raise OptionError(f"job {spec.name!r}: kind 'llama-server' needs a 'model' (a GGUF file)")
        argv = [self.binary, "--model", str(spec.model), "--host", spec.host,
                "--port", str(spec.port or self.DEFAULT_PORT), "--parallel", str(self.slots),
                "--ctx-size", str(self.context * self.slots)]
        if self.gpu_layers is not None:
            argv += ["--n-gpu-layers", str(self.gpu_layers)]
        argv += list(spec.args)
        for flag in ("--metrics", "--slots"):  # the figures the agent reads: /metrics and /slots
            if flag not in argv:
                argv.append(flag)
        return argv


BY_KIND: dict[str, type[KindOptions]] = {c.kind: c for c in (GenerateOptions, ExtractOptions, RouterOptions,
                                                             LlamaServerOptions)}
