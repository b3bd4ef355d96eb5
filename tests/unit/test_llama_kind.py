"""`kind = "llama-server"`: its options, its command line, its checks before a launch, its KV
use from /slots. The real program is driven in tests/e2e/test_llama_server_kind.py."""

from __future__ import annotations

import os
import stat

import pytest

from gpudeck.agents.contract.jobs import JobKind, JobSpec, SpecError
from gpudeck.agents.contract.needs import launch_problem
from gpudeck.agents.sense.engines import parse_metrics, slots_usage
from gpudeck.remote.fleet import FleetError, parse_fleet

FLEET = '''
[[jobs]]
name = "llama"
kind = "llama-server"
model = "/models/smol.gguf"
port = 8080
{more}
'''


def spec(**options) -> JobSpec:
    return JobSpec.from_dict({"name": "llama", "kind": "llama-server", "model": "/models/smol.gguf", "port": 8080,
                              "options": options})


def test_its_command_line_comes_from_its_options_with_metrics_and_slots_always_on():
    s = spec(binary="/opt/llama/llama-server", slots=64, context=16384, gpu_layers="all")
    assert s.argv("python3") == ["/opt/llama/llama-server", "--model", "/models/smol.gguf", "--host", "127.0.0.1",
                                 "--port", "8080", "--parallel", "64", "--ctx-size", str(64 * 16384),
                                 "--n-gpu-layers", "all", "--metrics", "--slots"]
    assert s.scrape_url == "http://127.0.0.1:8080/metrics"
    assert s.kind.short == "llama" and s.kind.engine
    # the defaults: llama-server on the PATH, 4 slots of 4096, the server's own GPU layers
    d = spec()
    assert d.argv("python3")[:1] == ["llama-server"] and "--n-gpu-layers" not in d.argv("python3")
    # args go after, and a --metrics given there is not repeated
    s = JobSpec.from_dict({**spec().to_dict(), "args": ["--threads", "8", "--metrics"]})
    assert s.argv("p").count("--metrics") == 1 and s.argv("p")[-4:-1] == ["--threads", "8", "--metrics"]


def test_the_fleet_file_names_the_line_of_a_bad_option():
    f = parse_fleet(FLEET.format(more='slots = 8\ncontext = 2048\ngpu_layers = 20\nbinary = "/b/llama-server"'))
    [job] = f.jobs
    assert job.kind is JobKind.LLAMA_SERVER and job.options.slots == 8 and job.options.gpu_layers == 20
    for more, said in (('gpu_layers = "most"', "'gpu_layers': expected a number of layers"),
                       ("gpu_layers = -1", "'gpu_layers': expected a number of layers"),
                       ("slots = 0", "'slots': must be at least 1"),
                       ("context = 1.5", "'context': expected an integer"),
                       ('quantize = "q4"', "no key 'quantize'")):
        with pytest.raises(FleetError) as e:
            parse_fleet(FLEET.format(more=more), "fleet.toml")
        assert said in str(e.value) and "fleet.toml:" in str(e.value), str(e.value)
    with pytest.raises(SpecError, match="kind 'llama-server' needs a 'port'"):
        JobSpec.from_dict({"name": "x", "kind": "llama-server", "model": "/m.gguf"})
    with pytest.raises(SpecError, match="kind 'llama-server' needs a 'model'"):
        JobSpec.from_dict({"name": "x", "kind": "llama-server", "port": 1})


def test_a_missing_program_or_model_is_one_line_before_the_launch(tmp_path, monkeypatch):
    model = tmp_path / "smol.gguf"
    model.write_bytes(b"GGUF")
    program = tmp_path / "llama-server"
    program.write_text("#!/bin/sh\n")
    s = JobSpec.from_dict({"name": "l", "kind": "llama-server", "model": str(model), "port": 1,
                           "options": {"binary": str(program)}})
    assert "is not an executable file" in launch_problem(s, "python3")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    assert launch_problem(s, "python3") is None
    # a name is looked up on the PATH
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    named = JobSpec.from_dict({**s.to_dict(), "options": {"binary": "llama-server"}})
    assert "no 'llama-server' on the node's PATH" in launch_problem(named, "python3")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert launch_problem(named, "python3") is None
    # a relative model is the job's, from its cwd
    rel = JobSpec.from_dict({**named.to_dict(), "model": "smol.gguf", "cwd": str(tmp_path)})
    assert launch_problem(rel, "python3") is None
    gone = JobSpec.from_dict({**named.to_dict(), "model": str(tmp_path / "gone.gguf")})
    assert f"its model {tmp_path / 'gone.gguf'} is not a file" in launch_problem(gone, "python3")
    # its own command is the operator's: not checked
    own = JobSpec.from_dict({**gone.to_dict(), "command": ["sh", "-c", "true"]})
    assert launch_problem(own, "python3") is None
    assert os.access(program, os.X_OK)


