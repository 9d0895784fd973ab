"""Logger, Metrics and Tracer for every Lambda function, configured in one place.

Below every other layer: it imports Powertools only. Each function gets its own service
name; metrics share one CloudWatch namespace, so the dashboard and alarms find them.

The Tracer records X-Ray segments only inside Lambda with tracing not disabled (Powertools'
own rule: `LAMBDA_TASK_ROOT` set, `POWERTOOLS_TRACE_DISABLED` not true). Elsewhere (the local
stack, tests, benchmarks) handlers get a stand-in whose decorator does nothing, because
building a Powertools Tracer imports the X-Ray SDK (about 250 ms) even when it is disabled.

Metrics likewise: with `POWERTOOLS_METRICS_DISABLED` true (the local stack sets it: EMF lines
mean nothing without CloudWatch) handlers get a stand-in that records nothing, because
Powertools' Metrics still keeps every value then, prints a whole EMF blob to stdout once a
metric holds 100 of them, and warns "No application metrics to publish" on every call.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics

NAMESPACE = "Steward"
_TRUE = ("1", "true", "yes", "on")
Handler = TypeVar("Handler", bound=Callable[..., Any])


class HandlerTracer(Protocol):
    """The part of Powertools' Tracer the handlers use, as a typed decorator factory."""

    def capture_lambda_handler(self, *, capture_response: bool) -> Callable[[Handler], Handler]: ...


class _Untraced:
    """What handlers decorate with where nothing is traced."""

    def capture_lambda_handler(self, *, capture_response: bool) -> Callable[[Handler], Handler]:
        def decorate(handler: Handler) -> Handler:
            return handler

        return decorate


def tracing_enabled() -> bool:
    disabled = os.environ.get("POWERTOOLS_TRACE_DISABLED", "false").strip().lower() in _TRUE
    return bool(os.environ.get("LAMBDA_TASK_ROOT")) and not disabled


def logger_for(function: str) -> Logger:
    return Logger(service=f"steward-{function}")


class HandlerMetrics(Protocol):
    """The part of Powertools' Metrics the handlers use."""

    def add_metric(self, name: str, unit: Any, value: float, resolution: Any = ...) -> None: ...

    def clear_metrics(self) -> None: ...

    def flush_metrics(self, raise_on_empty_metrics: bool = False) -> None: ...

    def log_metrics(self, lambda_handler: Any = None, **kwargs: Any) -> Any: ...


class _Unmetered:
    """What handlers record metrics with where metrics are disabled: nothing is kept."""

    def add_metric(self, name: str, unit: Any, value: float, resolution: Any = None) -> None:
        return None

    def clear_metrics(self) -> None:
        return None

    def flush_metrics(self, raise_on_empty_metrics: bool = False) -> None:
        return None

    def log_metrics(self, lambda_handler: Any = None, **kwargs: Any) -> Any:
        if lambda_handler is None:
            return lambda handler: handler
        return lambda_handler


def metrics_enabled() -> bool:
    return os.environ.get("POWERTOOLS_METRICS_DISABLED", "false").strip().lower() not in _TRUE


def metrics_for(function: str) -> HandlerMetrics:
    if not metrics_enabled():
        return _Unmetered()
    return cast(HandlerMetrics, Metrics(namespace=NAMESPACE, service=function))


def tracer_for(function: str) -> HandlerTracer:
    if not tracing_enabled():
        return _Untraced()
    from aws_lambda_powertools import Tracer  # noqa: PLC0415 - imports the X-Ray SDK

    return cast(HandlerTracer, Tracer(service=f"steward-{function}"))
