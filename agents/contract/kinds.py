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
for one release (``old_key``, ``old_flag``), with a deprecation warning.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import types
import typing
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional, Union

from .units import parse_duration

MISSING = dataclasses.MISSING


class OptionError(ValueError):
    """An option's value that does not fit; the text names the option (fleet key or flag), and
    ``key`` is that fleet key where there is one (the fleet parser points at its line)."""

    def __init__(self, message: str, key: Optional[str] = None) -> None:
        super().__init__(message)
        self.key = key


class BadValue(ValueError, argparse.ArgumentTypeError):
    """A value a parser below refuses: argparse shows its text as it is."""


def option(default: Any = MISSING, *, help: str = "", flag: Optional[str] = None, fleet: bool = True,
           cli: bool = True, required: bool = False, parse: Optional[Callable[[str], Any]] = None,
           show: Optional[Callable[[Any], str]] = None, metavar: Optional[str] = None,
           choices: Optional[tuple[str, ...]] = None, old_key: Optional[str] = None, old_flag: Optional[str] = None,
           from_spec: Optional[str] = None, body: Optional[str] = None, default_factory: Any = MISSING) -> Any:
    """One option of a kind.

    ``flag``: its command-line flag (default: ``--`` and the name with dashes). ``fleet``: the
    fleet file may set it (under its name). ``cli``: the worker takes it on its command line.
    ``parse``: text (a flag's value, or a fleet value given as a string) to the value; ``show``:
    the value back to a flag's text. ``from_spec``: a fleet job gives it as this field of its
    JobSpec (``model``, ``progress``), not as an option of the kind. ``body``: the worker sends it
    in each request's body under this name (generate's sampling options), when it is set.
    """
    meta = {"help": help, "flag": flag, "fleet": fleet and from_spec is None, "cli": cli, "required": required,
            "parse": parse, "show": show, "metavar": metavar, "choices": choices, "old_key": old_key,
            "old_flag": old_flag, "from_spec": from_spec, "body": body}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=None if default is MISSING else default, metadata=meta)  # a required one: None until set


