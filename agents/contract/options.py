"""How a job kind's options are declared (agents/contract/kinds.py holds the kinds): a field per
option, made by :func:`option`, in a dataclass that derives from :class:`KindOptions`. From the
fields come the fleet parser's keys (:meth:`KindOptions.from_fleet`), the worker's argparse
(:meth:`KindOptions.add_arguments`, :meth:`KindOptions.from_args`) and a fleet job's command line
(:meth:`KindOptions.argv`); the parsers and printers below turn values to and from text."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
import typing
import warnings
from dataclasses import field
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
           from_spec: Optional[str] = None, body: Optional[str] = None, default_factory: Any = MISSING,
           min: Optional[float] = None, max: Optional[float] = None) -> Any:
    """One option of a kind.

    ``flag``: its command-line flag (default: ``--`` and the name with dashes). ``fleet``: the
    fleet file may set it (under its name). ``cli``: the worker takes it on its command line.
    ``parse``: text (a flag's value, or a fleet value given as a string) to the value; ``show``:
    the value back to a flag's text. ``from_spec``: a fleet job gives it as this field of its
    JobSpec (``model``, ``progress``), not as an option of the kind. ``body``: the worker sends it
    in each request's body under this name (generate's sampling options), when it is set.
    ``min``, ``max``: the range of a number, held in one place for the fleet file (its error
    names the file and line) and the worker's command line (argparse refuses the flag).
    """
    meta = {"help": help, "flag": flag, "fleet": fleet and from_spec is None, "cli": cli, "required": required,
            "parse": parse, "show": show, "metavar": metavar, "choices": choices, "old_key": old_key,
            "old_flag": old_flag, "from_spec": from_spec, "body": body, "min": min, "max": max}
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
        except OptionError as exc:  # a kind's own check of its values (__post_init__), naming the key
            raise OptionError(f"{where} {exc}", exc.key) from None

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
                kw["type"] = _in_range(m, m.get("parse") or (base if base in (int, float, str) else str))
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


def _range_problem(m: Any, value: Any) -> Optional[str]:
    """What is wrong with ``value`` against the option's ``min``/``max``; None when it fits."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    lo, hi = m.get("min"), m.get("max")
    if lo is not None and value < lo:
        return f"must be at least {lo:g}" + (f" and at most {hi:g}" if hi is not None else "") + f", got {value!r}"
    if hi is not None and value > hi:
        return f"must be at most {hi:g}" + (f" and at least {lo:g}" if lo is not None else "") + f", got {value!r}"
    return None


def _in_range(m: Any, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse's ``type`` for an option with a range: the parse, then the range checked."""
    if m.get("min") is None and m.get("max") is None:
        return parse

    def checked(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:  # argparse's own "invalid int value: 'x'"
            raise argparse.ArgumentTypeError(f"invalid {getattr(parse, '__name__', 'value')} value: {text!r}") from None
        problem = _range_problem(m, value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value
    checked.__name__ = getattr(parse, "__name__", "value")
    return checked


def _scalar(tp: Any, m: Any, value: Any, where: str) -> Any:
    out = _scalar_value(tp, m, value, where)
    problem = _range_problem(m, out)
    if problem:
        raise OptionError(f"{where}: {problem}")
    return out


def _scalar_value(tp: Any, m: Any, value: Any, where: str) -> Any:
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
