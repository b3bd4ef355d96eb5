"""The engines' own code, not hand-made pages: SGLang 0.5.23's metrics collectors write the
/metrics page gpudeck scrapes, and SGLang's argument parser reads the command line gpudeck
builds for the ``sglang-server`` kind. Both run in a process of their own
(tests/tools/sglang_probe.py says how, and why torchvision is a stand-in there).

``make test`` installs sglang==0.5.23 and the packages its imports need (see the Makefile);
elsewhere these tests skip, naming what is missing.


The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_engine_sources.py."""

from __future__ import annotations

import http.server
import importlib.util
import json
import subprocess
import sys
import threading

import httpx
import pytest

from gpudeck.agents.sense.engines import EngineScraper, parse_metrics
from gpudeck.agents.contract.jobs import JobSpec
from support import ROOT

PROBE = ROOT / "tests" / "tools" / "sglang_probe.py"

needs_sglang = pytest.mark.skipif(
    importlib.util.find_spec("sglang") is None,
    reason="sglang is not installed (make test installs sglang==0.5.23 and its CPU-side imports: see the Makefile)")


def probe(tmp_path_factory, cmd: str, data) -> object:
    arg = tmp_path_factory.mktemp("probe") / f"{cmd}.json"
    arg.write_text(json.dumps(data))
    r = subprocess.run([sys.executable, str(PROBE), cmd, str(arg)], capture_output=True, text=True, timeout=240)
    last = (r.stdout.strip().splitlines() or ["{}"])[-1]
    out = json.loads(last) if last.startswith(("{", "[")) else {}
    if r.returncode == 3 and isinstance(out, dict) and "missing" in out:
        pytest.skip(f"sglang 0.5.23 imports {out['missing']!r}, which is not installed (see the Makefile)")
    assert r.returncode == 0, f"probe {cmd} failed:\n{r.stderr[-4000:]}"
    return out


# One server per scenario; every figure below is what the scenario puts in.
HYBRID = {  # Qwen3.6-27B: linear attention (a mamba state pool) + MTP; DP 2 x TP 2, every scheduler reporting
    "model": "Qwen3.6-27B", "tp": 2, "all_schedulers": True,
    "dp": [{"running": 7, "queued": 3, "full": 0.31, "mamba": 0.623, "accept": 2.75},
           {"running": 5, "queued": 1, "full": 0.2, "mamba": 0.5, "accept": 3.25}],
    "finished": [[1200, 800], [3000]],  # generation tokens of requests done before each scrape
}
SWA = {  # a sliding-window model where the SWA pool is the fullest, no speculative decoding
    "model": "gpt-oss-120b", "dp": [{"running": 9, "queued": 0, "full": 0.4, "swa": 0.875},
                                    {"running": 4, "queued": 2, "full": 0.45, "swa": 0.625}],
    "finished": [[10]],
}
PLAIN = {  # one server per GPU, no DP (no dp_rank label), no speculative decoding
    "model": "Qwen3-8B", "dp": [{"running": 11, "queued": 6, "full": 0.4375}], "finished": [[64, 64]],
}


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    return probe(tmp_path_factory, "page", {"hybrid": HYBRID, "swa": SWA, "plain": PLAIN})


@pytest.mark.system  # pages: SGLang's collectors served by a probe process
@needs_sglang
def test_sglang_pages_carry_the_families_gpudeck_reads(pages):
    page = pages["hybrid"][-1]
    for family in ("generation_tokens_total", "num_running_reqs", "num_queue_reqs", "token_usage",
                   "full_token_usage", "swa_token_usage", "mamba_usage", "spec_accept_length"):
        assert f"# TYPE sglang:{family} " in page, family
    assert 'dp_rank="1"' in page and 'tp_rank="1"' in page
    assert 'dp_rank=' not in pages["plain"][0]  # no DP: no dp_rank label


@pytest.mark.system
@needs_sglang
def test_hybrid_model_figures_equal_what_sglang_was_given(pages):
    first, second = (parse_metrics(p) for p in pages["hybrid"])
    assert first.flavor == "sglang"
    assert first.generation_tokens == 1200 + 800 and second.generation_tokens == 1200 + 800 + 3000
    assert second.running == 7 + 5 and second.queued == 3 + 1  # DP ranks summed, TP rank 1 not
    # the mamba pool is the fullest: exact, not SGLang's token_usage rounded to 0.01 (0.62)
    assert second.kv_usage == pytest.approx((0.623 + 0.5) / 2) and second.kv_pool == "mamba"
    assert second.accept_length == pytest.approx((2.75 + 3.25) / 2)


@pytest.mark.system
@needs_sglang
def test_swa_and_plain_servers(pages):
    swa = parse_metrics(pages["swa"][0])
    assert swa.kv_usage == pytest.approx((0.875 + 0.625) / 2) and swa.kv_pool == "swa"
    assert swa.running == 13 and swa.queued == 2 and swa.accept_length is None  # spec_accept_length 0
    plain = parse_metrics(pages["plain"][0])
    assert (plain.generation_tokens, plain.running, plain.queued) == (128, 11, 6)
    assert plain.kv_usage == 0.4375 and plain.kv_pool is None and plain.accept_length is None


