"""Dataclasses to plain JSON data and back, checking types on the way in.

The wire (``wire``, ``ops``), the agent's files (kept verdicts, history) and the watcher's
events use it: ``to_plain`` turns a dataclass into dicts, lists and scalars; ``from_dict``
builds one from what ``json.loads`` gave, and says where and what is wrong when it does not
fit (:class:`ProtocolError`). No message type lives here: see ``wire``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from typing import Any, Callable, Optional, Union


class ProtocolError(ValueError):
    """A line that is not a valid message; the text says what is wrong with it."""


# what each type is, found once per type: a scalar (or a str enum: JSON writes its value), a
# dataclass (its encoder in _ENCODERS), a list, a dict; one dict lookup per value after that
_SCALAR, _DATACLASS, _LIST, _DICT, _OTHER = range(5)
_KINDS: dict[type, int] = {str: _SCALAR, int: _SCALAR, bool: _SCALAR, type(None): _SCALAR, list: _LIST, dict: _DICT}
_ENCODERS: dict[type, Callable[[Any], dict[str, Any]]] = {}
# fields whose declared type says they hold a scalar are copied as they are (None, or a
# float checked for NaN), without a call per field: most of a snapshot's fields
_COPY, _FLOAT, _DEEP = range(3)


def _field_way(hint: Any) -> int:
    union = typing.get_origin(hint) in (Union, types.UnionType)
    args = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]
    if len(args) == 1 and args[0] in (str, int, bool):
        return _COPY
    if len(args) == 1 and args[0] is float:
        return _FLOAT
    return _DEEP


def _encoder(cls: type) -> Callable[[Any], dict[str, Any]]:
    """A function that turns one ``cls`` into a dict, each field the way its type says."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation that cannot be resolved: every field the deep way
        hints = {}
    plan = tuple((f.name, _field_way(hints.get(f.name, Any))) for f in dataclasses.fields(cls))

    def encode_one(obj: Any) -> dict[str, Any]:
        out = {}
        for name, way in plan:
            v = getattr(obj, name)
            if way == _DEEP:
                out[name] = to_plain(v)
            elif way == _FLOAT and v is not None and v.__class__ is float and not math.isfinite(v):
                out[name] = None
            elif v is None or way == _FLOAT or v.__class__ in (str, int, bool):
                out[name] = v
            else:  # an enum, or something other than the declared type: the careful way
                out[name] = to_plain(v)
        return out

    return encode_one


def _kind(cls: type) -> int:
    if dataclasses.is_dataclass(cls):
        own = getattr(cls, "__plain__", None)  # a type with a plain form of its own (a job spec)
        _ENCODERS[cls] = (lambda obj: to_plain(obj.__plain__())) if own is not None else _encoder(cls)
        k = _DATACLASS
    elif issubclass(cls, (str, int)):
        k = _SCALAR
    elif issubclass(cls, list):
        k = _LIST
    elif issubclass(cls, dict):
        k = _DICT
    else:
        k = _OTHER
    _KINDS[cls] = k
    return k


def to_plain(obj: Any) -> Any:
    """A message as plain JSON data; like dataclasses.asdict, without its deep copies (a third
    of an agent tick went there). A NaN or an infinity becomes None: JSON has neither, and a
    job's progress file or an engine's /metrics page may hold them."""
    cls = type(obj)
    if cls is float:
        return obj if math.isfinite(obj) else None
    k = _KINDS.get(cls)
    if k is None:
        k = _kind(cls)
    if k == _SCALAR:
        return obj
    if k == _DATACLASS:
        return _ENCODERS[cls](obj)
    if k == _LIST:  # most lists hold plain values (pids, GPU indexes, argv): no call for those
        return [v if v.__class__ in _PLAIN else to_plain(v) for v in obj]
    if k == _DICT:
        return {key: v if v.__class__ in _PLAIN else to_plain(v) for key, v in obj.items()}
    return obj


_PLAIN = frozenset((str, int, bool, type(None)))


_T = typing.TypeVar("_T")


