"""Honest figures and light commands, run as a user would: dollars that are not known say so,
arithmetic needs no torch, a prompts file is audited as prompts, and the demo's own fleet
file works with the other commands."""

from __future__ import annotations

import json
import textwrap

import pytest

from support import free_port
from support.cli import gpudeck, without

pytestmark = pytest.mark.system  # runs the gpudeck CLI as a process


def test_an_unreachable_priced_node_has_unknown_dollars_never_zero(tmp_path, home):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(textwrap.dedent(f'''
        [defaults]
        home = "{home}"

        [[nodes]]
        name = "gone"
        host = "127.0.0.1"
        port = {free_port()}
        connect_timeout = 1
        price_per_hour = 36

        [[jobs]]
        name = "gen"
        node = "gone"
        kind = "generate"
        command = ["sleep", "600"]
    '''))
    r = gpudeck("status", "--json", "-f", str(fleet), check=False)
    assert r.returncode == 3, r.stderr  # a node did not answer
    doc = json.loads(r.stdout)
    (node,) = doc["nodes"]
    assert not node["reachable"] and node["price_per_hour"] == 36
    assert node["spent"] is None and node["to_finish"] is None  # unknown: null, never 0.0
    assert doc["fleet"] == {"spent": None, "to_finish": None, "nodes_priced": 1, "idle_per_hour": None, "burned": None, "s3_bytes": None,
                           "s3_cost_per_month": None, "s3_price_per_gb_month": 0.023,
                            "tokens_per_s": None}  # no node answered: no rate known
    text = gpudeck("status", "-f", str(fleet), check=False).stdout
    assert "gone: UNREACHABLE" in text and ", $36/h: — spent, — to finish" in text, text
    assert "fleet: — spent, — to finish" in text and "$0.00" not in text, text


# the whole extract extra (pyproject.toml): what `plan extract` must not need for arithmetic
EXTRACT_EXTRA = ("torch", "transformers", "numpy", "safetensors", "zstandard")


def test_plan_extract_with_the_figures_given_needs_no_torch(tmp_path):
    model = tmp_path / "Qwen3-8B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 36, "hidden_size": 4096}))
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]}) + "\n")
    hidden = without(tmp_path, *EXTRACT_EXTRA)
    plan = ["plan", "extract", "--model", str(model), "--data", str(data), "--out", str(tmp_path / "out"),
            "--layers", "1,18,36"]
    r = gpudeck(*plan, "--tokens", "2000000", "--samples", "1000", "--tokens-per-s", "10000", "--json",
                check=False, env=hidden)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    doc = json.loads(r.stdout)
    assert doc["tokens"] == 2_000_000 and doc["samples"] == 1000 and doc["tokens_given"] is True
    assert doc["bytes_per_token_raw"] == 3 * 4096 * 2 and doc["projected_wall_s"] == 200.0
    assert doc["verdict"] == "go" and doc["time"]["source"] == "--tokens-per-s"
    # the same environment, counting the data itself: that needs the extra, and says so
    r = gpudeck(*plan, check=False, env=hidden)
    assert r.returncode == 2 and "pip install 'gpudeck[extract]'" in r.stderr and "Traceback" not in r.stderr


def _write_jsonl(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_audit_recognizes_a_prompts_file_and_audits_it_as_prompts(tmp_path):
    prompts = _write_jsonl(tmp_path / "prompts.jsonl",
                           [{"id": i, "prompt": f"Explain topic {i} to a new engineer, with an example."}
                            if i % 2 else {"id": i, "messages": [{"role": "system", "content": "Be brief."},
                                                                 {"role": "user", "content": f"What is {i}?"}]}
                            for i in range(200)])
    r = gpudeck("audit", prompts, check=False)
    assert r.returncode == 0, r.stdout
    assert r.stdout.startswith(f"audit of {prompts} (prompts): 200 samples")
    assert "a prompts file (no sample has an answer)" in r.stdout and "prompt tokens per sample" in r.stdout
    assert "OK: nothing degenerate found." in r.stdout and "DEGENERATE" not in r.stdout
    doc = json.loads(gpudeck("audit", "--json", prompts).stdout)
    assert doc["mode"] == "prompts" and doc["recognized"] and doc["unanswered"] == 200
    assert sum(doc["prompt_tokens_histogram"].values()) == 200
    # prompts, judged as prompts: empties and duplicates
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"id": i, "prompt": "" if i % 3 else "same question?"}
                                               for i in range(30)])
    r = gpudeck("audit", bad, check=False)
    assert r.returncode == 1 and "(prompts)" in r.stdout and "have an empty last user turn" in r.stdout
    # training data where some samples lack answers: the message points at --prompts
    mixed = _write_jsonl(tmp_path / "mixed.jsonl",
                         [{"messages": [{"role": "user", "content": f"q {i}"}]
                           + ([{"role": "assistant", "content": f"A long and useful answer number {i}, really."}]
                              if i < 5 else [])} for i in range(20)])
    r = gpudeck("audit", mixed, check=False)
    assert r.returncode == 1 and "(training)" in r.stdout and "`gpudeck audit --prompts`" in r.stdout


