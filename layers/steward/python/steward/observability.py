"""Logger, Metrics and Tracer for every Lambda function, configured in one place.

Below every other layer: it imports Powertools only. Each function gets its own service
name; metrics share one CloudWatch namespace, so the dashboard and alarms find them. The
Tracer records X-Ray segments in Lambda and switches itself off elsewhere (the local stack,
tests), so handlers decorate unconditionally.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

NAMESPACE = "Steward"


def logger_for(function: str) -> Logger:
    return Logger(service=f"steward-{function}")


def metrics_for(function: str) -> Metrics:
    return Metrics(namespace=NAMESPACE, service=function)


def tracer_for(function: str) -> Tracer:
    return Tracer(service=f"steward-{function}")
