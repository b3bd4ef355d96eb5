"""One S3 server for every test: moto's S3 in server mode on 127.0.0.1, driven through boto3
over real HTTP, and the environment a worker gets to reach it."""

from __future__ import annotations

import os
from typing import Optional

import pytest

from support.core import read_jsonl_strict

S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
          "AWS_SESSION_TOKEN": "testing"}
# what would point boto3 anywhere else than the test's server
DROP_ENV = ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE",
            "AWS_SHARED_CREDENTIALS_FILE", "GPUDECK_PROGRESS_FILE")


class MotoS3:
    """moto's S3 in server mode on 127.0.0.1, driven through boto3 over real HTTP."""

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.reset()

    def reset(self) -> None:
        """moto keeps its buckets per process, not per server: start each test empty."""
        import httpx
        httpx.post(self.endpoint + "/moto-api/reset", timeout=10).raise_for_status()

    def client(self):
        import boto3
        return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                     region_name="us-east-1").client("s3", endpoint_url=self.endpoint)

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        c = self.client()
        out = {}
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", ()):
                out[obj["Key"]] = c.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
        return out

    def shards(self, bucket: str, prefix: str) -> dict[str, list[dict]]:
        out = {}
        for key, data in self.objects(bucket, prefix + "/").items():
            name = key[len(prefix) + 1:]
            if name.startswith("shard-"):
                out[name] = read_jsonl_strict(data, f"s3://{bucket}/{key}")
        return out

    def done_ids(self, bucket: str, prefix: str) -> Optional[set[str]]:
        try:
            data = self.client().get_object(Bucket=bucket, Key=f"{prefix}/done.txt")["Body"].read()
        except Exception:
            return None
        return {line for line in data.decode().split("\n") if line}

    def stop(self) -> None:
        self.server.stop()

    # the extraction tests' names for the same reads
    ENV = S3_ENV

    def keys(self, bucket: str, prefix: str) -> list[str]:
        return sorted(self.objects(bucket, prefix))

    def get(self, bucket: str, key: str) -> bytes:
        return self.client().get_object(Bucket=bucket, Key=key)["Body"].read()


@pytest.fixture(scope="session")
def _moto_server():
    """One moto server per test process (per xdist worker): starting one costs about a second,
    and moto keeps its state per process anyway. Each test gets it empty (moto_s3)."""
    s3 = MotoS3()
    yield s3
    s3.stop()


@pytest.fixture
def moto_s3(monkeypatch, _moto_server):
    for k in DROP_ENV:
        monkeypatch.delenv(k, raising=False)
    for k, v in S3_ENV.items():
        monkeypatch.setenv(k, v)
    _moto_server.reset()
    yield _moto_server
    _moto_server.reset()
