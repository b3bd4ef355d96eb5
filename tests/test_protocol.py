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
