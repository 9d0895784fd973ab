"""Relay Lambda behind an API Gateway REST API (payload 1.0; its integration timeout is
raised for model calls). Kept light on import: the relay service (its stores, boto3, the
Converse models), each surface's translation and the provider adapters load on the first
call that needs them (`wiring.relay()`, or inside the route), and nothing here imports
githubkit, httpx, PyYAML or the CLI (`tests/unit/test_cold_imports.py` holds that).

Surfaces (docs/concepts/relay.md), each through the one admission, reservation and settlement of
`steward.services.relay`:

* `POST /v1/relay/converse`: Steward's own (the runner's), a Converse body, the answer with a
  `steward` object (cost, remaining budget, admitted maxTokens);
* `POST /model/{modelId}/converse` and `/converse-stream`: Amazon Bedrock Runtime as stock
  boto3 calls it with a bearer token (`AWS_BEARER_TOKEN_BEDROCK`); `modelId` arrives
  percent-encoded and is decoded once; errors carry `x-amzn-ErrorType` (and a 429
  `x-amz-retry-after` in ms) as Bedrock's do; the stream is AWS event-stream framing;
* `POST /v1/chat/completions` and `GET /v1/models`: OpenAI-compatible, the capability as the
  API key; `stream: true` answers Server-Sent Events ending `data: [DONE]`; errors are
  OpenAI's `{"error": {"message", "type", "param", "code"}}` and a refusal no retry can
  change (402, 503) says `x-should-retry: false`, which the openai SDK honours.

Every answered call carries `x-steward-cost-usd` and `x-steward-remaining-usd` (stock clients
drop unknown body keys). Streams are synthesized from one complete provider answer: the call
is settled before the first byte is sent, so a client that hangs up mid-stream has already
been charged exactly (behind API Gateway's buffered REST integration that is what a client
would get anyway).

Metrics: `CallsAdmitted` per answered call, and `ProviderOverReport` (the alarm's metric)
for each call whose provider reported more than its reservation. JSON answers are ASCII: a
model's output may hold a lone surrogate (a `\\ud800` escape from the provider), which stays
an escape here for the client to judge, rather than text no encoder can write.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from steward import wiring
from steward.api.http import install_error_handlers, json_response
from steward.domain.errors import BadRequest, ProviderOutcomeUnknown
from steward.observability import logger_for, metrics_for, tracer_for

if TYPE_CHECKING:
    from steward.services.relay import RelayOutcome

OVER_REPORT_METRIC = "ProviderOverReport"

# Bedrock's error types by status (botocore reads the type from `x-amzn-ErrorType`). A
# provider's failure is answered as Bedrock answers it, 424 (or 408 when the outcome is
# unknown and the call was charged), which botocore does not retry: a 502 it would.
BEDROCK_ERRORS = {
    400: "ValidationException",
    401: "UnrecognizedClientException",
    402: "ServiceQuotaExceededException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    409: "ConflictException",
    413: "ValidationException",
    429: "ThrottlingException",
    503: "ServiceUnavailableException",
}
BEDROCK_PROVIDER_ERRORS = {
    "provider_error": (424, "ModelErrorException"),
    "model_cannot_answer": (424, "ModelErrorException"),
    "provider_outcome_unknown": (408, "ModelTimeoutException"),
}
# OpenAI's error types by status (the openai SDK reads `error.type`, `.param`, `.code`).
OPENAI_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "insufficient_quota",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}
# Refusals no retry changes, or that a retry would be charged for again: the openai SDK
# retries 409 and every 5xx unless told not to.
NO_RETRY_CODES = frozenset(
    {
        "budget_exhausted",
        "call_exceeds_budget",
        "brake_engaged",
        "lifecycle",
        "conflict",
        "provider_outcome_unknown",
    }
)
STREAM_FAILURE = "modelStreamErrorException"
_BEDROCK_PREFIX = "/model/"
_OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")

logger = logger_for("relay")
metrics = metrics_for("relay")
tracer = tracer_for("relay")
app = APIGatewayRestResolver()


def _error_shape(status: int, body: dict[str, Any], headers: dict[str, str]) -> Response[str]:
    """The documented JSON error, shaped for the client of the route that refused."""
    path = app.current_event.path.rstrip("/")
    error = dict(body.get("error") or {})
    code = error.get("code")
    if path.startswith(_BEDROCK_PREFIX):
        status, kind = BEDROCK_PROVIDER_ERRORS.get(
            str(code), (status, BEDROCK_ERRORS.get(status, "InternalServerException"))
        )
        headers = {**headers, "x-amzn-ErrorType": kind}
        if "Retry-After" in headers:  # botocore honours x-amz-retry-after (ms), not Retry-After
            headers["x-amz-retry-after"] = str(int(headers["Retry-After"]) * 1000)
        return json_response(status, {"message": error.get("message", ""), **body}, headers)
    if path in _OPENAI_PATHS:
        error.update(type=OPENAI_ERRORS.get(status, "api_error"), param=error.get("field"))
        if code in NO_RETRY_CODES:
            headers = {**headers, "x-should-retry": "false"}
        return json_response(status, {"error": error}, headers or None)
    return json_response(status, body, headers or None)


install_error_handlers(app, logger, metrics, shape=_error_shape)


def _body() -> bytes | str | None:
    """The request body as sent: behind the REST API's `*/*` binary media type every body
    arrives base64-encoded (infra/relay.py says why); locally only binary ones do."""
    event = app.current_event
    if event.is_base64_encoded and event.body is not None:
        try:
            return base64.b64decode(event.body, validate=True)
        except binascii.Error:
            raise BadRequest("request body is not valid base64", field="body") from None
    return event.body


def _authorization() -> str | None:
    headers = app.current_event.headers
    return headers.get("Authorization") or headers.get("authorization")


def _answered(outcome: RelayOutcome) -> dict[str, str]:
    """Count the call and name its cost in the headers every surface carries."""
    if outcome.over_reported:
        metrics.add_metric(name=OVER_REPORT_METRIC, unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="CallsAdmitted", unit=MetricUnit.Count, value=1)
    return {
        "x-steward-cost-usd": str(outcome.cost_usd),
        "x-steward-remaining-usd": str(outcome.remaining_usd),
        "x-steward-max-tokens": str(outcome.max_tokens),
    }


def _json(body: Any, headers: dict[str, str]) -> Response[str]:
    return Response(
        status_code=200, content_type="application/json", body=json.dumps(body, default=str), headers=headers
    )


@app.post("/v1/relay/converse")
def converse() -> Response[str]:
    from steward.services.relay import RUNNER  # noqa: PLC0415 - loaded by wiring.relay() anyway

    outcome = wiring.relay().converse(_authorization(), _body(), surface=RUNNER)
    headers = _answered(outcome)
    body = dict(outcome.response)
    body["steward"] = {
        "cost_usd": str(outcome.cost_usd),
        "remaining_usd": str(outcome.remaining_usd),
        "max_tokens": outcome.max_tokens,
    }
    return _json(body, headers)


@app.post("/model/<model_id>/converse")
def bedrock_converse(model_id: str) -> Response[str]:
    outcome = wiring.relay().converse(_authorization(), _body(), model_id=unquote(model_id))
    return _json(outcome.response, _answered(outcome))


@app.post("/model/<model_id>/converse-stream")
def bedrock_converse_stream(model_id: str) -> Response[bytes]:
    from steward.domain import eventstream  # noqa: PLC0415 - this route only

    outcome = wiring.relay().converse(_authorization(), _body(), model_id=unquote(model_id))
    headers = _answered(outcome)
    try:
        stream = eventstream.encode_converse_stream(outcome.response)
    except ValueError:  # settled already: a 5xx would be retried, and charged, again
        logger.exception("the provider's answer could not be streamed")
        stream = eventstream.exception(STREAM_FAILURE, "the model's answer could not be streamed")
    return Response(status_code=200, content_type=eventstream.CONTENT_TYPE, body=stream, headers=headers)


class _Chat:
    """The OpenAI surface of one call: keeps the parsed request for the answer's shape."""

    request: Any = None

    def translate(self, data: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
        from steward.domain.openai_chat import parse_chat_request, to_converse  # noqa: PLC0415

        self.request = parse_chat_request(data)
        return self.request.model, to_converse(self.request)


@app.post("/v1/chat/completions")
def chat_completions() -> Response[str]:
    from steward.domain import openai_chat  # noqa: PLC0415 - this route only
    from steward.services.relay import Surface  # noqa: PLC0415 - loaded by wiring.relay() anyway

    chat = _Chat()
    surface = Surface(
        translate=chat.translate, model_field="model", max_tokens_field="max_tokens", clamp_max_tokens=True
    )
    outcome = wiring.relay().converse(_authorization(), _body(), surface=surface)
    headers = _answered(outcome)
    request = chat.request
    identity = {
        "model": request.model,
        "completion_id": f"chatcmpl-{uuid.uuid4().hex}",
        "created": int(time.time()),
    }
    try:
        if not request.stream:
            return _json(openai_chat.completion(outcome.response, **identity), headers)
        chunks = openai_chat.completion_chunks(
            outcome.response, include_usage=request.include_usage, **identity
        )
        body = openai_chat.sse(chunks).decode()
    except (ValueError, KeyError, TypeError):  # settled already: say so, and that a retry is charged
        logger.exception("the provider's answer could not be translated")
        failure = ProviderOutcomeUnknown("the model's answer could not be translated; the call was charged")
        if not request.stream:
            raise failure from None
        body = openai_chat.sse([failure.to_body()]).decode()
    return Response(
        status_code=200,
        content_type="text/event-stream",
        body=body,
        headers={**headers, "Cache-Control": "no-cache"},
    )


@app.get("/v1/models")
def models() -> Response[str]:
    from steward.domain.openai_chat import models_list  # noqa: PLC0415 - this route only

    capability = wiring.relay().capability(_authorization())
    return _json(models_list(capability.model_id, created=int(time.time())), {})


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
