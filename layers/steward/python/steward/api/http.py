"""The HTTP boundary every resolver shares (API, relay, runtime routes, webhook): JSON
answers, the mapping of `StewardError` to status and body (docs/concepts/identity.md), 404 for an
unknown route, a 500 that says nothing about the failure, and the body-size check.

Powertools' resolvers keep the current event in shared state; each Lambda has one resolver
built at import, so registering the handlers once per resolver is all the wiring needed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.metrics import MetricUnit
from pydantic import ValidationError

from steward.domain.errors import BadRequest, BrakeEngaged, RetryLater, StewardError, TooLarge
from steward.observability import HandlerMetrics


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response[str]:
    """`body` as JSON (non-ASCII kept as is; values JSON lacks, such as Decimal, as strings)."""
    return Response(
        status_code=status,
        content_type="application/json",
        body=json.dumps(body, ensure_ascii=False, default=str),
        headers=headers,
    )


# Reshapes an error answer for the client the route serves (the relay's stock-client
# surfaces): (status, the documented JSON error, headers) -> the response to send.
ErrorShape = Callable[[int, dict[str, Any], dict[str, str]], Response[str]]


def _plain_shape(status: int, body: dict[str, Any], headers: dict[str, str]) -> Response[str]:
    return json_response(status, body, headers or None)


def check_body_size(raw: str | bytes | None, limit: int) -> None:
    """TooLarge (413) for a body over `limit` bytes, before anything parses it."""
    if raw is None:
        return
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", errors="surrogatepass"))
    if size > limit:
        raise TooLarge(f"request body is over {limit} bytes", field="body")


# Where Powertools says a refused value was: the first element of an error's `loc`, which
# the documented error leaves out (it names the parameter or body field alone).
_LOCATIONS = frozenset({"query", "path", "header", "cookie", "body"})


def powertools_refusal(exc: RequestValidationError | RequestUnsupportedContentType) -> BadRequest:
    """Powertools' first validation error as the documented 400: `field` the parameter (or
    body field) it names, `body` for a body that is not JSON."""
    errors = list(exc.errors())
    if not errors:
        return BadRequest("the request is not valid", field="body")
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ())]
    if first.get("type") == "json_invalid" or not loc:
        field = "body"
    else:
        rest = loc[1:] if loc[0] in _LOCATIONS else loc
        field = ".".join(rest) or loc[0]
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    return BadRequest(f"{field}: {message}", field=field)


def install_error_handlers(
    app: ApiGatewayResolver,
    logger: Logger,
    metrics: HandlerMetrics | None = None,
    shape: ErrorShape | None = None,
) -> None:
    """Answer every failure as the documented JSON error (reshaped by `shape` when given);
    count refusals when `metrics`."""
    answer = shape or _plain_shape

    def count(name: str) -> None:
        if metrics is not None:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)

    def domain_error(exc: StewardError) -> Response[str]:
        count(f"Refused{exc.status}")
        if isinstance(exc, BrakeEngaged):
            # The operators' decision (or the spend breaker's), answered as designed: a refusal
            # to note, not a failure to page anyone about, and nothing a traceback explains.
            logger.warning(f"refused: {exc.message}", extra={"status": exc.status, "code": exc.code})
        elif exc.status >= 500:
            logger.exception("internal error")
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, RetryLater) else {}
        return answer(exc.status, exc.to_body(), headers)

    def validation_error(exc: ValidationError) -> Response[str]:
        count("Refused400")
        return answer(400, BadRequest.from_validation(exc).to_body(), {})

    def request_invalid(exc: RequestValidationError | RequestUnsupportedContentType) -> Response[str]:
        # Powertools' validation of typed route parameters (query strings): the documented
        # 400 naming the parameter, not Powertools' own 422 shape.
        count("Refused400")
        return answer(400, powertools_refusal(exc).to_body(), {})

    def not_found(_: NotFoundError) -> Response[str]:
        count("Refused404")
        path = app.current_event.path
        shown = path if len(path) <= 200 else f"{path[:200]}…"  # the caller sent it: no need to echo it all
        return answer(404, {"error": {"code": "not_found", "message": f"no route {shown}"}}, {})

    def unexpected(_: Exception) -> Response[str]:
        count("Failed500")
        logger.exception("unhandled error")
        return answer(500, {"error": {"code": "internal", "message": "internal error"}}, {})

    # Registered by call rather than as decorators: Powertools' decorators are untyped.
    app.exception_handler(StewardError)(domain_error)
    app.exception_handler(ValidationError)(validation_error)
    app.exception_handler(RequestValidationError)(request_invalid)
    app.exception_handler(RequestUnsupportedContentType)(request_invalid)
    app.not_found(not_found)
    app.exception_handler(Exception)(unexpected)
