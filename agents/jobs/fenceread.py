"""Whether a launch on this node would take back a job that was moved away (the rule:
agents/contract/fencing.py, ``refusal``): read before the worker starts, so that the
operator's ``launch`` or ``relaunch``, a watcher's restart and a phase's start are refused
with the reason, instead of starting a worker that stops at its claim.

The id is read where the worker claims it: ``OUT/_attempt`` (``OUT/part-I-of-N`` for a part)
or ``<prefix>/_attempt`` in S3, with the job's own S3 settings. A read that cannot be made
(no boto3 for the agent's python, S3 out of reach) refuses nothing: the worker checks again
at its claim and stops there, fenced."""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

from ..contract.fencing import ENV, FENCE_NAME, new_attempt_id, refusal
from ..contract.jobs import JobKind, JobSpec

log = logging.getLogger("agents")

S3_TIMEOUT_S = 5.0  # one short try: a launch waits for it


def launch_refusal(spec: JobSpec, node: str, cwd: str) -> Optional[str]:
    """Why ``spec`` may not start on ``node`` (its output is another node's since a move), or None."""
    if spec.kind not in (JobKind.GENERATE, JobKind.EXTRACT):
        return None
    opts = spec.options
    given = (spec.env.get(ENV) or "").strip()
    try:
        theirs = _read(opts, spec.env, cwd)
    except Exception as exc:  # noqa: BLE001 -- boto3's errors are many: the worker's claim checks again
        log.info("job %s: the output's attempt id could not be read before the launch (%s); the worker "
                 "checks it at its start", spec.name, exc)
        return None
    return refusal(theirs, given or new_attempt_id(node), bool(given))


def _read(opts: Any, env: dict[str, str], cwd: str) -> Optional[str]:
    """The id beside the output, read by the stores the worker's own claim reads (common/fence.py)."""
    from ..workers.common.fence import FileStore, S3Store
    from ..workers.common.parts import part_name
    from ..workers.common.s3sync.remote import S3Location

    part = getattr(opts, "part", None)
    s3 = getattr(opts, "s3", None)
    if s3:
        loc = S3Location.parse(s3)
        if part:
            loc = S3Location(loc.bucket, loc.key(part_name(part)))
        client = s3_client(getattr(opts, "s3_endpoint", None), env)
        return S3Store(client, loc.bucket, loc.key(FENCE_NAME)).read()
    out = getattr(opts, "out", None)
    if not out:
        return None
    return FileStore(os.path.join(cwd, os.path.expanduser(out), *([part_name(part)] if part else []))).read()


def s3_client(endpoint: Optional[str], env: dict[str, str]) -> Any:
    """A boto3 client with a job's own S3 settings (as its worker will have them: ``endpoint``,
    its ``s3_endpoint``; ``env``, its environment over the agent's) and one short try: a launch,
    and a tick of the phases, wait for it."""
    import boto3  # the `s3` extra; an ImportError refuses nothing (launch_refusal)
    from botocore.config import Config

    def get(name: str) -> Optional[str]:
        return env.get(name) or os.environ.get(name) or None

    session = boto3.session.Session(aws_access_key_id=get("AWS_ACCESS_KEY_ID"),
                                    aws_secret_access_key=get("AWS_SECRET_ACCESS_KEY"),
                                    aws_session_token=get("AWS_SESSION_TOKEN"),
                                    region_name=get("AWS_DEFAULT_REGION") or get("AWS_REGION") or "us-east-1")
    cfg = Config(retries={"max_attempts": 1}, connect_timeout=S3_TIMEOUT_S, read_timeout=S3_TIMEOUT_S,
                 s3={"addressing_style": "path"} if endpoint else None)
    return session.client("s3", endpoint_url=endpoint or get("AWS_ENDPOINT_URL_S3") or get("AWS_ENDPOINT_URL"),
                          config=cfg)
