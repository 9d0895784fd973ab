"""Logger, Metrics and Tracer for every Lambda function, configured in one place.

Below every other layer: it imports Powertools only. Each function gets its own service
name; metrics share one CloudWatch namespace, so the dashboard and alarms find them.

The Tracer records X-Ray segments only inside Lambda with tracing not disabled (Powertools'
own rule: `LAMBDA_TASK_ROOT` set, `POWERTOOLS_TRACE_DISABLED` not true). Elsewhere (the local
stack, tests, benchmarks) handlers get a stand-in whose decorator does nothing, because
building a Powertools Tracer imports the X-Ray SDK (about 250 ms) even when it is disabled.
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


def metrics_for(function: str) -> Metrics:
    return Metrics(namespace=NAMESPACE, service=function)


def tracer_for(function: str) -> HandlerTracer:
    if not tracing_enabled():
        return _Untraced()
    from aws_lambda_powertools import Tracer  # noqa: PLC0415 - imports the X-Ray SDK

    return cast(HandlerTracer, Tracer(service=f"steward-{function}"))
