"""Webhook Lambda behind a Function URL: GitHub's deliveries (docs/concepts/github.md; the rules are
in `steward.domain.webhooks`, the receiver in `steward.services.webhooks`).

`POST /` (the Function URL itself) and `POST /webhook`. The signature is checked over the
raw body bytes, so the body is taken as Lambda delivers it (base64-decoded when
`isBase64Encoded`), never re-serialized. Answers: 200 `{"status": ...}` (applied,
unchanged, ignored, duplicate), 401 when the signature does not verify, 400 for a verified
delivery that cannot be processed, all errors as `{"error": {"code", "message"}}`. The work
is a few DynamoDB requests, well within the 10 s GitHub waits for an answer.

Settings: `steward.config` (functions tagged `webhook`): the secret itself or the Secrets
Manager secret holding it; with neither, every delivery is refused. The secret, the
signature headers and the body are never logged.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from steward import wiring
from steward.api.http import install_error_handlers, json_response
from steward.domain.errors import BadRequest
from steward.observability import logger_for, metrics_for, tracer_for

logger = logger_for("webhook")
metrics = metrics_for("webhook")
tracer = tracer_for("webhook")
app = LambdaFunctionUrlResolver()
install_error_handlers(app, logger, metrics)


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
    outcome = wiring.webhook_receiver().receive(_raw_body(), app.current_event.headers)
    metrics.add_metric(name=f"Delivery_{outcome.status}", unit=MetricUnit.Count, value=1)
    return json_response(200, outcome.to_body())


app.post("/")(deliver)
app.post("/webhook")(deliver)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
