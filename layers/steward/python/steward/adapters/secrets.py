"""Secrets Manager, read through Powertools' `SecretsProvider` with a bounded cache age.

One adapter for every secret Steward keeps there (the GitHub App key, the webhook secret,
provider API keys named by the price table): values are cached per execution environment
for `MAX_AGE_SECONDS`, so a reader that asks at each use (a provider's API key) picks up a
rotated secret within that bound without a read per request. The App key and the webhook
secret are read once, when `steward.wiring` builds a function's parts. Errors name the secret id and the error code, never a value.
"""

from __future__ import annotations

from functools import cache

from aws_lambda_powertools.utilities.parameters import SecretsProvider
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError

from steward.adapters import aws

MAX_AGE_SECONDS = 300


class SecretUnavailable(RuntimeError):
    """The secret could not be read (`code`: the service's error code), or holds no string."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


@cache
def _provider() -> SecretsProvider:
    return SecretsProvider(boto3_client=aws.client("secretsmanager"))


def secret_string(secret_id: str) -> str:
    """The SecretString of `secret_id`, at most MAX_AGE_SECONDS old."""
    try:
        value = _provider().get(secret_id, max_age=MAX_AGE_SECONDS)
    except GetParameterError as exc:
        cause = exc.__cause__ or exc.__context__  # Powertools re-raises inside its except block
        code = str(getattr(cause, "response", {}).get("Error", {}).get("Code", type(cause).__name__))[:80]
        raise SecretUnavailable(f"cannot read secret {secret_id!r} ({code})", code=code) from None
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="strict")
    if not isinstance(value, str) or not value.strip():
        raise SecretUnavailable(f"secret {secret_id!r} holds no string", code="empty")
    return value


def reset() -> None:
    """Forget the client and every cached value (the local stack rebinds to its endpoint)."""
    _provider.cache_clear()
