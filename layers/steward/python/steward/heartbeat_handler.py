"""Heartbeat Lambda: SQS FIFO batch (group = user) with partial failure reporting.

A message whose body is not a valid tick is reported and dropped (retrying it can never
succeed and would hold up its group); a tick that raises is reported as a batch item
failure, so SQS redelivers it and the rest of that user's group waits behind it.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, ValidationError

from steward import wiring
from steward.observability import logger_for, metrics_for, tracer_for

logger = logger_for("heartbeat")
metrics = metrics_for("heartbeat")
tracer = tracer_for("heartbeat")
processor = SqsFifoPartialProcessor(skip_group_on_error=True)


class TickMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    user: str
    window: str = ""


def record_handler(record: SQSRecord) -> str:
    try:
        message = TickMessage.model_validate(json.loads(record.body))
    except (ValueError, ValidationError):
        logger.error("dropping a malformed tick message", extra={"message_id": record.message_id})
        metrics.add_metric(name="MalformedTicks", unit=MetricUnit.Count, value=1)
        return "dropped"
    report = wiring.heartbeat().tick(message.user)
    metrics.add_metric(name=f"Tick_{report.outcome.value}", unit=MetricUnit.Count, value=1)
    if report.spawned:
        metrics.add_metric(name="TasksSpawned", unit=MetricUnit.Count, value=len(report.spawned))
    logger.info(
        "tick", extra={"user": message.user, "outcome": report.outcome.value, "spawned": len(report.spawned)}
    )
    return report.outcome.value


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return dict(
        process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
    )