def test_a_model_a_stage_puts_in_place_at_launch_is_not_refused_before_it(tmp_path):
    program = tmp_path / "llama-server"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    shm = tmp_path / "shm" / "smol.gguf"  # not there yet: the stage copies it before the server starts
    s = JobSpec.from_dict({"name": "l", "kind": "llama-server", "model": str(shm), "port": 1,
                           "options": {"binary": str(program)},
                           "stage": [{"from": str(tmp_path / "shared" / "smol.gguf"), "to": str(shm)}]})
    assert launch_problem(s, "python3") is None
    # a model in a staged directory too; one outside every stage is still refused
    d = JobSpec.from_dict({**s.to_dict(), "model": str(tmp_path / "shm" / "all" / "smol.gguf"),
                           "stage": [{"from": str(tmp_path / "shared"), "to": str(tmp_path / "shm" / "all")}]})
    assert launch_problem(d, "python3") is None
    out = JobSpec.from_dict({**d.to_dict(), "model": str(tmp_path / "shm" / "allx" / "smol.gguf")})
    assert "is not a file here" in launch_problem(out, "python3")


BUSY = {"id": 1, "n_ctx": 512, "is_processing": True, "n_prompt_tokens": 100,
        "next_token": [{"has_next_token": True, "n_remain": 50, "n_decoded": 28}]}


def test_kv_use_is_what_the_busy_slots_hold_over_every_slots_context():
    idle = {"id": 0, "n_ctx": 512, "is_processing": False}
    assert slots_usage([idle, BUSY]) == 128 / 1024
    assert slots_usage([idle, idle]) == 0.0
    full = {**BUSY, "n_prompt_tokens": 500, "next_token": [{"n_decoded": 100}]}
    assert slots_usage([full]) == 1.0  # at most the slot's context
    assert slots_usage([{**BUSY, "next_token": {"n_decoded": 28}}]) == 128 / 512  # an older build's object
    # another build's page: unknown, never 0
    for page in ([], {}, [{"id": 0}], [{**BUSY, "n_prompt_tokens": None}], [{**BUSY, "next_token": []}], "x"):
        assert slots_usage(page) is None, page


def test_a_llamacpp_page_without_kv_series_leaves_kv_to_slots():
    page = ("# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 600\n"
            "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 2\n"
            "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 1\n")
    m = parse_metrics(page)
    assert (m.flavor, m.generation_tokens, m.running, m.queued, m.kv_usage) == ("llamacpp", 600, 2, 1, None)


def test_a_generate_job_against_a_llama_server_job_is_its_client_counted_on_the_engine():
    """The header's tokens/s counts an engine once: a generate job whose server is the
    llama-server job (by name, or its URL however spelled) is that engine's client."""
    from gpudeck.console.state import engine_clients

    f = parse_fleet(FLEET.format(more="") + '''
[[jobs]]
name = "gen"
kind = "generate"
prompts = "p.jsonl"
out = "out"
servers = ["llama"]

[[jobs]]
name = "gen2"
kind = "generate"
prompts = "p.jsonl"
out = "out2"
servers = ["http://localhost:8080/"]

[[jobs]]
name = "other"
kind = "generate"
prompts = "p.jsonl"
out = "out3"
servers = ["http://127.0.0.1:9999"]
''')
    assert engine_clients(f) == frozenset({"gen", "gen2"})


def test_doctor_says_what_the_job_makes_of_the_servers_prompt_cache():
    """llama-server's RAM prompt cache is on unless the job turns it off: the engine line says
    which, read as the server reads it (its environment, then its arguments, the last winning)."""
    from gpudeck.agents.node.doctor.engine import prompt_cache_said

    on = prompt_cache_said(["--threads", "8"], {})
    assert on.startswith("prompt cache on (the server's default") and "--cache-ram 0" in on
    assert prompt_cache_said(["--cache-ram", "0"], {}) == "prompt cache off (--cache-ram 0)"
    assert prompt_cache_said(["-cram", "0"], {}).startswith("prompt cache off")
    assert prompt_cache_said([], {"LLAMA_ARG_CACHE_RAM": "0"}).startswith("prompt cache off")
    assert prompt_cache_said(["--cache-ram", "4096"], {"LLAMA_ARG_CACHE_RAM": "0"}) == on  # the argument wins
    assert prompt_cache_said(["--cache-ram", "0", "--cache-ram", "512"], {}) == on  # the last one wins
    assert prompt_cache_said(["--no-cache-idle-slots"], {}).startswith("prompt cache on, idle slots not saved")
    assert prompt_cache_said(["--no-cache-idle-slots", "--cache-idle-slots"], {}) == on
    assert prompt_cache_said(["--cache-ram"], {}) == on  # a flag without its value changes nothing
