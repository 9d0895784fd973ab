"""Each function's parts build from exactly the environment its template gives it: the cold
start of every Lambda, with nothing from the developer's shell and no variable the stack does
not set (a setting tagged for one function and read by another's builders fails here, not on
the first invocation in AWS). CloudFormation's references become placeholders of the shape the
setting parses; boto3 talks to moto in-process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from moto import mock_aws
from steward import wiring
from steward.config import FUNCTIONS
from steward.queues import HEARTBEAT

from tests.infra.helpers import function_id, render

# What each function's handler builds on its first invocation (`steward.*_handler`).
BUILDERS: dict[str, tuple[str, ...]] = {
    "api": ("api_services",),
    "scheduler": ("scheduler",),
    "heartbeat": ("heartbeat",),
    "reaper": ("reaper", "spend_breaker"),
    "relay": ("relay",),
    "webhook": ("webhook_receiver",),
    "runtime": ("capability_verifier", "minter", "github_tokens", "runtime_service"),
}


def placeholder(value: Any) -> str:
    """A template value as the function would read it: literals as they are, each reference
    as an identifier of its own (a list of references stays a comma-separated list)."""
    text = render(value)
    return text.replace("<", "ref-").replace(">", "").replace(".", "-")


@pytest.fixture
def cold(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(("STEWARD_", "AWS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    wiring.reset()
    with mock_aws():
        yield
    wiring.reset()


def _rsa_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def test_every_function_is_covered() -> None:
    assert set(BUILDERS) == set(FUNCTIONS)


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.usefixtures("cold")
def test_each_function_builds_its_parts_from_exactly_its_templates_environment(
    resources: dict[str, Any], function: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    variables = resources[function_id(resources, function)]["Properties"]["Environment"]["Variables"]
    for name, value in variables.items():
        monkeypatch.setenv(name, placeholder(value))
    # The references whose value is checked where it is built: the App id the stack's
    # parameter names (an integer), the capability key and each secret (ones that exist).
    for name in (n for n in variables if n.endswith("_SECRET_ID")):
        private_key = "PRIVATE_KEY" in name
        value = _rsa_pem() if private_key else "a-webhook-secret-of-the-stack"
        boto3.client("secretsmanager").create_secret(Name=os.environ[name], SecretString=value)
    if "STEWARD_GITHUB_APP_ID" in variables:
        monkeypatch.setenv("STEWARD_GITHUB_APP_ID", "12345")
    if "STEWARD_CAPABILITY_KEY_ID" in variables:
        key = boto3.client("kms").create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")
        monkeypatch.setenv("STEWARD_CAPABILITY_KEY_ID", key["KeyMetadata"]["KeyId"])
    prefix = os.environ.get("STEWARD_QUEUE_PREFIX") or os.environ.get("STEWARD_TABLE_PREFIX", "")
    boto3.client("sqs").create_queue(**HEARTBEAT.create_queue_kwargs(prefix))
    for builder in BUILDERS[function]:
        assert getattr(wiring, builder)() is not None, builder
