"""What a job's S3 prefix holds: the uploader counts its own uploads on top of the run's one
listing at its start and never lists again; the fleet file's price; the console's figures.
A fake S3 client in memory: no server (tests/system/test_s3_inventory.py uses moto)."""

from __future__ import annotations

import pytest

from gpudeck.agents.contract.wire import JobStatus, Progress, Uploads
from gpudeck.agents.workers.common.s3sync.remote import S3Location
from gpudeck.agents.workers.common.s3sync.uploader import ShardUploader
from gpudeck.console import cost
from gpudeck.remote.fleet import parse_fleet
from gpudeck.remote.fleet_check import FleetError


class Client:
    """The S3 calls the uploader makes, recorded; a listing is a failure of this test."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def upload_file(self, path, bucket, key):
        self.calls.append(f"upload {key}")

    def put_object(self, Bucket, Key, Body):  # noqa: N803 -- boto3's names
        self.calls.append(f"put {Key}")

    def __getattr__(self, name):
        raise AssertionError(f"the uploader called {name}: it never lists (nor reads) the prefix")


def test_the_uploader_counts_its_uploads_on_the_start_s_listing_and_never_lists(tmp_path):
    client = Client()
    up = ShardUploader(str(tmp_path), S3Location("b", "run"), ids_of=lambda n: [], client_factory=lambda: client)
    assert up.status().stored_bytes is None  # not listed (yet, or a failed listing): not known
    up.inventory({"old/part-0.bin": 1000, "shard-000000.jsonl": 50})
    up.start()
    try:
        for i, size in ((0, 70), (1, 30)):  # shard 0 again (a relaunch's): replaced, not added
            (tmp_path / f"shard-00000{i}.jsonl").write_bytes(b"x" * size)
            up.submit(f"shard-00000{i}.jsonl", [f"id{i}"])
        assert up.drain(30)
        st = up.status()
    finally:
        up.stop()
    assert "upload run/shard-000001.jsonl" in client.calls and "put run/done.txt" in client.calls
    done = len((tmp_path / "done-uploaded.txt").read_bytes())
    manifest = len((tmp_path / "uploaded.txt").read_bytes())
    assert st.stored_objects == 5  # old, shard 0, shard 1, done.txt, the manifest
    assert st.stored_bytes == 1000 + 70 + 30 + done + manifest and st.stored_listed_at is not None
    assert st.to_json()["stored_bytes"] == st.stored_bytes


def test_the_monthly_cost_at_the_fleet_s_price_and_the_fleet_s_bytes_each_job_once():
    f = parse_fleet("[defaults]\ns3_price_per_gb_month = 0.0125\n", "f.toml")
    assert f.s3_price_per_gb_month == 0.0125 and parse_fleet("", "f.toml").s3_price_per_gb_month == 0.023
    with pytest.raises(FleetError, match=r"f.toml:2: \[defaults\] 's3_price_per_gb_month': expected a finite number"):
        parse_fleet("[defaults]\ns3_price_per_gb_month = -1\n", "f.toml")
    p = Progress(done=1, uploads=Uploads(stored_objects=1234, stored_bytes=645_000_000_000, stored_listed_at=5.0))
    doc = cost.s3_json(p, 0.023)
    assert (doc["s3_objects"], doc["s3_bytes"], doc["s3_cost_per_month"]) == (1234, 645_000_000_000, 14.835)
    assert cost.s3_json(Progress(done=1), 0.023)["s3_cost_per_month"] is None  # not known: never $0
    old = JobStatus("gen", "generate", "fenced", progress=p)  # moved: the old node's figure, and the new one's
    new = JobStatus("gen", "generate", "running", progress=Progress(done=2, uploads=Uploads(
        stored_bytes=700_000_000_000, stored_listed_at=9.0)))
    ext = JobStatus("ext", "extract", "running", progress=Progress(done=1, uploads=Uploads(stored_bytes=5)))
    assert cost.fleet_s3([old, new, ext]) == 700_000_000_005
