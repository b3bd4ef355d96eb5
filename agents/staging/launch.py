"""What the supervisor does for a job with a ``stage``: check it before anything starts, and put
the staging step at the head of the job's command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

from ..contract.atomic import atomic_write_json
from ..contract.jobs import JobSpec
from ..contract.staging import STAGE_PLAN_FILE, STAGING_FILE
from .plan import StageRefused, check


def launch_refusal(spec: JobSpec, home: Path) -> Optional[str]:
    """Why ``spec``'s stage cannot be done (a source that cannot be read, a copy that does not
    fit), before anything is copied or started; None when it can."""
    if not spec.stage:
        return None
    try:
        check(spec.stage, home, spec.stage_reserve_gb, spec.name, lambda: s3_client(spec.env))
    except StageRefused as exc:
        return str(exc)
    return None


def s3_client(env: dict[str, str]) -> Any:
    """An S3 client as the job's own process makes it: the job's ``env`` over the agent's (its
    credentials, ``AWS_ENDPOINT_URL_S3`` for an S3-compatible store)."""
    import boto3
    from botocore.config import Config

    merged = {**os.environ, **env}
    endpoint = merged.get("AWS_ENDPOINT_URL_S3") or merged.get("AWS_ENDPOINT_URL")
    session = boto3.session.Session(
        aws_access_key_id=merged.get("AWS_ACCESS_KEY_ID"), aws_secret_access_key=merged.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=merged.get("AWS_SESSION_TOKEN"), profile_name=env.get("AWS_PROFILE"),
        region_name=merged.get("AWS_DEFAULT_REGION") or merged.get("AWS_REGION") or "us-east-1")
    cfg = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=10, read_timeout=60,
                 s3={"addressing_style": "path"} if endpoint else None)
    return session.client("s3", endpoint_url=endpoint, config=cfg)


def staged_argv(spec: JobSpec, job_dir: Path, home: Path, argv: list[str]) -> list[str]:
    """The command line that runs: ``argv`` itself, or the staging step, which ``exec``\\ s it
    once the stage is in place. Writes the step's plan; the last attempt's report goes."""
    (job_dir / STAGING_FILE).unlink(missing_ok=True)
    if not spec.stage:
        (job_dir / STAGE_PLAN_FILE).unlink(missing_ok=True)
        return list(argv)
    plan = job_dir / STAGE_PLAN_FILE
    atomic_write_json(plan, {"job": spec.name, "home": str(home), "reserve_gb": spec.stage_reserve_gb,
                             "max_mb_s": spec.stage_max_mb_s, "items": [i.to_dict() for i in spec.stage]})
    return [sys.executable, "-m", "gpudeck.agents.staging", str(plan), "--", *argv]
