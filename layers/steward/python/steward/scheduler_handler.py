"""Scheduler Lambda entry point (functions/scheduler/handler.py re-exports it).

EventBridge Scheduler invokes it at a fixed rate; it ticks every live user through the
heartbeat FIFO queue (docs/architecture.md). Its parts come from `steward.wiring` (settings
tagged `scheduler` in `steward.config`: the tables, the queue prefix, the tick window).

The window is taken from the event's `scheduled_time` (the schedule's input template can
pass `<aws.scheduler.scheduled-time>`) or an EventBridge event's `time`, else the clock: a
retried invocation then reuses its window, and delivery jitter cannot make two consecutive
runs share one window (which would drop a tick as a duplicate).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from steward import wiring
from steward.observability import logger_for, metrics_for, tracer_for
from steward.services.scheduler import run_scheduler

logger = logger_for("scheduler")
metrics = metrics_for("scheduler")
tracer = tracer_for("scheduler")


def run_time(event: dict[str, Any]) -> datetime:
    """The instant this run stands for (module docstring); always aware."""
    for field in ("scheduled_time", "time"):
        value = event.get(field)
        if isinstance(value, str):
            try:
                moment = datetime.fromisoformat(value)
            except ValueError:
                logger.warning("ignoring unparseable event time", extra={field: value})
                continue
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return datetime.now(UTC)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    s = wiring.scheduler()
    now = run_time(event)
    result = run_scheduler(s.index, s.queue, now=now, period_seconds=s.period_seconds)
    metrics.add_metric(name="UsersScheduled", unit=MetricUnit.Count, value=result["sent"])
    logger.info("scheduled", extra={**result, "run_time": now.isoformat()})
    return result
