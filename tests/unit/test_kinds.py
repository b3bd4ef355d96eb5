"""A kind's options are one dataclass (agents/contract/kinds.py): the fleet file's keys, the
worker's flags and a fleet job's argv all come from it, and agree."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

import pytest

from gpudeck.agents.contract.jobs import JobSpec, SpecError
from gpudeck.agents.contract.kinds import BY_KIND, ExtractOptions, GenerateOptions, OptionError, option

# every fleet key of each kind set to a value other than its default
GENERATE = {"prompts": "/data/p.jsonl", "out": "/data/out", "servers": ["http://10.0.0.1:30000", "http://10.0.0.2:30000"],
            "concurrency": 32, "max_tokens": 2048, "model_name": "qwen", "temperature": 0.6, "top_p": 0.95, "top_k": 20,
            "thinking": False, "extra_body": {"top_k": 20}, "s3": "s3://b/gen", "s3_endpoint": "http://s3:9000",
            "force": True, "shard_size": 500, "request_timeout": 600.0, "max_attempts": 3, "max_prompt_bytes": 4096,
            "give_up_after": None, "dedupe": "first", "part": [2, 3], "min_useful_pct": 80.0}
EXTRACT = {"data": "/data/gen", "out": "/data/hs", "layers": [1, 7, -1], "max_tokens_per_batch": 65536,
           "device": "cuda:1", "dtype": "float16", "s3": "s3://b/hs", "s3_endpoint": "http://s3:9000", "force": True,
           "audit": False, "chat_template": "t.jinja", "part": [1, 4], "shard_bytes": 2**20, "shard_samples": 10,
           "max_seq_len": 8192, "dedupe": "first", "compile": False, "generic_forward": True, "host_buffers": 2,
           "writers": 4, "compress": True, "disk_check": "warn", "peak_tflops": 500.0, "cache_dir": "/cache/compile"}


def test_every_fleet_key_is_set_in_the_tables_above():
    # a field added to a kind must be added here too: the round trips below then cover it
    assert set(GenerateOptions.fleet_keys()) == set(GENERATE)
    assert set(ExtractOptions.fleet_keys()) == set(EXTRACT)


def _worker_parser(kind: str) -> argparse.ArgumentParser:
    if kind == "generate":
        from gpudeck.agents.workers.generate.cli import build_parser
    else:
        from gpudeck.agents.workers.extract.cli import build_parser
    return build_parser()


@pytest.mark.parametrize("kind, options, extra", [("generate", GENERATE, {}),
                                                  ("extract", EXTRACT, {"model": "/models/q"})])
def test_a_fleet_job_s_argv_reads_back_into_the_same_options(kind, options, extra):
    spec = JobSpec(name="j", kind=kind, options=dict(options), progress="/tmp/p.json", **extra)
    argv = spec.argv("/venv/bin/python")
    assert argv[:3] == ["/venv/bin/python", "-m", BY_KIND[kind].module]
    args = _worker_parser(kind).parse_args(argv[3:])
    back = BY_KIND[kind].from_args(args)
    assert back.fleet_dict() == spec.options.fleet_dict()
    if kind == "extract":  # from the spec: its model and progress file
        assert back.model == "/models/q" and back.progress_file == "/tmp/p.json"


def test_the_wire_form_reads_back_into_the_same_spec():
    for kind, options, extra in (("generate", GENERATE, {}), ("extract", EXTRACT, {"model": "/m"})):
        spec = JobSpec(name="j", kind=kind, options=dict(options), **extra)
        assert JobSpec.from_dict(spec.to_dict()) == spec


def test_the_sampling_options_go_into_each_request_s_body():
    spec = JobSpec(name="g", kind="generate", options={**GENERATE, "temperature": 0.6, "top_k": 20})
    assert spec.options.request_fields() == {"temperature": 0.6, "top_p": 0.95, "top_k": 20}


def test_defaults_give_no_flags_and_never_is_said():
    spec = JobSpec(name="g", kind="generate", options={"prompts": "p", "out": "o", "servers": ["http://h:1"]})
    assert spec.argv("py")[3:] == ["--prompts", "p", "--out", "o", "--server", "http://h:1"]
    spec = JobSpec(name="g", kind="generate", options={"prompts": "p", "out": "o", "servers": "http://h:1",
                                                       "give_up_after": "never", "thinking": True})
    assert spec.argv("py")[-3:] == ["--thinking", "--give-up-after", "never"]


@pytest.mark.parametrize("options, message", [
    ({"prompts": "p", "out": "o", "servers": ["http://h:1"], "concurrency": "many"},
     "'concurrency': expected an integer, got 'many'"),
    ({"prompts": "p", "out": "o", "servers": ["http://h:1"], "colour": "red"}, "no key 'colour'"),
    ({"prompts": "p", "servers": ["http://h:1"]}, "kind 'generate' needs 'out'"),
    ({"prompts": "p", "out": "o", "servers": ["http://h:1"], "give_up_after": "soon"}, "expected a duration"),
    ({"prompts": "p", "out": "o", "servers": ["http://h:1"], "dedupe": "last"}, "expected one of first"),
])
def test_a_bad_option_names_its_key(options, message):
    with pytest.raises(SpecError, match=message):
        JobSpec(name="g", kind="generate", options=options)


def test_the_old_flag_is_read_for_one_release_with_a_warning(capsys):
    args = _worker_parser("generate").parse_args(["--prompts", "p", "--out", "o", "--server", "http://h:1",
                                                  "--model", "qwen"])
    assert args.model_name == "qwen"
    assert "--model is the old spelling of --model-name" in capsys.readouterr().err


def test_an_old_fleet_key_is_read_and_said():
    @dataclass
    class Renamed(GenerateOptions):
        kind = "renamed"
        batch: int = option(8, old_key="batch_size", help="items per batch")

    said: list[str] = []
    opts = Renamed.from_fleet({"prompts": "p", "out": "o", "servers": ["u"], "batch_size": 4}, "job 'x'", said=said)
    assert opts.batch == 4 and said == ["job 'x': 'batch_size' is the old spelling of 'batch'; it is read for one "
                                        "more release"]
    with pytest.raises(OptionError, match="one option"):
        Renamed.from_fleet({"prompts": "p", "out": "o", "servers": ["u"], "batch_size": 4, "batch": 4}, said=[])


def test_adding_an_option_is_adding_a_field():
    # the whole change: one field. Its fleet key, its flag and its place in the argv follow.
    @dataclass
    class More(GenerateOptions):
        kind = "more"
        seed: int = option(0, help="the sampling seed sent with each request")

    assert "seed" in More.fleet_keys()
    p = argparse.ArgumentParser()
    More.add_arguments(p)
    assert p.parse_args(["--prompts", "p", "--out", "o", "--server", "u", "--seed", "7"]).seed == 7
    opts = More.from_fleet({"prompts": "p", "out": "o", "servers": ["u"], "seed": 7})
    spec = dataclasses.replace(JobSpec(name="g", kind="generate", options={"prompts": "p", "out": "o",
                                                                            "servers": ["u"]}), options=opts)
    assert spec.argv("py")[-2:] == ["--seed", "7"]


def test_a_spec_says_its_worker_s_options_and_its_upstreams_by_kind():
    """Typed access to what a kind's options hold (no getattr by name): a built-in worker's
    out, s3, s3_endpoint and part; the engines a client kind sends to."""
    gen = JobSpec(name="g", kind="generate", options=dict(GENERATE))
    ext = JobSpec(name="e", kind="extract", model="/m", options=dict(EXTRACT))
    router = JobSpec(name="r", kind="router", options={"workers": ["http://10.0.0.3:30000"]})
    cmd = JobSpec(name="c", command=["true"])
    assert gen.worker is gen.options and ext.worker is ext.options and router.worker is None and cmd.worker is None
    assert (gen.worker.out, gen.worker.s3_endpoint, gen.worker.part) == ("/data/out", "http://s3:9000", (2, 3))
    assert (ext.worker.out, ext.worker.s3) == ("/data/hs", "s3://b/hs")
    assert gen.upstreams == GENERATE["servers"] and router.upstreams == ["http://10.0.0.3:30000"]
    assert ext.upstreams == cmd.upstreams == []
