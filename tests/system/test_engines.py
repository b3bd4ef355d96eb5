"""Engine scrapers: the fixture pages, a real HTTP server playing every state, a real llama-server.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_engines.py, tests/e2e/test_engines.py."""

from __future__ import annotations

import http.server
import socket
import threading

import httpx
import pytest

from gpudeck.agents.sense.engines import EngineScraper


async def test_scraper_connection_refused_means_loading():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with httpx.AsyncClient(timeout=2) as client:
        e = await EngineScraper(f"http://127.0.0.1:{port}/metrics").poll(client)
    assert e.state == "loading" and "refused" in e.error


class FakeEngine:
    """A real HTTP server on loopback whose answers the test changes as it goes."""

    def __init__(self) -> None:
        self.metrics_status = 200
        self.health_status = 200
        self.body = ""
        self.slots: tuple[int, str] = (404, "")
        self.asked: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.asked.append(self.path)
                status, body = ((outer.metrics_status, outer.body) if self.path == "/metrics"
                                else outer.slots if self.path == "/slots"
                                else (outer.health_status, "ok"))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def tokens(self, n: float) -> None:
        self.body = ("# TYPE sglang:generation_tokens_total counter\n"
                     f'sglang:generation_tokens_total{{model_name="m"}} {n}\n'
                     "# TYPE sglang:num_running_reqs gauge\n"
                     'sglang:num_running_reqs{dp_rank="0",tp_rank="0"} 4.0\n')

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_engine():
    e = FakeEngine()
    yield e
    e.close()


@pytest.mark.system  # fake_engine: an HTTP server on loopback
async def test_scraper_states_rates_and_counter_reset(fake_engine):
    url = f"http://127.0.0.1:{fake_engine.port}/metrics"
    s = EngineScraper(url, window_s=1000)
    async with httpx.AsyncClient(timeout=2) as client:
        fake_engine.metrics_status = 503
        assert (await s.poll(client, now=0)).state == "starting"
        fake_engine.metrics_status, fake_engine.health_status = 200, 503
        fake_engine.tokens(0)
        assert (await s.poll(client, now=1)).state == "starting"  # metrics up, model not yet
        fake_engine.health_status = 200
        fake_engine.tokens(1000)
        e = await s.poll(client, now=10)
        assert e.state == "ready" and e.flavor == "sglang" and e.running == 4.0
        fake_engine.tokens(3000)
        assert (await s.poll(client, now=20)).tokens_per_s == 200.0
        fake_engine.tokens(500)  # the engine restarted: the counter went back to 0
        e = await s.poll(client, now=30)
        assert e.tokens_per_s == pytest.approx((2000 + 500) / 20)
        fake_engine.body = "<html>oops</html>"
        e = await s.poll(client, now=31)
        assert e.state == "failed" and "not a Prometheus text page" in e.error and url in e.error
        fake_engine.metrics_status = 404
        e = await s.poll(client, now=32)
        assert e.state == "ready" and "--enable-metrics" in e.error


@pytest.mark.system
def test_agent_reports_a_garbage_metrics_page_on_the_job_and_keeps_going(start_agent, fake_engine, reap_jobs):
    fake_engine.body = "<html>this is not prometheus</html>"
    a = start_agent()
    a.ok("configure", jobs=[{"name": "eng", "command": ["sleep", "60"],
                             "metrics_url": f"http://127.0.0.1:{fake_engine.port}/metrics"}])
    a.ok("launch", job="eng")
    snap = a.wait_snapshot(lambda s: (a.job(s, "eng").get("engine") or {}).get("state") == "failed",
                           what="engine failed")
    assert "not a Prometheus text page" in a.job(snap, "eng")["engine"]["error"]
    assert any(al["kind"] == "engine_failed" for al in snap["alerts"])
    fake_engine.tokens(100)  # the page heals: the agent picks it up
    a.wait_snapshot(lambda s: (a.job(s, "eng").get("engine") or {}).get("state") == "ready", what="engine ready")
    assert a.proc.poll() is None


