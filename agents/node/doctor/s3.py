"""The s3 line: credentials found (never printed) and a HEAD of the bucket."""

from __future__ import annotations

import os
from typing import Optional
from urllib.parse import urlsplit

from ...contract.jobs import JobSpec
from ...contract.ops import Check
from ...contract.watching import redact_url
from .base import FAIL, OK


_CRED_KEYS = {"AWS_ACCESS_KEY_ID": "aws_access_key_id", "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
              "AWS_SESSION_TOKEN": "aws_session_token", "AWS_PROFILE": "profile_name",
              "AWS_DEFAULT_REGION": "region_name"}


def check_s3(spec: JobSpec, environ: Optional[dict[str, str]] = None) -> Check:
    """Credentials found (as the job will: its env over the agent's) and a HEAD of the bucket.
    No credential is ever part of the line."""
    url = str(spec.worker.s3 if spec.worker is not None else None)
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        return Check("s3", FAIL, f"{url!r} is not an S3 URL", "s3 = \"s3://bucket/prefix\"", job=spec.name)
    bucket = parts.netloc
    env = {**(os.environ if environ is None else environ), **spec.env}
    try:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        return Check("s3", FAIL, "boto3 is not installed for the agent's python",
                     "gpudeck deploy (it installs the s3 extra for a job with s3)", job=spec.name)
    kwargs = {arg: env[key] for key, arg in _CRED_KEYS.items() if env.get(key)}
    endpoint = (spec.worker.s3_endpoint if spec.worker is not None else None) or env.get("AWS_ENDPOINT_URL_S3") or env.get(
        "AWS_ENDPOINT_URL")
    try:
        session = boto3.session.Session(**kwargs)
        creds = session.get_credentials()
    except BotoCoreError as exc:  # a profile that is not there
        return Check("s3", FAIL, f"no S3 credentials for {bucket}: {exc}",
                     "set AWS_PROFILE to a profile of the node's ~/.aws, or the keys in the job's env", job=spec.name)
    if creds is None:
        return Check("s3", FAIL, f"no S3 credentials for {bucket}: none in the job's env, the agent's environment, "
                                 f"~/.aws or an instance role",
                     "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the job's env (env = {...}), or write the "
                     "node's ~/.aws/credentials", job=spec.name)
    cfg = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 1},
                 s3={"addressing_style": "path"} if endpoint else None)
    where = f"s3://{bucket} at {redact_url(endpoint) or 'AWS'}"
    try:
        client = session.client("s3", endpoint_url=endpoint or None, config=cfg,
                                region_name=kwargs.get("region_name") or env.get("AWS_REGION") or "us-east-1")
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("403", "AccessDenied", "Forbidden"):
            return Check("s3", FAIL, f"{where}: access denied with the credentials from {creds.method}",
                         "the credentials need s3:ListBucket, s3:GetObject and s3:PutObject on the bucket",
                         job=spec.name)
        if code in ("404", "NoSuchBucket", "NotFound"):
            return Check("s3", FAIL, f"{where}: no such bucket", "create it, or correct s3 in the fleet file",
                         job=spec.name)
        return Check("s3", FAIL, f"{where}: {code or 'refused'}", "check the endpoint and region", job=spec.name)
    except BotoCoreError as exc:
        return Check("s3", FAIL, f"{where}: cannot reach it: {exc}",
                     "check s3_endpoint and the node's network (a proxy? HTTPS_PROXY)", job=spec.name)
    return Check("s3", OK, f"{where}: reachable with the credentials from {creds.method}", job=spec.name)

