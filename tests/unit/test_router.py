"""The router job kind: sglang-router in front of two sim-engines, generate through it, and
its smg_* metrics through the agent's scraper.

The unit tier's tests of this file (starts nothing); the others are in tests/system/test_router.py."""

from __future__ import annotations

from gpudeck.agents.contract.jobs import JobSpec


def test_build_argv_from_a_router_spec():
    spec = JobSpec(name="router", kind="router", port=30100, metrics_url="http://127.0.0.1:29100/metrics",
                   options={"workers": ["http://10.0.0.1:30000", "http://10.0.0.2:30000"],
                            "router_args": ["--policy", "power_of_two"]})
    assert spec.argv("/venv/bin/python") == [
        "/venv/bin/python", "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", "30100",
        "--worker-urls", "http://10.0.0.1:30000", "http://10.0.0.2:30000",
        "--prometheus-host", "127.0.0.1", "--prometheus-port", "29100", "--policy", "power_of_two"]


def test_fleet_names_resolve_to_worker_urls():
    from gpudeck.remote.fleet import parse_fleet
    fleet = parse_fleet('''
[[jobs]]
name = "sglang-0"
kind = "sglang-server"
model = "/models/x"
port = 30000
[[jobs]]
name = "sglang-1"
kind = "sglang-server"
model = "/models/x"
port = 30001
[[jobs]]
name = "router"
kind = "router"
port = 30100
workers = ["sglang-0", "sglang-1"]
[[jobs]]
name = "gen"
kind = "generate"
servers = ["router"]
prompts = "/data/p.jsonl"
out = "/data/out"
concurrency = 256
thinking = true
''')
    argv = fleet.job("router").argv("python3")
    assert argv[argv.index("--worker-urls") + 1:][:2] == ["http://127.0.0.1:30000", "http://127.0.0.1:30001"]
    gen = fleet.job("gen").argv("python3")
    assert gen[:3] == ["python3", "-m", "gpudeck.agents.workers.generate"]
    assert gen[gen.index("--server") + 1] == "http://127.0.0.1:30100"
    assert "--thinking" in gen and gen[gen.index("--concurrency") + 1] == "256"
