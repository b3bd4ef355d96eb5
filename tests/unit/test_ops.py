"""The ops (agents/contract/ops.py): each a class with typed arguments and a typed result, spelled
in the contract and nowhere else."""

from __future__ import annotations

import ast
import dataclasses

import pytest

from gpudeck.agents.contract import ops, wire
from gpudeck.agents.contract.jobs import JobSpec
from gpudeck.agents.contract.plain import ProtocolError
from gpudeck.agents.contract.watching import WatchSettings
from support import ROOT

EXAMPLES = [ops.Status(), ops.Configure(jobs=[JobSpec(name="j", command=["true"])], fleet="h:/f.toml", take_over=True,
                                        watch=WatchSettings(fleet="h:/f.toml")),
            ops.ReadHistory(since=5.0), ops.ReadEvents(after_seq=3, limit=10), ops.Watch(on=True, supervise="cron"),
            ops.Ack(job="j"), ops.Note(text="switched to B200", job="j", notify=True, by="me@laptop"),
            ops.Launch(job="j"), ops.Kill(job="j", grace_s=2.5), ops.Relaunch(job="j"), ops.KillPid(pid=42),
            ops.Adopt(pid=42, job="found", started_at=1.7e9, progress_file="p.json", kind="generate"),
            ops.Logs(job="j", offset=100), ops.Doctor(console_time=1.5e9, venv="~/.gpudeck/venv", timeout_s=30.0),
            ops.Unstage(paths=["/dev/shm/qwen"])]


def test_every_op_has_an_example():
    assert {type(e) for e in EXAMPLES} == set(ops.ALL) and len(ops.OPS) == len(ops.ALL)


@pytest.mark.parametrize("op", EXAMPLES, ids=lambda o: o.name)
def test_an_op_crosses_the_wire_whole(op):
    line = wire.encode(ops.request(7, op))
    req = wire.decode(line)
    assert isinstance(req, wire.Request) and req.op == op.name
    assert ops.op_of(req) == op


@pytest.mark.parametrize("op, args, message", [
    ("frobnicate", {}, "unknown op 'frobnicate'; expected one of status, configure"),
    ("kill", {"job": "j", "grace": 5}, "'kill' takes no argument 'grace'"),
    ("kill", {"job": 5}, "kill.job: expected str"),
    ("kill", {}, "missing field 'job'"),
    ("kill", {"job": "j", "grace_s": 7200}, "'grace_s' must be a number of seconds from 0 to 3600"),
    ("kill_pid", {"pid": -1}, "needs a 'pid' \\(a positive integer\\)"),
    ("adopt", {"pid": 0, "job": "a"}, "'adopt' needs a 'pid' \\(a positive integer\\)"),
    ("adopt", {"pid": 5, "job": "a b"}, "'adopt' 'job': a job name holds only"),
    ("adopt", {"pid": 5, "job": "a", "kind": "shell"}, "'adopt' 'kind' must be one of command"),
    ("adopt", {"pid": 5}, "missing field 'job'"),
    ("events", {"limit": "many"}, "events.limit: expected an integer"),
    ("watch", {"on": "yes"}, "watch.on: expected bool"),
    ("configure", {"jobs": "notalist"}, "configure.jobs: expected a list"),
    ("configure", {"watch": {"notify": [{"url": "https://hooks.example/T0KEN", "format": "carrier-pigeon"}]}},
     "format"),
    ("configure", {"watch": {"alerts": {"gpu_temp_c": "hot"}}}, "gpu_temp_c"),
    ("configure", {"watch": {"notyfy": []}}, "'watch' has no key 'notyfy'"),
    ("status", {"verbose": True}, "'status' takes no argument 'verbose'; it takes none"),
    ("doctor", {"timeout_s": 0}, "'doctor': 'timeout_s' must be a number of seconds above 0"),
    ("doctor", {"console_time": "now"}, "doctor.console_time: expected a number"),
    ("note", {"text": " "}, "'note': 'text' is empty"),
    ("note", {"text": "a\nb"}, "a note is one line"),
    ("note", {"text": "x" * 2001}, "more than 2,000"),
])
def test_bad_arguments_are_refused_by_the_op_s_own_types(op, args, message):
    with pytest.raises(ValueError, match=message) as err:  # ProtocolError, or the watch settings' ConfigError
        ops.op_of(wire.Request(id=1, op=op, args=args))
    assert "T0KEN" not in str(err.value)


