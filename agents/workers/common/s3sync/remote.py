"""S3 itself: where (:class:`S3Location`), a client, one-line errors without secrets, the
listing of shards already uploaded, and the restore of a done-set on a fresh node (the
layout and the ordering rules are in the package docstring, ``common/s3sync/__init__.py``).
boto3 is imported inside the functions that need it.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional
from urllib.parse import urlsplit

from ....contract.atomic import atomic_write_bytes
from ..doneset import encode_id, read_ids
from ..shards import ANY_SHARD_NUMBER

log = logging.getLogger("gpudeck.s3")

MANIFEST = "uploaded.txt"  # local and remote name of the manifest
UPLOADED_DONE = "done-uploaded.txt"
REMOTE_DONE = "done.txt"
_USERINFO = re.compile(r"://[^/@\s]+@")


class S3Error(RuntimeError):
    """An S3 operation failed; the message names the bucket/key and the S3 error."""


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str = ""  # without leading or trailing '/'

    @classmethod
    def parse(cls, url: str) -> "S3Location":
        """``s3://bucket/some/prefix`` -> S3Location('bucket', 'some/prefix')."""
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise ValueError(f"{url!r} is not an S3 URL; expected s3://bucket/prefix")
        return cls(parts.netloc, parts.path.strip("/"))

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def url(self, name: str = "") -> str:
        return f"s3://{self.bucket}/{self.key(name)}" if name else f"s3://{self.bucket}/{self.prefix}"


def make_client(endpoint_url: Optional[str] = None, region: Optional[str] = None) -> Any:
    """A boto3 S3 client. ``endpoint_url`` (or $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL, which
    boto3 reads itself) points it at an S3-compatible store. botocore's own retries are kept
    short: the uploader retries with its own, longer backoff."""
    import boto3
    from botocore.config import Config

    cfg = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=10, read_timeout=60,
                 s3={"addressing_style": "path"} if endpoint_url else None)
    kwargs: dict[str, Any] = {"config": cfg}
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    if region or not os.environ.get("AWS_DEFAULT_REGION") and not os.environ.get("AWS_REGION"):
        kwargs["region_name"] = region or "us-east-1"
    return boto3.session.Session().client("s3", **kwargs)


def drain_timeout_s() -> float:
    """How long a finishing worker waits for its uploads: $GPUDECK_S3_DRAIN_S, default 600."""
    try:
        value = float(os.environ.get("GPUDECK_S3_DRAIN_S", "600"))
    except ValueError:
        return 600.0
    return value if value >= 0 and value == value else 600.0


def describe_error(exc: BaseException) -> str:
    """One line for an S3 failure, without anything secret (boto3 never puts keys in its
    messages; the endpoint is redacted where it appears). The console's ``describe_error``
    (console/app.py) shares only the name: it words a node's reply for the operator."""
    resp = getattr(exc, "response", None)  # botocore's connection errors carry response=None
    err = resp.get("Error") if isinstance(resp, dict) else None
    code = err.get("Code") if isinstance(err, dict) else None
    try:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except Exception:  # noqa: BLE001 -- an exception whose __str__ fails still gets a line
        text = type(exc).__name__
    text = _USERINFO.sub("://", text)  # an endpoint given as http://key:secret@host stays secret
    return f"{code}: {text}" if code and code not in text else text


def _is_missing(exc: BaseException, bucket_too: bool = True) -> bool:
    """The object (or, with ``bucket_too``, its whole bucket) does not exist: nothing to read."""
    resp = getattr(exc, "response", None)
    err = resp.get("Error") if isinstance(resp, dict) else None
    codes = ("404", "NoSuchKey", "NotFound") + (("NoSuchBucket",) if bucket_too else ())
    return isinstance(err, dict) and err.get("Code") in codes


