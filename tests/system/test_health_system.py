"""A real generate job of a fleet file against two sim engines and moto's S3: one engine is
killed, so it rests, and the bucket does not exist, so every upload fails and the backlog
grows. `gpudeck status --json` and the plain `status` show both, and the node raises
``s3_backlog`` and ``servers_resting``; once the bucket exists the backlog drains and the
``s3_backlog`` alert clears."""

from __future__ import annotations

import json
import textwrap

import pytest

from support.cli import gpudeck
from support.generate import write_prompts
from support.wait import wait_for

pytestmark = pytest.mark.system

BUCKET = "health"


@pytest.mark.timeout(300)
def test_status_shows_a_generate_job_s_backlog_and_its_resting_server(tmp_path, home, moto_s3, sim_engines):
    steady = sim_engines("--latency-ms", "20")
    doomed = sim_engines("--latency-ms", "20")
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out"
    write_prompts(prompts, 3000)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(textwrap.dedent(f'''
        [defaults]
        home = "{home}"
        nvml = false
        interval = 0.2

        [alerts]
        s3_backlog_s = 1
        servers_resting_pct = 25
        servers_resting_s = 1

        [[jobs]]
        name = "gen"
        kind = "generate"
        servers = ["{steady.url}", "{doomed.url}"]
        prompts = "{prompts}"
        out = "{out}"
        concurrency = 4
        max_tokens = 16
        shard_size = 50
        s3 = "s3://{BUCKET}/run"
        s3_endpoint = "{moto_s3.endpoint}"
    '''))
    f = ("-f", str(fleet))

    def status() -> dict:
        r = gpudeck("status", "--json", *f, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        return json.loads(r.stdout)

    def job(doc: dict) -> dict:
        return next(j for j in doc["jobs"] if j["name"] == "gen")

    gpudeck("launch", "gen", *f)
    try:
        wait_for(lambda: doomed.metric("sglang:num_requests_total") >= 20, 90, what="the second server to get work")
        doomed.kill()

        def both_shown():
            doc = status()
            j, kinds = job(doc), {a["kind"] for a in doc["alerts"]}
            u = j["uploads"]
            ok = (u is not None and u["pending"] >= 2 and u["failures"] > 0 and j["servers_resting"] == 1
                  and {"s3_backlog", "servers_resting"} <= kinds)
            return doc if ok else None

        doc = wait_for(both_shown, 120, interval=0.5, what="the backlog and the resting server in status --json",
                       detail=lambda: json.dumps(status(), indent=1)[-4000:])
        j = job(doc)
        assert j["servers_total"] == 2
        (dead,) = [s for s in j["servers"] if s["state"] != "ok"]
        assert dead["url"] == doomed.url and dead["down_since"] is not None and dead["last_error"]
        u = j["uploads"]
        assert u["pending_bytes"] > 0 and u["oldest_pending_at"] is not None and "NoSuchBucket" in u["last_error"]
        backlog = next(a for a in doc["alerts"] if a["kind"] == "s3_backlog")
        assert backlog["job"] == "gen" and "waiting to go to S3" in backlog["message"]
        resting = next(a for a in doc["alerts"] if a["kind"] == "servers_resting")
        assert "1/2 servers resting or failing" in resting["message"] and doomed.url in resting["message"]

        text = gpudeck("status", *f, check=False).stdout
        assert "  s3: " in text and "waiting, the oldest for" in text, text
        assert f"  servers: 1/2 resting; {doomed.url}" in text, text

        # the bucket appears: the backlog drains, the alert clears
        moto_s3.client().create_bucket(Bucket=BUCKET)

        def drained():
            doc = status()
            u = job(doc)["uploads"]
            return u is not None and u["pending"] == 0 and u["last_upload_at"] is not None and \
                not any(a["kind"] == "s3_backlog" for a in doc["alerts"])

        wait_for(drained, 120, interval=0.5, what="the backlog drained and its alert cleared",
                 detail=lambda: json.dumps(status(), indent=1)[-4000:])
    finally:
        gpudeck("kill", "gen", *f, check=False)