def test_a_reply_is_read_into_the_op_s_result():
    verdict = wire.KillVerdict(job="j", ok=True, message="freed 1.0 GiB in 0.5 s", pids=[1, 2])
    assert ops.Kill(job="j").answer(wire.to_plain(verdict)) == verdict
    page = ops.ReadEvents().answer({"node": "n", "seq": 3, "events": [
        {"t": 1.0, "seq": 3, "node": "n", "kind": "died", "message": "job j died"}]})
    assert page.events[0].kind.value == "died"
    with pytest.raises(ProtocolError, match="the reply to 'launch'"):
        ops.Launch(job="j").answer({"job": "j"})


def test_the_agent_answers_every_op_from_one_table(tmp_path):
    from gpudeck.agents.node.start import node_agent

    agent = node_agent(tmp_path / "home", "n", nvml=False)
    try:
        assert set(agent.answers) == set(ops.ALL)
    finally:
        agent.watch.close()


# ---------------------------------------------------------------- spelled once

REQUESTERS = {"request", "node_request", "job_request"}


def _op_names_outside_the_contract() -> list[str]:
    """Where product code outside agents/contract/ spells an op's name: as a request's first
    argument, an ``op=`` keyword, a comparison with something named op, or the one name no
    other word shares (kill_pid)."""
    names = set(ops.OPS)
    found = []
    for wing in ("agents", "console", "remote"):
        for path in (ROOT / wing).rglob("*.py"):
            if path.is_relative_to(ROOT / "agents" / "contract"):
                continue
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                hits: list[ast.AST] = []
                if isinstance(node, ast.Call):
                    fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                    if fn in REQUESTERS and node.args:
                        hits.append(node.args[0])
                    hits += [k.value for k in node.keywords if k.arg == "op"]
                elif isinstance(node, ast.Compare):
                    sides = [node.left, *node.comparators]
                    if any("op" in ast.unparse(s).split(".")[-1] for s in sides):
                        for s in sides:
                            hits += s.elts if isinstance(s, (ast.Tuple, ast.List, ast.Set)) else [s]
                elif isinstance(node, ast.Constant) and node.value == "kill_pid":
                    hits.append(node)
                for h in hits:
                    if isinstance(h, ast.Constant) and h.value in names:
                        found.append(f"{path.relative_to(ROOT)}:{h.lineno}: {h.value!r}")
    return found


def test_no_op_name_is_spelled_outside_the_contract():
    assert _op_names_outside_the_contract() == []


def test_the_check_finds_a_spelled_op(tmp_path, monkeypatch):
    # the check itself can fail: a file that spells one, put where it looks
    import support

    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "x.py").write_text('if req.op == "kill":\n    pass\nlink.request("events")\n')
    monkeypatch.setattr(support, "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert _op_names_outside_the_contract() == ["agents/x.py:1: 'kill'", "agents/x.py:3: 'events'"]


def test_ops_are_frozen_dataclasses_with_a_result_each():
    for cls in ops.ALL:
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
        assert dataclasses.is_dataclass(cls.Result) and cls.name in ops.OPS


def test_an_op_names_its_result_once_as_its_base_s_argument():
    """``class Kill(Op[KillVerdict])``: the one statement of the answer's type, read at run time
    (``Result``, what the agent checks its answer against) and by the type checker (what
    ``FleetClient.request`` returns)."""
    import typing

    for cls in ops.ALL:
        (base,) = [b for b in cls.__orig_bases__ if typing.get_origin(b) is ops.Op]
        assert typing.get_args(base) == (cls.Result,)
    with pytest.raises(TypeError, match="op Unanswered names no answer: derive it from Op"):
        class Unanswered(ops.Op):  # type: ignore[type-arg]
            name = "unanswered"
