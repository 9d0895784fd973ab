"""Reaper Lambda (EventBridge Scheduler): fail stale tasks for every user, charge expired
reservations, and run the spend-velocity breaker (`steward.services.brake`)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from steward import wiring
from steward.domain.models import utcnow
from steward.observability import logger_for, metrics_for, tracer_for

if TYPE_CHECKING:
    from steward.services.brake import BreakerCheck

# The alarm's metric: the spend-velocity breaker engaged the global brake.
BRAKE_METRIC = "SpendBrakeEngaged"

logger = logger_for("reaper")
metrics = metrics_for("reaper")
tracer = tracer_for("reaper")


def _check_spend(now: datetime) -> BreakerCheck | Exception:
    try:
        return wiring.spend_breaker().check(now)
    except Exception as exc:
        logger.exception("the spend-velocity breaker could not run")
        return exc


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    now = utcnow()
    # The breaker first, and on its own: a failing sweep must not also silence it (and its
    # failure must not stop the sweeps; it is raised after them, for the Errors alarm).
    check = _check_spend(now)
    reaper = wiring.reaper()
    failed = reaper.sweep(now)
    released = reaper.sweep_reservations(now)
    metrics.add_metric(name="TasksReaped", unit=MetricUnit.Count, value=len(failed))
    metrics.add_metric(name="ReservationsExpired", unit=MetricUnit.Count, value=released)
    if failed:
        logger.info("reaped stale tasks", extra={"task_ids": failed})
    if isinstance(check, Exception):
        raise check
    if check.limit_usd is not None:
        metrics.add_metric(name="SpendLastHourUsd", unit=MetricUnit.Count, value=float(check.spend_usd))
    if check.tripped:
        metrics.add_metric(name=BRAKE_METRIC, unit=MetricUnit.Count, value=1)
        logger.error(
            "spend-velocity breaker engaged the brake",
            extra={"spend_usd": str(check.spend_usd), "limit_usd": str(check.limit_usd)},
        )
    return {
        "reaped": failed,
        "reservations_expired": released,
        "spend_last_hour_usd": str(check.spend_usd),
        "brake_engaged": check.engaged,
    }
