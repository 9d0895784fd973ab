"""AWS as an operator command reaches it (`steward admin ...`, which acts on the
deployment's tables directly): whether this process has a region and credentials at all,
and botocore's failures as one line instead of a traceback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from steward.domain.errors import StewardError


class AwsNotConfigured(StewardError):
    """No region or no credentials: the command cannot reach the deployment."""

    status = 400
    code = "not_configured"


class AwsFailure(StewardError):
    """AWS refused or could not be reached."""

    status = 502
    code = "aws"


def require_configured(advice: str, *, aws_region_set: bool = False) -> None:
    """A region and credentials as boto3 resolves them (environment, profile, SSO, a role),
    else AwsNotConfigured naming what is missing, followed by `advice`; `aws_region_set`
    (the composition root reads the environment) adds that boto3 ignores AWS_REGION."""
    try:
        session = boto3.session.Session()
        found = {"region": session.region_name, "credentials": session.get_credentials()}
    except BotoCoreError as exc:  # a named profile that does not exist, a broken config file
        raise AwsNotConfigured(f"AWS settings unusable ({exc}): {advice}") from None
    missing = [what for what, value in found.items() if not value]
    if missing:
        # botocore reads AWS_DEFAULT_REGION (or a profile's region), never AWS_REGION
        note = (
            " (AWS_REGION is set, but boto3 reads AWS_DEFAULT_REGION)"
            if "region" in missing and aws_region_set
            else ""
        )
        raise AwsNotConfigured(f"no AWS {' or '.join(missing)} configured{note}: {advice}")


@contextlib.contextmanager
def failures_as_errors() -> Iterator[None]:
    """Raise AwsFailure (one line) for whatever botocore raises inside."""
    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = error.get("Code", "error")
        hint = " (is STEWARD_TABLE_PREFIX the deployment's?)" if code == "ResourceNotFoundException" else ""
        raise AwsFailure(f"{code}: {error.get('Message') or exc}{hint}") from None
    except BotoCoreError as exc:
        raise AwsFailure(str(exc)) from None
