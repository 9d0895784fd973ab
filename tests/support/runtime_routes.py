"""The runtime function's routes served on loopback, bound to the test's tables, bucket and
a fresh capability key, as the composition root would bind them in AWS."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from steward import runtime_handler, wiring
from steward.adapters.capability_signer import kms_client
from steward.config import Settings
from steward.local.http_adapter import LambdaHttpServer
from steward.wiring import Services

from tests.conftest import REGION


def new_capability_key() -> str:
    kms = kms_client(region_name=REGION)
    return str(kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="ECC_NIST_P256")["KeyMetadata"]["KeyId"])


@contextmanager
def runtime_server(
    services: Services, settings: Settings, monkeypatch: pytest.MonkeyPatch, key_id: str
) -> Iterator[LambdaHttpServer]:
    monkeypatch.setenv("STEWARD_TABLE_PREFIX", services.tables.prefix)
    monkeypatch.setenv("STEWARD_ARTIFACTS_BUCKET", settings.artifacts_bucket)
    monkeypatch.setenv("STEWARD_CAPABILITY_KEY_ID", key_id)
    wiring.reset()
    try:
        with LambdaHttpServer(
            runtime_handler.lambda_handler, kind="http_api", function_name="steward-runtime"
        ) as server:
            yield server
    finally:
        wiring.reset()
