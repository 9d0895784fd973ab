"""Scheduler Lambda entry point (functions/scheduler/handler.py re-exports it).

EventBridge Scheduler invokes it at a fixed rate; it ticks every live user through the
heartbeat FIFO queue (DESIGN section 2). Clients are built once per process from:

* `STEWARD_TABLE_PREFIX` (default `steward-`): the users table and its `live` index;
* `STEWARD_QUEUE_PREFIX` (default: the table prefix): the heartbeat queue's name prefix;
* `STEWARD_TICK_SECONDS` (default 60): the tick window, normally the schedule's rate.

The window is taken from the event's `scheduled_time` (the schedule's input template can
pass `<aws.scheduler.scheduled-time>`) or an EventBridge event's `time`, else the clock: a
retried invocation then reuses its window, and delivery jitter cannot make two consecutive
runs share one window (which would drop a tick as a duplicate).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from steward.adapters.dynamo import BOTO_CONFIG, Tables
from steward.adapters.liveness import LivenessIndex
from steward.adapters.queue import HeartbeatQueue, queue_url
from steward.services.scheduler import run_scheduler

logger = Logger(service="steward-scheduler")
metrics = Metrics(namespace="Steward", service="scheduler")


@dataclass(frozen=True)
class Scheduler:
    index: LivenessIndex
    queue: HeartbeatQueue
    period_seconds: int

    @classmethod
    def from_env(cls) -> Scheduler:
        table_prefix = os.environ.get("STEWARD_TABLE_PREFIX", "steward-")
        queue_prefix = os.environ.get("STEWARD_QUEUE_PREFIX", table_prefix)
        raw = os.environ.get("STEWARD_TICK_SECONDS", "60")
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"STEWARD_TICK_SECONDS must be a positive integer, got {raw!r}")
        sqs = boto3.client("sqs", config=BOTO_CONFIG)
        return cls(
            index=LivenessIndex(Tables.connect(table_prefix)),
            queue=HeartbeatQueue(queue_url(sqs, queue_prefix), client=sqs),
            period_seconds=int(raw),
        )


scheduler = cache(Scheduler.from_env)


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
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    s = scheduler()
    now = run_time(event)
    result = run_scheduler(s.index, s.queue, now=now, period_seconds=s.period_seconds)
    metrics.add_metric(name="UsersScheduled", unit=MetricUnit.Count, value=result["sent"])
    logger.info("scheduled", extra={**result, "run_time": now.isoformat()})
    return result
