"""S3 for the workers: closed shards and the done-set go up in a background thread, and a
fresh node gets its done-set back.

Layout under ``s3://bucket/prefix/``::

    shard-000000.jsonl ...   closed shards, uploaded once each, never overwritten
    done.txt                 the ids of the records in the shards *that are in S3*
    uploaded.txt             the names of the shards whose ids ``done.txt`` holds

Local bookkeeping, beside the worker's own done-set, in its output directory::

    uploaded.txt             names of the files uploaded so far (the manifest), one per line
    done-uploaded.txt        the done-set of uploaded shards: what ``done.txt`` in S3 holds

Ordering rules (each one is what makes a kill -9 at any moment harmless):

1. A shard is uploaded only after it is closed (renamed to its final name).
2. After its upload succeeds, its ids are appended to ``done-uploaded.txt`` (fsynced), and
   only then its name to ``uploaded.txt`` (fsynced). A crash between the two uploads the
   shard again on restart (same key, same bytes) and repeats its ids: harmless. The other
   order could mark a shard uploaded whose ids never reach S3's done-set, and a fresh node
   would generate those records a second time.
3. ``done.txt`` in S3 is a copy of ``done-uploaded.txt``, never of the worker's own
   done-set, which also holds ids of records still in local, unuploaded shards. A fresh node
   restores it and skips exactly the records that S3 has.
4. ``done.txt`` goes up before ``uploaded.txt``. A shard in S3 that ``uploaded.txt`` does
   not list (uploaded just before a crash, before the done-set caught up) is an orphan:
   :func:`restore_done_set` downloads it and adds its ids, so a fresh node never generates
   its records again.
5. On a fresh node the next shard number comes after every shard number already in S3
   (:func:`list_shards`), so nothing uploaded is overwritten.

A failed upload is retried with exponential backoff (capped, with jitter) for as long as
the worker lives; the producer never waits on S3. On restart, closed shards missing from
the manifest are queued again (:meth:`ShardUploader.resume`).

The modules: remote.py (locations, client, errors, listing, restore), uploader.py
(:class:`ShardUploader`), start.py (what a worker does with ``--s3`` before its first
shard: restore, shard numbers already taken, the uploader; the same for every program).

Credentials come from boto3's usual chain (environment, shared files, instance roles) and
never appear in a message: errors name the bucket, key and the S3 error, nothing else.
boto3 is imported inside the functions that need it.
"""

from .remote import (MANIFEST, REMOTE_DONE, UPLOADED_DONE, Restored, S3Error,
                                                         S3Location, _is_missing, describe_error, drain_timeout_s,
                                                         list_shard_numbers, list_shards, make_client, read_manifest,
                                                         restore_done_set)
from ....contract.watching import redact_url  # the contract's: the doctor says endpoints the same way
from .uploader import ShardUploader, UploadStatus

__all__ = ["MANIFEST", "REMOTE_DONE", "UPLOADED_DONE", "Restored", "S3Error", "S3Location", "ShardUploader",
           "UploadStatus", "_is_missing", "describe_error", "drain_timeout_s", "list_shard_numbers", "list_shards",
           "make_client", "read_manifest", "redact_url", "restore_done_set"]
