"""``_SUCCESS``: the completion marker a built-in worker writes at a clean end (every record
done, every upload in S3; for generate, enough of them useful, else ``_QUALITY``), in its output directory and, with ``--s3``, under its S3 prefix, so
a job that runs ``after`` it on another node sees it finished ok (agents/watch/phases.py).

Crash ordering: the marker is written last, after the done-set is closed and the uploads have
drained; a worker killed before that leaves none, and a run that starts again removes the old
ones, in its directory and under its S3 prefix, once it holds its fence claim (common/fence.py,
``on_claim``) and before it writes anything: a marker never says more than the output holds."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any, Callable, Optional

from ...contract.atomic import atomic_write_json
from ...contract.jobs import MARKER, QUALITY_MARKER

log = logging.getLogger(__name__)


def clear(out_dir: str, client: Any = None, s3_loc: Any = None) -> None:
    """A run begins: the last run's markers no longer say what the output holds. With
    ``client`` and ``s3_loc`` (an S3Location) the one under the prefix goes too; an error of S3
    propagates (the claim is not done until the marker is gone, and is tried again)."""
    for name in (MARKER, QUALITY_MARKER):
        try:
            os.unlink(os.path.join(out_dir, name))
        except FileNotFoundError:
            pass
        if client is not None and s3_loc is not None:
            client.delete_object(Bucket=s3_loc.bucket, Key=s3_loc.key(name))  # no error when absent


def write(out_dir: str, counts: dict[str, Any], s3_loc: Any = None, endpoint_url: Optional[str] = None,
          stored: Optional[Callable[[str, int], None]] = None) -> bool:
    """The marker in ``out_dir`` and, with ``s3_loc`` (an S3Location), under its prefix. False
    (said in the log) when one could not be written: the run's output is complete all the same.
    ``stored(name, bytes)``: told of the object put in S3 (the uploader's count of the prefix)."""
    return _put(MARKER, {"ok": True, "at": time.time(), "host": socket.gethostname(), "counts": counts}, out_dir,
                s3_loc, endpoint_url, stored)


def write_quality(out_dir: str, figures: dict[str, Any], s3_loc: Any = None,
                  endpoint_url: Optional[str] = None, stored: Optional[Callable[[str, int], None]] = None) -> bool:
    """``_QUALITY`` instead of the marker: the run ended with every record done but too few of
    them useful (generate's ``--min-useful-pct``); ``figures`` say how many and why. Where
    ``_SUCCESS`` would be, so a job after it on another node finds it and is blocked."""
    return _put(QUALITY_MARKER, {"ok": False, "at": time.time(), "host": socket.gethostname(), **figures}, out_dir,
                s3_loc, endpoint_url, stored)


def _put(name: str, doc: dict[str, Any], out_dir: str, s3_loc: Any, endpoint_url: Optional[str],
         stored: Optional[Callable[[str, int], None]] = None) -> bool:
    ok = True
    try:
        atomic_write_json(os.path.join(out_dir, name), doc)
    except OSError as exc:
        log.error("cannot write %s in %s: %s", name, out_dir, exc)
        ok = False
    if s3_loc is not None:
        from .s3sync.remote import describe_error, make_client
        try:
            body = json.dumps(doc).encode()
            make_client(endpoint_url).put_object(Bucket=s3_loc.bucket, Key=s3_loc.key(name), Body=body)
            if stored is not None:
                stored(name, len(body))
        except Exception as exc:  # noqa: BLE001 -- boto3's errors are many; the message says which
            log.error("cannot write %s: %s", s3_loc.url(name), describe_error(exc))
            ok = False
    return ok