def _flag(f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _base(tp: Any) -> tuple[Any, bool]:
    """(the type inside Optional, whether None is allowed)."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if len(args) == 1 else Any), type(None) in typing.get_args(tp)
    return tp, False


class KindOptions:
    """The base of each kind's options; see the module's docstring."""

    kind: ClassVar[str]
    module: ClassVar[Optional[str]] = None  # the worker run as `python -m module`; None: argv() is the kind's own

    # ------------------------------------------------------------ the fields

    @classmethod
    def _fields(cls) -> list[tuple[dataclasses.Field[Any], Any]]:
        hints = typing.get_type_hints(cls)
        return [(f, hints[f.name]) for f in dataclasses.fields(typing.cast(Any, cls))]

    @classmethod
    def fleet_keys(cls) -> tuple[str, ...]:
        """The keys a fleet file's job of this kind may hold besides the JobSpec's own."""
        return tuple(f.name for f, _ in cls._fields() if f.metadata.get("fleet"))

    @classmethod
    def old_keys(cls) -> dict[str, str]:
        """Old spelling -> the key, still read for one release."""
        return {f.metadata["old_key"]: f.name for f, _ in cls._fields() if f.metadata.get("old_key")}

    @classmethod
    def required_keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f, _ in cls._fields() if f.metadata.get("required") and f.metadata.get("fleet"))

    # ------------------------------------------------------------ the fleet file

    @classmethod
    def from_fleet(cls, raw: dict[str, Any], where: str = "", said: Optional[list[str]] = None,
                   required: bool = True) -> "KindOptions":
        """The options from a fleet job's keys (those not JobSpec fields); OptionError names a
        key it does not know or a value that does not fit. An old spelling is read as the new
        one and a line for ``said`` (or a DeprecationWarning) says so."""
        where = where or f"kind {cls.kind!r}"
        fields = {f.name: (f, tp) for f, tp in cls._fields() if f.metadata.get("fleet")}
        old = cls.old_keys()
        values: dict[str, Any] = {}
        for key, value in raw.items():
            name = old.get(key, key)
            if name not in fields:
                raise OptionError(f"{where}: no key {key!r}; expected one of {', '.join(sorted(fields))}", key)
            if name != key:
                note = f"{where}: {key!r} is the old spelling of {name!r}; it is read for one more release"
                said.append(note) if said is not None else warnings.warn(note, DeprecationWarning, stacklevel=2)
                if name in raw:
                    raise OptionError(f"{where}: {key!r} and {name!r} are one option; give {name!r} alone", key)
            f, tp = fields[name]
            try:
                values[name] = _fleet_value(f, tp, value, f"{where} {name!r}")
            except OptionError as exc:
                raise OptionError(str(exc), key) from None
        missing = [k for k in cls.required_keys() if values.get(k) in (None, [], "")]
        if missing and required:
            raise OptionError(f"{where}: kind {cls.kind!r} needs {', '.join(repr(k) for k in missing)}")
        try:
            return cls(**values)  # type: ignore[call-arg]
        except TypeError as exc:
            raise OptionError(f"{where}: {exc}") from None

    def fleet_dict(self) -> dict[str, Any]:
        """The options by fleet key (the wire's form of JobSpec.options)."""
        out = {}
        for f, _ in self._fields():
            if f.metadata.get("fleet"):
                v = getattr(self, f.name)
                if v is None and f.default is None:  # not set (a job with its own command has no prompts)
                    continue
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    def __plain__(self) -> dict[str, Any]:
        return self.fleet_dict()

    def request_fields(self) -> dict[str, Any]:
        """The options a worker sends in each request's body (``body=``), those that are set."""
        return {f.metadata["body"]: getattr(self, f.name) for f, _ in self._fields()
                if f.metadata.get("body") and getattr(self, f.name) is not None}

    # ------------------------------------------------------------ the command line

    @classmethod
    def add_arguments(cls, p: argparse.ArgumentParser) -> None:
        """Every option of the worker's command line, from the fields."""
        for f, tp in cls._fields():
            m = f.metadata
            if not m.get("cli"):
                continue
            base, _ = _base(tp)
            flags = [_flag(f)] + ([m["old_flag"]] if m.get("old_flag") else [])
            kw: dict[str, Any] = {"dest": f.name, "help": m.get("help") or argparse.SUPPRESS}
            if m.get("old_flag"):
                kw["action"] = _warn_old(m["old_flag"], _flag(f), append=typing.get_origin(base) is list)
            if base is bool:
                if f.default is None:
                    kw["action"], kw["default"] = argparse.BooleanOptionalAction, None
                else:
                    kw["action"], kw["default"] = ("store_false" if f.default else "store_true"), f.default
                    if f.default:  # a flag that turns a default-on option off
                        flags = [m.get("flag") or "--no-" + f.name.replace("_", "-")]
                p.add_argument(*flags, **kw)
                continue
            if typing.get_origin(base) is list and m.get("parse") is None:  # a flag given once per item
                kw.setdefault("action", "append")
                kw["default"] = None
                kw["type"] = typing.get_args(base)[0]
            else:
                kw["type"] = m.get("parse") or (base if base in (int, float, str) else str)
                kw["default"] = f.default if f.default is not MISSING else None
            kw["required"] = bool(m.get("required"))
            if m.get("metavar"):
                kw["metavar"] = m["metavar"]
            if m.get("choices"):
                kw["choices"] = m["choices"]
            p.add_argument(*flags, **kw)

    @classmethod
    def from_args(cls, args: argparse.Namespace, **more: Any) -> "KindOptions":
        values = {f.name: getattr(args, f.name) for f, _ in cls._fields() if f.metadata.get("cli")
                  and hasattr(args, f.name)  # None: not given, for a list (its factory's empty one)
                  and not (getattr(args, f.name) is None and f.default_factory is not MISSING)}
        return cls(**{**values, **more})  # type: ignore[call-arg]

    def argv(self, spec: Any, python: str) -> list[str]:
        """The command line of a fleet job of this kind: ``python -m module`` and a flag for
        each option set (and each taken from the spec), then the spec's ``args``."""
        argv = [python, "-m", str(self.module)]
        for f, tp in self._fields():
            m = f.metadata
            if not m.get("cli") or not (m.get("fleet") or m.get("from_spec")):
                continue
            value = getattr(spec, m["from_spec"]) if m.get("from_spec") else getattr(self, f.name)
            if m.get("required") and value in (None, [], ""):
                raise OptionError(f"job {spec.name!r}: kind {self.kind!r} needs {m.get('from_spec') or f.name!r}")
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            if m.get("from_spec") is None and not m.get("required") and value == default:
                continue
            if value is None and m.get("show") is None:
                continue
            base, _ = _base(tp)
            if base is bool:
                if f.default is None:  # --thinking / --no-thinking
                    argv.append(_flag(f) if value else "--no-" + _flag(f)[2:])
                elif f.default:  # on unless turned off: --no-audit
                    argv.append(m.get("flag") or "--no-" + f.name.replace("_", "-"))
                else:  # off unless turned on: --force
                    argv.append(_flag(f))
                continue
            if typing.get_origin(base) is list and m.get("show") is None:  # one flag per item: --server
                for v in value:
                    argv += [_flag(f), str(v)]
            else:
                argv += [_flag(f), (m.get("show") or str)(value)]
        return argv + list(spec.args)


def _warn_old(old: str, new: str, append: bool) -> type:
    class OldFlag(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: Optional[str] = None) -> None:
            if option_string == old:
                print(f"warning: {old} is the old spelling of {new}; it is read for one more release", file=sys.stderr)
            if append:
                values = (getattr(namespace, self.dest) or []) + [values]
            setattr(namespace, self.dest, values)
    return OldFlag


def _fleet_value(f: dataclasses.Field[Any], tp: Any, value: Any, where: str) -> Any:
    base, optional = _base(tp)
    m = f.metadata
    if value is None and optional:
        return None
    if typing.get_origin(base) is list:
        inner = typing.get_args(base)[0]
        if isinstance(value, str) and m.get("parse") is not None:  # "1,7,14": the whole list as text
            try:
                return m["parse"](value)
            except ValueError as exc:
                raise OptionError(f"{where}: {exc}") from None
        items = value if isinstance(value, list) else [value]
        item = {**m, "parse": None}  # the parse is the whole list's
        return [_scalar(inner, item, v, f"{where}[{i}]") for i, v in enumerate(items)]
    return _scalar(base, m, value, where)


def _scalar(tp: Any, m: Any, value: Any, where: str) -> Any:
    parse = m.get("parse")
    if parse is not None and isinstance(value, str):
        try:
            return parse(value)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise OptionError(f"{where}: {exc}") from None
    if m.get("choices") and value not in m["choices"]:
        raise OptionError(f"{where}: expected one of {', '.join(m['choices'])}, got {value!r}")
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is Any or (isinstance(tp, type) and isinstance(value, tp) and not (tp is int and isinstance(value, bool))):
        return value
    if typing.get_origin(tp) is dict and isinstance(value, dict):
        return value
    if typing.get_origin(tp) is tuple and isinstance(value, (list, tuple)):
        return tuple(value)
    if parse is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return parse(str(value))
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise OptionError(f"{where}: {exc}") from None
    name = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(tp, str(tp))
    raise OptionError(f"{where}: expected {name}, got {value!r}")


# ---------------------------------------------------------------- parsers and printers


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise BadValue(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadValue("not a JSON object")
    return value


def duration_or_never(text: str) -> Optional[float]:
    try:
        return parse_duration(text, never=True)
    except ValueError as exc:
        raise BadValue(str(exc)) from None


def show_seconds(value: Optional[float]) -> str:
    return "never" if value is None else f"{value:g}"


def layers(text: str) -> list[int]:
    """``"1,7,14"`` (or a fleet file's ``[1, 7, 14]``) as layer indices; negatives count from the end."""
    try:
        out = [int(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        raise BadValue(f"{text!r}: expected comma-separated integers like 1,7,14") from None
    if not out:
        raise BadValue("give at least one layer")
    return out


def show_layers(value: list[int]) -> str:
    return ",".join(map(str, value))


def part(text: str) -> tuple[int, int]:
    """``"I/N"``: part I of N, 0 <= I < N."""
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise BadValue(f"{text!r}: expected I/N, like 0/4") from None
    if not (n >= 1 and 0 <= i < n):
        raise BadValue(f"{text!r}: need 0 <= I < N")
    return i, n


def show_part(value: tuple[int, int]) -> str:
    return f"{value[0]}/{value[1]}"


def size(text: str) -> int:
    """``2G``, ``512M``, ``1.5G`` or bytes."""
    t = str(text).strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(t[-1:], 1)
    try:
        value = int(float(t[:-1] if scale > 1 else t) * scale)
    except ValueError:
        raise BadValue(f"{text!r}: expected a size like 2G, 512M or 1000000") from None
    if value < 1:
        raise BadValue(f"{text!r}: expected a size above 0")
    return value


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
    concurrency: int = option(64, help="requests in flight per server (default 64)")
    max_tokens: int = option(4096, help="most tokens per completion (default 4096)")
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
    shard_size: int = option(1000, help="records per output shard (default 1000)")
    request_timeout: float = option(1800.0, help="seconds for one completion (default 1800)")
    max_attempts: int = option(8, help="attempts per prompt before it counts as failed (default 8)")
    max_prompt_bytes: int = option(DEFAULT_PROMPT_BYTES,
                                   help="a prompt line longer than this is a bad prompt line, skipped without being "
                                        f"read whole (default {DEFAULT_PROMPT_BYTES})")
    give_up_after: Optional[float] = option(600.0, parse=duration_or_never, show=show_seconds, metavar="TIME",
                                            help="stop (exit 1) when no server has answered for this long: 90s, "
                                                 "10m, 2h; 0 or 'never' waits forever (default 10m)")
    dedupe: Optional[str] = option(None, choices=("first",),
                                   help="prompt lines that repeat an earlier id: keep the first (default: refuse "
                                        "the file)")
    # the worker's own settings: neither flags nor fleet keys
    connect_timeout_s: float = option(10.0, fleet=False, cli=False)
    fail_threshold: int = option(3, fleet=False, cli=False)
    rest_s: float = option(5.0, fleet=False, cli=False)
    max_rest_s: float = option(60.0, fleet=False, cli=False)
    flush_interval_s: float = option(0.2, fleet=False, cli=False)
    progress_interval_s: float = option(1.0, fleet=False, cli=False)
    s3_drain_timeout_s: Optional[float] = option(None, fleet=False, cli=False)  # None: $GPUDECK_S3_DRAIN_S, 600
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
    max_tokens_per_batch: int = option(32768, help="token budget of one forward pass (batch size x padded length); "
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
    shard_samples: int = option(1000, help="close a shard at this many samples (default 1000)")
    max_seq_len: Optional[int] = option(None, help="truncate longer samples (counted as 'truncated'); also caps the "
                                                    "model's context and --max-tokens-per-batch for one sample "
                                                    "(without it, a longer sample is refused)")
    dedupe: Optional[str] = option(None, choices=("first",),
                                   help="records that repeat an earlier id: keep the first (default: refuse the input)")
    compile: Optional[bool] = option(None, help="torch.compile the decoder layers (default: on for CUDA; --no-compile: "
                                                "run them uncompiled)")
    generic_forward: bool = option(False, help="use the model's own forward (all layers) instead of the fast path")
    host_buffers: int = option(4, help="pinned host buffers in flight (default 4)")
    writers: int = option(8, help="shards written and fsynced at once (default 8: on the H200 node 8 kept its disk "
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
        workers = ["sglang-0", "sglang-1"]             # engine jobs (or URLs), resolved by remote/fleet.py
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


BY_KIND: dict[str, type[KindOptions]] = {c.kind: c for c in (GenerateOptions, ExtractOptions, RouterOptions)}
