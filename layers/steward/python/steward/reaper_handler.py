"""Reaper Lambda (EventBridge Scheduler): fail stale tasks for every user."""

from __future__ import annotations

from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from steward.domain.models import utcnow
from steward.services.reaper import Reaper
from steward.services.wiring import reaper_from_env

logger = Logger(service="steward-reaper")
metrics = Metrics(namespace="Steward", service="reaper")


@cache
def _reaper() -> Reaper:
    return reaper_from_env()


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    now = utcnow()
    failed = _reaper().sweep(now)
    released = _reaper().sweep_reservations(now)
    metrics.add_metric(name="TasksReaped", unit=MetricUnit.Count, value=len(failed))
    metrics.add_metric(name="ReservationsExpired", unit=MetricUnit.Count, value=released)
    if failed:
        logger.info("reaped stale tasks", extra={"task_ids": failed})
    return {"reaped": failed, "reservations_expired": released}
