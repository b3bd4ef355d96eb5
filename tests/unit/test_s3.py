"""S3 through boto3 against moto's server mode on loopback (real HTTP): uploads that fail and
then succeed, the ordering of shards and done-set, restore on a fresh node.

The unit tier's tests of this file (starts nothing); the others are in tests/system/test_s3.py."""

from __future__ import annotations

import pytest

from gpudeck.agents.workers.common import s3sync


def test_describe_error_takes_connection_errors_that_carry_no_response():
    pytest.importorskip("botocore", reason="S3 goes through boto3 (pip install '.[s3]')")
    from botocore.exceptions import ConnectionClosedError, ReadTimeoutError
    for exc in (ConnectionClosedError(endpoint_url="http://s3.example:9000/runs/k"),
                ReadTimeoutError(endpoint_url="http://user:pw@s3.example:9000/runs/k")):
        assert exc.response is None  # what made the uploader thread die
        text = s3sync.describe_error(exc)
        assert "s3.example" in text and "pw" not in text
    assert not s3sync._is_missing(ConnectionClosedError(endpoint_url="http://x"))