class FloodEngine:
    """A /metrics that never ends well: ``huge`` streams 200 MB in chunks (no length given),
    ``drip`` sends a valid start and then one byte a second."""

    def __init__(self, mode: str) -> None:
        outer = self
        self.mode = mode
        self.stop = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                try:
                    if outer.mode == "huge":
                        line = b'sglang:num_running_reqs{dp_rank="0"} 1.0\n' * 1600  # ~64 KB
                        for _ in range(200 * 2**20 // len(line)):
                            if outer.stop.is_set():
                                return
                            self.wfile.write(line)
                    else:
                        self.wfile.write(b"# TYPE sglang:num_running_reqs gauge\n")
                        while not outer.stop.wait(1.0):
                            self.wfile.write(b"#")
                            self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.system
@pytest.mark.parametrize("mode, reason", [("huge", "MiB limit"), ("drip", "did not arrive whole")])
def test_a_huge_or_endless_metrics_page_fails_the_engine_not_the_agent(start_agent, reap_jobs, mode, reason):
    import psutil

    flood = FloodEngine(mode)
    try:
        a = start_agent()
        a.ok("configure", jobs=[{"name": "eng", "command": ["sleep", "60"], "metrics_url": flood.url}])
        a.ok("launch", job="eng")
        snap = a.wait_snapshot(lambda s: (a.job(s, "eng").get("engine") or {}).get("state") == "failed",
                               timeout=60, what=f"the engine failed on a {mode} page")
        assert reason in a.job(snap, "eng")["engine"]["error"]
        seq = snap["seq"]
        a.wait_snapshot(lambda s: s["seq"] >= seq + 5, timeout=30, what="snapshots going on")
        assert psutil.Process(a.proc.pid).memory_info().rss < 300 * 2**20
        a.proc.stdin.close()
        a.proc.wait(30)  # it leaves with its console (the old agent took up to 90 s)
    finally:
        flood.close()


@pytest.mark.system
def test_non_finite_numbers_become_null_on_the_wire(start_agent, fake_engine, reap_jobs, tmp_path):
    fake_engine.body = ("# TYPE sglang:num_running_reqs gauge\n"
                        'sglang:num_running_reqs{dp_rank="0"} NaN\n'
                        "# TYPE sglang:num_queue_reqs gauge\n"
                        'sglang:num_queue_reqs{dp_rank="0"} +Inf\n'
                        "# TYPE sglang:generation_tokens_total counter\n"
                        "sglang:generation_tokens_total 10\n")
    progress = tmp_path / "progress.json"
    progress.write_text('{"done": 5, "total": 10, "tokens_per_s": NaN, "eta_s": Infinity, "rate_per_s": NaN}')
    a = start_agent()
    a.ok("configure", jobs=[{"name": "eng", "command": ["sleep", "60"], "progress": str(progress),
                             "metrics_url": f"http://127.0.0.1:{fake_engine.port}/metrics"}])
    a.ok("launch", job="eng")
    snap = a.wait_snapshot(lambda s: (a.job(s, "eng").get("engine") or {}).get("state") == "ready"
                           and a.job(s, "eng").get("progress"), what="engine and progress read")
    job = a.job(snap, "eng")
    assert job["engine"]["running"] is None and job["engine"]["queued"] is None
    assert job["progress"]["done"] == 5 and job["progress"]["tokens_per_s"] is None


LLAMA_PAGE = ("# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 10\n"
              "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n")


@pytest.mark.system  # fake_engine: an HTTP server on loopback
async def test_llama_servers_kv_comes_from_slots_and_a_build_without_them_says_unknown(fake_engine):
    """llama-server's /metrics has no KV series: its /slots page says what the busy slots hold.
    A build that answers 501 (started with --no-slots) or 404 is not asked again (its KV reads
    unknown, never 0) until the engine restarts; garbage on /slots is unknown too."""
    import json
    fake_engine.body = LLAMA_PAGE
    s = EngineScraper(f"http://127.0.0.1:{fake_engine.port}/metrics")
    async with httpx.AsyncClient(timeout=2) as client:
        fake_engine.slots = (200, json.dumps([{"id": 0, "n_ctx": 100, "is_processing": True, "n_prompt_tokens": 30,
                                               "next_token": [{"n_decoded": 20}]},
                                              {"id": 1, "n_ctx": 100, "is_processing": False}]))
        e = await s.poll(client)
        assert (e.flavor, e.running, e.kv_usage) == ("llamacpp", 1, 0.25)
        fake_engine.slots = (200, "not json")
        assert (await s.poll(client)).kv_usage is None
        fake_engine.slots = (501, '{"error": "slots endpoint is disabled"}')
        assert (await s.poll(client)).kv_usage is None
        asked = fake_engine.asked.count("/slots")
        for _ in range(3):
            e = await s.poll(client)
            assert e.state == "ready" and e.kv_usage is None
        assert fake_engine.asked.count("/slots") == asked  # not asked again
