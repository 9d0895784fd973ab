"""Relay Lambda behind an API Gateway REST API (payload 1.0; its integration timeout is
raised for model calls). Kept light on import: provider adapters load lazily, on the first
call that needs them, and nothing here imports githubkit, httpx or the CLI."""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from steward.domain.errors import RetryLater, StewardError

logger = Logger(service="steward-relay")
metrics = Metrics(namespace="Steward", service="relay")
app = APIGatewayRestResolver()


@cache
def relay() -> Any:
    """Clients and the capability public key, once per execution environment."""
    import boto3  # noqa: PLC0415 - part of the cold start, not of the import

    from steward.adapters.budget_store import BudgetStore  # noqa: PLC0415
    from steward.adapters.capability_signer import CapabilityVerifier  # noqa: PLC0415
    from steward.adapters.dynamo import BOTO_CONFIG, Tables  # noqa: PLC0415
    from steward.domain.prices import load_price_table  # noqa: PLC0415
    from steward.providers import provider_for  # noqa: PLC0415
    from steward.services.relay import Relay  # noqa: PLC0415

    key_ids = [k for k in os.environ.get("STEWARD_CAPABILITY_KEY_ID", "").split(",") if k]
    verifier = CapabilityVerifier.from_kms(boto3.client("kms", config=BOTO_CONFIG), key_ids)
    tables = Tables.connect(os.environ.get("STEWARD_TABLE_PREFIX", "steward-"))
    return Relay(
        verify=verifier.verify,
        budget=BudgetStore(tables),
        prices=load_price_table(),
        provider_for=provider_for,
    )


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response[str]:
    return Response(
        status_code=status,
        content_type="application/json",
        body=json.dumps(body, default=str),
        headers=headers,
    )


def _domain_error(exc: StewardError) -> Response[str]:
    metrics.add_metric(name=f"Refused{exc.status}", unit=MetricUnit.Count, value=1)
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, RetryLater) else None
    return _json(exc.status, exc.to_body(), headers)


def _unexpected(_: Exception) -> Response[str]:
    logger.exception("unhandled error")
    return _json(500, {"error": {"code": "internal", "message": "internal error"}})


# Registered by call rather than as decorators: Powertools' decorator is untyped.
app.exception_handler(StewardError)(_domain_error)
app.exception_handler(Exception)(_unexpected)


@app.post("/v1/relay/converse")
def converse() -> Response[str]:
    event = app.current_event
    outcome = relay().converse(
        event.headers.get("Authorization") or event.headers.get("authorization"), event.body
    )
    if outcome.overspent:
        metrics.add_metric(name="ProviderOverspend", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="CallsAdmitted", unit=MetricUnit.Count, value=1)
    body = dict(outcome.response)
    body["steward"] = {
        "cost_usd": str(outcome.cost_usd),
        "remaining_usd": str(outcome.remaining_usd),
        "max_tokens": outcome.max_tokens,
    }
    return _json(200, body)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
