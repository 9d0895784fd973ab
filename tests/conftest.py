"""Shared fixtures.

Unit speed: moto in-process (`mock_aws`). Tables come from `steward.tables`, the same specs
the local stack and the CDK app use. moto's DynamoDB is serialized with one lock
(`install_dynamodb_lock`, DESIGN section 10) so that races exercise Steward's conditions,
not moto's lack of linearizability. Three short cuts through moto
(`steward.local.moto_speed`) change what it answers in nothing but time.
"""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.dynamo import Tables
from steward.config import Settings
from steward.local.moto_serial import install_dynamodb_lock, install_s3_lock
from steward.local.moto_speed import install_moto_shortcuts
from steward.wiring import Services

REGION = "us-east-1"

# Every moto in this process, whoever starts it: the same answers, a third less time each.
install_moto_shortcuts()


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Never reach a real account from a test, whatever the developer's shell holds.
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)


@pytest.fixture
def aws() -> Iterator[None]:
    install_dynamodb_lock()
    install_s3_lock()
    with mock_aws():
        yield


@pytest.fixture
def settings() -> Settings:
    return Settings(table_prefix="test-", artifacts_bucket="test-artifacts")


@pytest.fixture
def tables(aws: None, settings: Settings) -> Tables:
    tables = Tables.connect(settings.table_prefix, region_name=REGION)
    tables.create_all()
    return tables


@pytest.fixture
def services(tables: Tables, settings: Settings) -> Services:
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=settings.artifacts_bucket)
    return Services.build(settings, tables, ArtifactStore(settings.artifacts_bucket, client=s3))
