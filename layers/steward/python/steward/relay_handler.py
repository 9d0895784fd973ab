"""Relay Lambda behind an API Gateway REST API (payload 1.0; its integration timeout is
raised for model calls). Kept light on import: provider adapters load lazily, on the first
call that needs them, and nothing here imports githubkit, httpx or the CLI.

Metrics: `CallsAdmitted` per answered call, and `ProviderOverReport` (the alarm's metric)
for each call whose provider reported more than its reservation. The answer is ASCII JSON:
a model's output may hold a lone surrogate (a `\\ud800` escape from the provider), which
stays an escape here for the runner to judge, rather than text no encoder can write.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from steward import wiring
from steward.api.http import install_error_handlers
from steward.observability import logger_for, metrics_for, tracer_for

OVER_REPORT_METRIC = "ProviderOverReport"

logger = logger_for("relay")
metrics = metrics_for("relay")
tracer = tracer_for("relay")
app = APIGatewayRestResolver()
install_error_handlers(app, logger, metrics)


@app.post("/v1/relay/converse")
def converse() -> Response[str]:
    event = app.current_event
    outcome = wiring.relay().converse(
        event.headers.get("Authorization") or event.headers.get("authorization"), event.body
    )
    if outcome.over_reported:
        metrics.add_metric(name=OVER_REPORT_METRIC, unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="CallsAdmitted", unit=MetricUnit.Count, value=1)
    body = dict(outcome.response)
    body["steward"] = {
        "cost_usd": str(outcome.cost_usd),
        "remaining_usd": str(outcome.remaining_usd),
        "max_tokens": outcome.max_tokens,
    }
    return Response(status_code=200, content_type="application/json", body=json.dumps(body, default=str))


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