def list_objects(client: Any, loc: S3Location) -> dict[str, int]:
    """Every object under the prefix (those of ``part-I-of-N/`` and other folders too): its
    name after the prefix -> its bytes. A bucket that does not exist holds none."""
    objects: dict[str, int] = {}
    prefix = loc.key("")
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=loc.bucket, Prefix=prefix):
            for obj in page.get("Contents", ()):
                objects[obj["Key"][len(prefix):]] = int(obj.get("Size") or 0)
    except Exception as exc:  # botocore raises ClientError, EndpointConnectionError, NoCredentialsError...
        if _is_missing(exc):  # no bucket yet: no shards (uploads will say why they fail)
            return {}
        raise S3Error(f"cannot list {loc.url()}: {describe_error(exc)}") from None
    return objects


def shards_of(objects: dict[str, int]) -> dict[int, str]:
    """The shards among a listing's objects: shard number -> file name (any extension)."""
    shards: dict[int, str] = {}
    for name in objects:
        m = ANY_SHARD_NUMBER.match(name)
        if m and "/" not in name:
            shards[int(m.group(1))] = name
    return shards


def list_shards(client: Any, loc: S3Location) -> dict[int, str]:
    """The shards already under the prefix: shard number -> file name (any extension)."""
    return shards_of(list_objects(client, loc))


def list_shard_numbers(client: Any, loc: S3Location) -> set[int]:
    return set(list_shards(client, loc))


def _get_object(client: Any, loc: S3Location, name: str) -> Optional[bytes]:
    """The object's bytes, or None when it does not exist."""
    try:
        return client.get_object(Bucket=loc.bucket, Key=loc.key(name))["Body"].read()
    except Exception as exc:
        if _is_missing(exc):
            return None
        raise S3Error(f"cannot read {loc.url(name)}: {describe_error(exc)}") from None


@dataclass(frozen=True)
class Restored:
    ids: int  # ids in the restored done-set
    shards: int  # shards found in S3
    orphans: list[str]  # shards in S3 that done.txt did not cover yet; their ids were added


def restore_done_set(client: Any, loc: S3Location, out_dir: str, done_name: str,
                     ids_of_file: Callable[[str], Iterable[str]]) -> Optional[Restored]:
    """On a node without a local done-set: rebuild it from S3 and install it as both the
    worker's done-set (``out_dir/done_name``) and ``done-uploaded.txt``, with the remote
    manifest as the local one. Returns None when S3 holds neither a done-set nor shards (a
    first run). Orphan shards (see rule 4) are downloaded to a temp file and read with
    ``ids_of_file(path)``. The worker's done-set is written last: its presence means the
    restore is complete."""
    done = _get_object(client, loc, REMOTE_DONE)
    manifest = _get_object(client, loc, MANIFEST)
    shards = list_shards(client, loc)
    if done is None and not shards:
        return None
    done = (done or b"")[:(done or b"").rfind(b"\n") + 1]
    listed = {n for n in (manifest or b"").decode(errors="replace").split("\n") if n}
    orphans = sorted(name for name in shards.values() if name not in listed)
    extra: list[str] = []
    tmp = os.path.join(out_dir, ".orphan.download")
    for name in orphans:
        try:
            client.download_file(loc.bucket, loc.key(name), tmp)
            extra.extend(ids_of_file(tmp))
        except Exception as exc:
            raise S3Error(f"cannot read the ids of {loc.url(name)}: {describe_error(exc)}") from None
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        log.warning("%s was uploaded but not yet in %s: its ids are restored from the shard itself",
                    loc.url(name), REMOTE_DONE)
    data = done + "".join(encode_id(i) + "\n" for i in extra).encode("utf-8", errors="surrogateescape")
    atomic_write_bytes(os.path.join(out_dir, MANIFEST), "".join(n + "\n" for n in sorted(listed | set(orphans))).encode())
    atomic_write_bytes(os.path.join(out_dir, UPLOADED_DONE), data)
    atomic_write_bytes(os.path.join(out_dir, done_name), data)
    return Restored(ids=len(read_ids(os.path.join(out_dir, done_name))), shards=len(shards), orphans=orphans)


def read_manifest(out_dir: str) -> set[str]:
    path = os.path.join(out_dir, MANIFEST)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return set()
    end = data.rfind(b"\n") + 1  # a half-written last name: that upload is simply redone
    return {n for n in data[:end].decode(errors="replace").split("\n") if n}