def quick_init(cls: type[_T]) -> type[_T]:
    """A frozen dataclass whose ``__init__`` fills the instance's dict directly. The one
    ``dataclass(frozen=True)`` writes sets each field through ``object.__setattr__``, a call per
    field: four times slower for the types built for every job and GPU at every tick (a
    JobStatus: 6 us against 1.6). Same signature, defaults, default factories and
    ``__post_init__``; the instance stays frozen. Put it above ``@dataclass``."""
    if not dataclasses.is_dataclass(cls) or "__slots__" in cls.__dict__:
        raise TypeError(f"quick_init: {cls.__name__} must be a dataclass without slots")
    fields = [f for f in dataclasses.fields(cls) if f.init]
    import inspect
    wanted = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    if wanted != [f.name for f in fields] or any(not f.init for f in dataclasses.fields(cls)) or \
            any(f.kw_only for f in fields):
        raise TypeError(f"quick_init: {cls.__name__} has fields it does not know how to set "
                        f"(init-only, keyword-only or not in __init__)")
    ns: dict[str, Any] = {"_MISSING": object()}
    params, body = [], ["    d = self.__dict__"]
    for f in fields:
        if f.default is not dataclasses.MISSING:
            ns[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
            body.append(f"    d[{f.name!r}] = {f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"_f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            body.append(f"    d[{f.name!r}] = _f_{f.name}() if {f.name} is _MISSING else {f.name}")
        else:
            params.append(f.name)
            body.append(f"    d[{f.name!r}] = {f.name}")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    exec(f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body), ns)  # noqa: S102 -- our own text
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    setattr(cls, "__init__", init)
    return cls


# how each dataclass is read, found once per type: its fields in order, each with its reader
# and whether it is required, then the readers by name and the required names; a reader takes
# (value, where, field name) and builds the place's name ("Snapshot.seq") only to say what is wrong
_Reader = Callable[[Any, str, str], Any]
_Plan = tuple[tuple[tuple[str, _Reader, bool], ...], dict[str, _Reader], tuple[str, ...]]
_PLANS: dict[type, _Plan] = {}


def from_dict(cls: type, obj: Any, where: str = "") -> Any:
    """Build dataclass ``cls`` from plain JSON data, checking types on the way. The object's own
    keys are read (a progress.json has 3 of ProgressDoc's 19 fields); when one is wrong or a
    required field missing, the fields are read again in their order, so the error said is the
    first field's, whatever the object's order."""
    where = where or cls.__name__
    if not isinstance(obj, dict):
        raise ProtocolError(f"{where}: expected an object, got {type(obj).__name__}")
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _plan(cls)
    _, readers, required = plan
    kwargs = {}
    try:
        for name, value in obj.items():
            read = readers.get(name)
            if read is not None:
                kwargs[name] = read(value, where, name)
    except Exception:  # noqa: BLE001 -- said below, field by field in order
        return _from_dict_in_order(cls, obj, where, plan)
    for name in required:
        if name not in kwargs:
            return _from_dict_in_order(cls, obj, where, plan)
    return cls(**kwargs)


def _from_dict_in_order(cls: type, obj: dict[str, Any], where: str, plan: _Plan) -> Any:
    kwargs = {}
    for name, read, required in plan[0]:
        if name in obj:
            kwargs[name] = read(obj[name], where, name)
        elif required:
            raise ProtocolError(f"{where}: missing field {name!r}")
    return cls(**kwargs)


def _plan(cls: type) -> _Plan:
    hints = typing.get_type_hints(cls)
    fields = tuple((f.name, _reader(hints[f.name]),
                    f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                   for f in dataclasses.fields(cls))
    plan = _PLANS[cls] = (fields, {name: read for name, read, _ in fields},
                          tuple(name for name, _, required in fields if required))
    return plan


def _reader(hint: Any) -> _Reader:
    """What reads a field of type ``hint``: a scalar (or None, for an Optional one) is checked
    here as :func:`_convert` checks it; anything else goes to ``_convert`` itself."""
    tp, optional = hint, False
    if typing.get_origin(hint) in (Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(inner) != 1:
            return _read_deep(hint)
        tp, optional = inner[0], True  # Optional[X]
    scalar = _scalar_reader(tp)
    if scalar is None:
        return _read_deep(hint)
    if not optional:
        return scalar

    def read_optional(value: Any, where: str, name: str) -> Any:
        return None if value is None else scalar(value, where, name)
    return read_optional


def _read_deep(hint: Any) -> _Reader:
    def read_deep(value: Any, where: str, name: str) -> Any:
        return _convert(hint, value, f"{where}.{name}")
    return read_deep


def _scalar_reader(tp: Any) -> Optional[_Reader]:
    if tp is Any:
        return lambda value, where, name: value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        def read_enum(value: Any, where: str, name: str) -> Any:
            try:
                return tp(value)
            except ValueError:
                raise ProtocolError(f"{where}.{name}: expected one of {', '.join(str(m.value) for m in tp)}, "
                                    f"got {value!r}") from None
        return read_enum
    if tp is float:
        def read_float(value: Any, where: str, name: str) -> Any:
            if value.__class__ is not float:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ProtocolError(f"{where}.{name}: expected a number, got {value!r}")
                value = float(value)
            return value if math.isfinite(value) else None  # an older agent's NaN: unknown
        return read_float
    if tp is int:
        def read_int(value: Any, where: str, name: str) -> Any:
            if value.__class__ is not int and (isinstance(value, bool) or not isinstance(value, int)):
                raise ProtocolError(f"{where}.{name}: expected an integer, got {value!r}")
            return value
        return read_int
    if tp is str or tp is bool:
        def read_plain(value: Any, where: str, name: str) -> Any:
            if not isinstance(value, tp):
                raise ProtocolError(f"{where}.{name}: expected {tp.__name__}, got {value!r}")
            return value
        return read_plain
    return None


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(inner, value, where)
    if tp is Any:
        return value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise ProtocolError(f"{where}: expected one of {', '.join(str(m.value) for m in tp)}, "
                                f"got {value!r}") from None
    if dataclasses.is_dataclass(tp):
        own = getattr(tp, "from_plain", None)  # a type that checks itself (a job spec) says what is wrong its way
        return own(value) if own is not None else from_dict(typing.cast(type, tp), value, where)
    if origin is list:
        if not isinstance(value, list):
            raise ProtocolError(f"{where}: expected a list, got {type(value).__name__}")
        (inner,) = typing.get_args(tp)
        return [_convert(inner, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ProtocolError(f"{where}: expected an object, got {type(value).__name__}")
        _, inner = typing.get_args(tp)
        return {k: _convert(inner, v, f"{where}.{k}") for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(f"{where}: expected a number, got {value!r}")
        value = float(value)
        return value if math.isfinite(value) else None  # an older agent's NaN: unknown
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp in (str, bool) and not isinstance(value, tp):
        raise ProtocolError(f"{where}: expected {tp.__name__}, got {value!r}")
    return value
