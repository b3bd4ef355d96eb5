"""The wire: typed messages round-trip; bad lines say what is wrong."""

from __future__ import annotations

import pytest

from gpudeck.agents import __version__
from gpudeck.agents.contract import wire
from gpudeck.agents.contract.wire import Engine, Gpu, GpuProcess, Host, JobStatus, Progress, ProtocolError, Reply, Request, Snapshot


def _snapshot() -> Snapshot:
    return Snapshot(
        node="n1", seq=3, t=1.5,
        host=Host("h", 1.0, 8, 1, 2, 0.1, 0.2, 0.3),
        gpus=[Gpu(0, "GPU-1", "H200", 1024.0, 143771.0, 99.0, 60.0, 500.0, [GpuProcess(42, 1000.0, "gen")])],
        jobs=[JobStatus("gen", "generate", "running", [0], ["GPU-1"], 42, 42, [42, 43], 2,
                        progress=Progress(5, 10, 100, 1.0, 20.0, 5.0, 1.0, {"errors": 1}),
                        engine=Engine("http://x/metrics", "ready", "sglang", 10.0))],
        gpu_error=None)


def test_round_trip_of_every_message():
    for msg in [wire.hello("n1", 1, 2.0, "/h", "no NVML"), _snapshot(),
                Request(7, "kill", {"job": "gen", "grace_s": 3}), Reply(7, False, {}, "nope"),
                wire.History("n1", [wire.Sample(1.0, [1.0], [None], {"a": 2.0}, {"a": 3})])]:
        line = wire.encode(msg)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert wire.decode(line) == msg


def test_hello_carries_versions():
    h = wire.hello("n", 1, 0.0, "/h", None)
    assert h.version == __version__ and h.protocol == wire.PROTOCOL


@pytest.mark.parametrize("line, expected", [
    (b"{not json", "not JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"type": "launch"}', "unknown message type 'launch'"),
    (b'{"type": "request", "op": "kill"}', "missing field 'id'"),
    (b'{"type": "request", "id": "7", "op": "kill"}', "Request.id: expected an integer"),
    (b'{"type": "request", "id": 7, "op": "kill", "args": []}', "Request.args: expected an object"),
    (b'\xff\xfe', "not JSON"),
])
def test_malformed_lines(line, expected):
    with pytest.raises(ProtocolError, match=expected):
        wire.decode(line)


def test_nested_type_errors_name_the_path():
    import json
    obj = json.loads(wire.encode(_snapshot()))
    obj["gpus"][0]["processes"][0]["pid"] = "forty-two"
    with pytest.raises(ProtocolError, match=r"Snapshot.gpus\[0\].processes\[0\].pid: expected an integer"):
        wire.decode(json.dumps(obj))


def test_non_finite_floats_are_sent_as_null_and_read_as_none():
    import math
    from gpudeck.agents.contract.wire import Progress, decode, encode, to_plain
    plain = to_plain(Progress(done=1, tokens_per_s=math.nan, eta_s=math.inf))
    assert plain["done"] == 1 and plain["tokens_per_s"] is None and plain["eta_s"] is None
    line = encode(wire.Hello(node="n", version="v", protocol=1, pid=1, started_at=math.nan, home="h"))
    assert b"NaN" not in line
    # an older agent's NaN on the wire is read as unknown
    snap = decode('{"type": "history", "node": "n", "samples": [{"t": 1.0, "gpu_util": [NaN]}]}')
    assert snap.samples[0].gpu_util == [None]


def test_quick_init_builds_what_the_dataclass_init_builds():
    """The wire types built every tick fill their dict directly (plain.quick_init): the same
    fields, defaults, fresh default lists, __post_init__ and frozenness as dataclass's own."""
    import dataclasses
    import inspect
    from dataclasses import dataclass, field
    from typing import Optional

    from gpudeck.agents.contract.documents import ProgressDoc
    from gpudeck.agents.contract.plain import quick_init

    def make():
        @dataclass(frozen=True)
        class Doc:
            name: str
            n: int = 0
            tags: list = field(default_factory=list)
            note: Optional[str] = None

            def __post_init__(self) -> None:
                if self.n < 0:
                    raise ValueError(f"n: {self.n}")
        return Doc

    slow, quick = make(), quick_init(make())
    for args, kw in [(("a",), {}), (("a", 2), {"note": "x"}), ((), {"name": "b", "tags": [1]}), (("a", 1, [2], "y"), {})]:
        assert vars(quick(*args, **kw)) == vars(slow(*args, **kw))
    assert quick("a").tags is not quick("a").tags  # a fresh list each time
    for bad_args, bad_kw in [((), {}), (("a",), {"nope": 1}), (("a", 1, [], None, 5), {}), (("a", -1), {})]:
        errors = []
        for cls in (slow, quick):
            with pytest.raises((TypeError, ValueError)) as exc:
                cls(*bad_args, **bad_kw)
            errors.append(type(exc.value))
        assert errors[0] is errors[1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick("a").n = 3  # type: ignore[misc]
    with pytest.raises(ProtocolError, match="done"):
        ProgressDoc(done=-1)
    for cls in (Progress, JobStatus, Snapshot, Gpu, Host, ProgressDoc):
        assert [p for p in inspect.signature(cls.__init__).parameters][1:] == [f.name for f in dataclasses.fields(cls)]
    assert wire.decode(wire.encode(_snapshot())) == _snapshot()


def test_a_wrong_object_is_told_by_its_first_field_in_order_whatever_the_keys_order():
    """from_dict reads the object's own keys; the error is still the first field's, in the
    dataclass's order (a wrong node before a wrong seq, a missing seq before a wrong host)."""
    from gpudeck.agents.contract.plain import from_dict

    good = wire.encode(_snapshot())
    import json
    doc = json.loads(good)
    doc.pop("type", None)
    with pytest.raises(ProtocolError, match=r"^Snapshot\.node: expected str, got 5$"):
        from_dict(Snapshot, {"seq": "x", **{k: v for k, v in doc.items() if k not in ("seq", "node")}, "node": 5})
    with pytest.raises(ProtocolError, match=r"^Snapshot: missing field 'seq'$"):
        from_dict(Snapshot, {**{k: v for k, v in doc.items() if k not in ("seq", "host")}, "host": 7})
    assert from_dict(Snapshot, dict(reversed(list(doc.items())))) == _snapshot()  # any order reads the same