class PageServer:
    """A real HTTP server on loopback serving whichever page the test sets."""

    def __init__(self) -> None:
        self.body = ""
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                data = (outer.body if self.path == "/metrics" else "ok").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.system
@needs_sglang
async def test_scraper_over_http_shows_what_sglang_was_given(pages):
    srv = PageServer()
    try:
        s = EngineScraper(srv.url, window_s=1000)
        async with httpx.AsyncClient(timeout=5) as client:
            srv.body = pages["hybrid"][0]
            e = await s.poll(client, now=100.0)
            assert e.state == "ready" and e.tokens_per_s is None  # one scrape: no rate yet
            srv.body = pages["hybrid"][1]
            e = await s.poll(client, now=110.0)
    finally:
        srv.close()
    assert e.state == "ready" and e.flavor == "sglang" and e.error is None
    assert e.tokens_per_s == pytest.approx(3000 / 10)
    assert e.generation_tokens == 5000 and e.running == 12 and e.queued == 4
    assert e.kv_usage == pytest.approx((0.623 + 0.5) / 2) and e.kv_pool == "mamba"
    assert e.accept_length == pytest.approx(3.0)


# ------------------------------------------------------------------ the command line


def sglang_server(**kw) -> list[str]:
    argv = JobSpec(name="srv", kind="sglang-server", **kw).argv("python3")
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    return argv[3:]


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    per_gpu = sglang_server(model="/models/Qwen3.6-27B", port=30000, gpus=[0],
                            args=["--reasoning-parser", "qwen3", "--mem-fraction-static", "0.80"])
    mtp = "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4".split()
    dp_mtp = sglang_server(model="/models/Qwen3.6-27B", port=30010, gpus=[0, 1, 2, 3], dp=4,
                           args=["--speculative-algorithm", "NEXTN", *mtp])
    tp_eagle = sglang_server(model="/models/Qwen3.6-27B", port=30020, gpus=[0, 1], tp=2,
                             args=["--speculative-algorithm", "EAGLE", *mtp])
    return probe(tmp_path_factory, "args", [per_gpu, dp_mtp, tp_eagle])


@pytest.mark.system  # parsed: SGLang's argument parser in a probe process
@needs_sglang
def test_sglang_parses_the_one_server_per_gpu_line(parsed):
    a = parsed[0]
    assert a["model_path"] == "/models/Qwen3.6-27B" and a["port"] == 30000 and a["host"] == "127.0.0.1"
    assert a["enable_metrics"] is True and a["reasoning_parser"] == "qwen3"
    assert a["mem_fraction_static"] == 0.80 and a["dp_size"] == 1 and a["tp_size"] == 1
    assert a["speculative_algorithm"] is None


@pytest.mark.system
@needs_sglang
def test_sglang_parses_the_dp_and_mtp_lines(parsed):
    dp, tp = parsed[1], parsed[2]
    assert dp["dp_size"] == 4 and dp["tp_size"] == 1 and dp["port"] == 30010 and dp["enable_metrics"] is True
    assert dp["speculative_algorithm"] == "NEXTN"  # MTP; resolution (which reads the model) makes it EAGLE
    assert tp["tp_size"] == 2 and tp["speculative_algorithm"] == "EAGLE"
    for a in (dp, tp):
        assert (a["speculative_num_steps"], a["speculative_eagle_topk"], a["speculative_num_draft_tokens"]) == (3, 1, 4)


# ------------------------------------------------------------------ the names, read from the source
# vLLM 0.33 is not installed for the tests: its wheel is 336 MB (837 MB unpacked, most of it CUDA
# kernels) and pins torch==2.14.0. Its metrics module, vllm/v1/metrics/loggers.py, does import on
# a CPU machine from the wheel's Python files (with cbor2, openai-harmony, cachetools,
# cloudpickle, uvloop, py-cpuinfo, xgrammar, partial-json-parser and llguidance beside
# SGLang's set), but that is not wired in here. Its names come from its source instead:
# tests/tools/engine_metric_names.py wrote tests/fixtures/engine_metrics/vllm-0.33.0.json from
# vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl (`pip download --no-deps vllm==0.33.0`).
# Set GPUDECK_VLLM_WHEEL to that wheel to check the file against it.

sys.path.insert(0, str(ROOT / "tests" / "tools"))
import engine_metric_names  # noqa: E402

from gpudeck.agents.sense.engines import SGLANG_POOLS  # noqa: E402
from support.engine_sources import check_scraper_knows


@pytest.mark.system
@needs_sglang
def test_sglang_source_defines_every_name_the_scraper_reads(pages):
    from pathlib import Path

    src = Path(importlib.util.find_spec("sglang").submodule_search_locations[0])
    defined = engine_metric_names.engine_metrics(src)
    check_scraper_knows("sglang", defined)
    for name, _ in SGLANG_POOLS:
        assert defined[f"sglang:{name}"] == "gauge"
    # the reading from source agrees with what SGLang's collectors really served
    served = {line.split()[2]: line.split()[3] for p in pages.values() for line in p[-1].splitlines()
              if line.startswith("# TYPE ")}
    assert len(served) > 40  # multiprocess mode serves the series that were given a value
    assert {n: defined.get(n) for n in served} == served