def test_the_demo_fleet_file_works_with_status_events_and_watch(tmp_path):
    from gpudeck.console.demo import build_demo  # what `gpudeck demo` writes, before it opens the console

    path = build_demo(tmp_path / "demo", router=False, prompts=100)
    f = ["-f", str(path)]
    doc = json.loads(gpudeck("status", "--json", *f, timeout=120).stdout)
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert set(nodes) == {"b200", "pro6000"}
    assert all(n["reachable"] and n["gpus_simulated"] for n in nodes.values()), [n["error"] for n in nodes.values()]
    assert (len(nodes["b200"]["gpus"]), len(nodes["pro6000"]["gpus"])) == (7, 4)
    assert {j["name"] for j in doc["jobs"]} >= {"generate", "extract-sim", "sglang-0"}
    r = gpudeck("events", *f)
    assert "no events on b200, pro6000" in r.stderr, r.stderr
    watch = gpudeck("watch", "status", *f).stdout
    assert "b200: not watching" in watch and "pro6000: not watching" in watch, watch


@pytest.mark.usefixtures("reap_jobs")
def test_a_generate_job_naming_its_engine_by_url_is_not_counted_twice(tmp_path, home, start_agent):
    """The fleet's tokens/s (the console header's, `fleet.tokens_per_s`): a generate job whose
    server is an engine job of the fleet, spelled `localhost` with a trailing slash where the
    engine's metrics_url says 127.0.0.1 (and the engine has no `port` key), counts once."""
    import sys

    from support.generate import write_prompts
    from support.wait import wait_for

    port = free_port()
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, 5000)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(textwrap.dedent(f'''
        [defaults]
        home = "{home}"
        nvml = false
        interval = 0.3

        [[jobs]]
        name = "engine"
        command = ["{sys.executable}", "-m", "gpudeck.console", "sim-engine", "--port", "{port}", "--tok-s", "200"]
        metrics_url = "http://127.0.0.1:{port}/metrics"

        [[jobs]]
        name = "gen"
        kind = "generate"
        servers = ["http://localhost:{port}/"]
        prompts = "{prompts}"
        out = "{tmp_path / 'out'}"
        concurrency = 8
    '''))
    f = ["-f", str(fleet)]
    start_agent(interval=0.3)  # the node's agent stays between the one-shot commands: an engine's rate takes two scrapes
    gpudeck("launch", "engine", *f)
    gpudeck("launch", "gen", *f)

    def both_rates():
        doc = json.loads(gpudeck("status", "--json", *f).stdout)
        jobs = {j["name"]: j for j in doc["jobs"]}
        engine = (jobs["engine"]["engine"] or {}).get("tokens_per_s")
        return (engine and jobs["gen"]["tokens_per_s"]) and (doc, engine)
    doc, engine = wait_for(both_rates, timeout=90, what="the engine and the generate job both reporting tokens/s",
                           detail=lambda: gpudeck("status", *f).stdout)
    from gpudeck.console.formatting import round_figures  # the header shows three figures

    # the engine's own figure, not it plus the generate job's count of the same tokens
    assert doc["fleet"]["tokens_per_s"] == round_figures(engine), doc["fleet"]


@pytest.mark.parametrize("key,value,line", [("concurrency", 0, 8), ("shard_size", -5, 8)])
def test_an_option_out_of_its_range_is_refused_by_the_fleet_file_and_the_worker(tmp_path, key, value, line):
    """One declaration of the range (option(min=) in agents/contract/kinds.py): the fleet file's
    error names the file and the line; the worker's flag is refused by argparse."""
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(textwrap.dedent(f'''
        [[jobs]]
        name = "gen"
        kind = "generate"
        servers = ["http://127.0.0.1:30000"]
        prompts = "/data/prompts.jsonl"
        out = "/data/out"
        {key} = {value}
    '''))
    r = gpudeck("status", "-f", str(fleet), check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"{fleet}:{line}: [[jobs]] #1 ('gen') '{key}': must be at least 1, got {value}" in r.stderr, r.stderr
    flag = "--" + key.replace("_", "-")
    r = gpudeck("generate", "--prompts", str(tmp_path / "p.jsonl"), "--out", str(tmp_path / "out"),
                "--server", "http://127.0.0.1:1", flag, str(value), check=False)
    assert r.returncode == 2 and f"argument {flag}: must be at least 1, got {value}" in r.stderr, r.stderr
