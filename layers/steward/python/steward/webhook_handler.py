"""Webhook Lambda behind a Function URL: GitHub's deliveries (DESIGN section 7; the rules are
in `steward.services.webhooks`).

`POST /` (the Function URL itself) and `POST /webhook`. The signature is checked over the
raw body bytes, so the body is taken as Lambda delivers it (base64-decoded when
`isBase64Encoded`), never re-serialized. Answers: 200 `{"status": ...}` (applied,
unchanged, ignored, duplicate), 401 when the signature does not verify, 400 for a verified
delivery that cannot be processed, all errors as `{"error": {"code", "message"}}`. The work
is a few DynamoDB requests, well within the 10 s GitHub waits for an answer.

Environment: STEWARD_TABLE_PREFIX; STEWARD_WEBHOOK_SECRET (the secret itself) or
STEWARD_WEBHOOK_SECRET_ID (a Secrets Manager secret id, fetched once per execution
environment). With neither, every delivery is refused. The secret, the signature headers
and the body are never logged.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from steward.adapters.delivery_store import DeliveryStore
from steward.adapters.dynamo import Tables
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.config import Settings
from steward.domain.errors import BadRequest, StewardError
from steward.services.webhooks import WebhookReceiver, WebhookSecret

logger = Logger(service="steward-webhook")
metrics = Metrics(namespace="Steward", service="webhook")
app = LambdaFunctionUrlResolver()


def secret_from_env() -> WebhookSecret:
    """STEWARD_WEBHOOK_SECRET, else the Secrets Manager secret STEWARD_WEBHOOK_SECRET_ID,
    else unset (which refuses every delivery rather than accepting unsigned ones)."""
    value = os.environ.get("STEWARD_WEBHOOK_SECRET")
    if value:
        return WebhookSecret(value)
    secret_id = os.environ.get("STEWARD_WEBHOOK_SECRET_ID")
    if not secret_id:
        logger.warning("no webhook secret configured: every delivery will be refused")
        return WebhookSecret(None)
    from aws_lambda_powertools.utilities.parameters import SecretsProvider  # noqa: PLC0415 - only when used

    fetched = SecretsProvider().get(secret_id)
    return WebhookSecret(fetched if isinstance(fetched, str | bytes) else None)


def receiver_from_env() -> WebhookReceiver:
    """Stores and secret bound to this process's environment (a cold start)."""
    tables = Tables.connect(Settings.from_env().table_prefix)
    return WebhookReceiver(
        secret=secret_from_env(),
        deliveries=DeliveryStore(tables),
        tasks=TaskStore(tables),
        installations=InstallationStore(tables),
    )


# Built once per execution environment; the local stack and the tests clear it to rebind.
service = cache(receiver_from_env)


def _json(status: int, body: dict[str, Any]) -> Response[str]:
    return Response(status_code=status, content_type="application/json", body=json.dumps(body))


def _domain_error(exc: StewardError) -> Response[str]:
    metrics.add_metric(name=f"Refused{exc.status}", unit=MetricUnit.Count, value=1)
    if exc.status >= 500:
        logger.exception("internal error")
    return _json(exc.status, exc.to_body())


def _not_found(_: NotFoundError) -> Response[str]:
    metrics.add_metric(name="Refused404", unit=MetricUnit.Count, value=1)
    path = app.current_event.path
    return _json(404, {"error": {"code": "not_found", "message": f"no route {path}"}})


def _unexpected(_: Exception) -> Response[str]:
    metrics.add_metric(name="Failed500", unit=MetricUnit.Count, value=1)
    logger.exception("unhandled error")
    return _json(500, {"error": {"code": "internal", "message": "internal error"}})


# Registered by call rather than as decorators: Powertools' decorators are untyped.
app.exception_handler(StewardError)(_domain_error)
app.not_found(_not_found)
app.exception_handler(Exception)(_unexpected)


def _raw_body() -> bytes:
    """The bytes GitHub signed: the body exactly as Lambda hands it over."""
    event = app.current_event
    body = event.body or ""
    if event.is_base64_encoded:
        try:
            return base64.b64decode(body, validate=True)
        except binascii.Error as exc:
            raise BadRequest("the body is not valid base64", field="body") from exc
    return body.encode("utf-8")


def deliver() -> Response[str]:
    outcome = service().receive(_raw_body(), app.current_event.headers)
    metrics.add_metric(name=f"Delivery_{outcome.status}", unit=MetricUnit.Count, value=1)
    return _json(200, outcome.to_body())


app.post("/")(deliver)
app.post("/webhook")(deliver)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
