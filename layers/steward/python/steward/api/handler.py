"""API Lambda entry point (functions/api/handler.py re-exports it)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from steward import wiring
from steward.api import console
from steward.api.app import create_app, logger
from steward.observability import metrics_for, tracer_for

tracer = tracer_for("api")
metrics = metrics_for("api")
app = create_app(wiring.api_services, metrics)
console.register(app, wiring.settings)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        return app.resolve(event, context)
    finally:
        # Only a refusal counts something: flushed then, and no "no metrics" warning for
        # every answer that counted nothing (Powertools' `log_metrics` warns on each).
        if getattr(metrics, "metric_set", None):
            metrics.flush_metrics()
