"""Runtime Lambda: every route a runtime calls (docs/concepts/identity.md, docs/concepts/relay.md, "The runner"), outside the user
authorizer. The runtime holds no AWS credential; these routes are its only way to write.

| route | credential | body | answer |
|---|---|---|---|
| `POST /v1/runtime/exchange` | the ticket, in the body | `{"ticket"}` | `{"task_id", "capability", "expires_at"}` |
| `POST /v1/runtime/github-token` | capability | none | `{"token", "expires_at", "repository", "installation_id", "api_url", "clone_url"}` |
| `POST /v1/runtime/claim` | capability | `{"runtime_id"}` | `{"task"}` |
| `POST /v1/runtime/heartbeat` | capability | `{"runtime_id"}` | `{"running", "status", "cost_usd"}` |
| `POST /v1/runtime/events` | capability | `{"runtime_id", "type", "data"}` | `{"seq"}` |
| `POST /v1/runtime/finish` | capability | `{"runtime_id", "status", ...}` (`steward.services.runtime:Ending`) | `{"status", "changed"}` |
| `POST /v1/runtime/artifacts/{name}` | capability | `{"runtime_id", "size"}` | `{"url", "method", "headers", "key", "expires_at"}` |

The capability travels as `Authorization: Bearer <capability>`; the task and its owner come
from it alone (`steward.services.runtime`). Order of checks: body size (413), capability
(401), body (400 naming the field), then the task (401 gone, 403 another user's, 404 an
unknown artifact, 409 not in a status that admits the call). Neither the ticket, the
capability, a token, a presigned URL nor a request body is ever logged. Settings:
`steward.config` (functions tagged `runtime`).

Metrics: `RunnerRequestRefused` (the alarm's metric) once per failed ending recorded with
the fault `relay_refused`: the relay answered 400 to the runner's own request, a defect of
Steward's, not of the model or the plan (the runtime itself has no metrics path).
"""

from __future__ import annotations

from typing import Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field

from steward import wiring
from steward.api.http import check_body_size, install_error_handlers, json_response
from steward.api.requests import parse_body
from steward.domain.capability import Capability, bearer_token
from steward.domain.models import Fault, utcnow
from steward.domain.routes import (
    ARTIFACTS_PATH,
    CLAIM_PATH,
    EVENTS_PATH,
    EXCHANGE_PATH,
    FINISH_PATH,
    GITHUB_TOKEN_PATH,
    HEARTBEAT_PATH,
)
from steward.observability import logger_for, metrics_for, tracer_for
from steward.services.runtime import ArtifactCall, Ending, EventCall, RuntimeCall

logger = logger_for("runtime")
tracer = tracer_for("runtime")
metrics = metrics_for("runtime")
app = APIGatewayHttpResolver()
install_error_handlers(app, logger)

MAX_BODY_BYTES = 4096  # a ticket, a runtime id, a size: anything far bigger is not a call
MAX_EVENT_BODY_BYTES = 8192  # an event's data is bounded at 4 KiB as stored
MAX_FINISH_BODY_BYTES = 16384  # a reason, a summary and a pull request URL
REFUSED_METRIC = "RunnerRequestRefused"

M = TypeVar("M", bound=BaseModel)
NO_STORE = {"Cache-Control": "no-store"}


class ExchangeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ticket: str = Field(min_length=1)


def _capability() -> Capability:
    """The caller's verified capability (401 without a valid one)."""
    token = bearer_token(app.current_event.headers.get("authorization"))
    return wiring.capability_verifier().verify(token, now=utcnow())


def _call(model: type[M], limit: int = MAX_BODY_BYTES) -> tuple[Capability, M]:
    raw = app.current_event.body
    check_body_size(raw, limit)
    capability = _capability()
    return capability, parse_body(raw, model)


@app.post(EXCHANGE_PATH)
def exchange() -> Response[str]:
    raw = app.current_event.body
    check_body_size(raw, MAX_BODY_BYTES)
    body = parse_body(raw, ExchangeBody)
    result = wiring.minter().exchange(body.ticket)
    logger.info("capability minted", extra={"task_id": result["task_id"], "expires_at": result["expires_at"]})
    return json_response(200, result, headers=NO_STORE)


@app.post(GITHUB_TOKEN_PATH)
def github_token() -> Response[str]:
    check_body_size(app.current_event.body, MAX_BODY_BYTES)
    result = wiring.github_tokens().issue(app.current_event.headers.get("authorization"))
    logger.info(
        "github token issued",
        extra={"repository": result["repository"], "expires_at": result["expires_at"]},
    )
    # A credential: no cache may keep it.
    return json_response(200, result, headers=NO_STORE)


@app.post(CLAIM_PATH)
def claim() -> Response[str]:
    capability, body = _call(RuntimeCall)
    result = wiring.runtime_service().claim(capability, body)
    logger.info("task claimed", extra={"task_id": capability.task_id})
    return json_response(200, result)


@app.post(HEARTBEAT_PATH)
def heartbeat() -> Response[str]:
    capability, body = _call(RuntimeCall)
    return json_response(200, wiring.runtime_service().heartbeat(capability, body))


@app.post(EVENTS_PATH)
def events() -> Response[str]:
    capability, body = _call(EventCall, MAX_EVENT_BODY_BYTES)
    return json_response(200, wiring.runtime_service().append_event(capability, body))


@app.post(FINISH_PATH)
def finish() -> Response[str]:
    capability, body = _call(Ending, MAX_FINISH_BODY_BYTES)
    result = wiring.runtime_service().finish(capability, body)
    logger.info("task finished", extra={"task_id": capability.task_id, "status": result["status"]})
    if body.fault is Fault.RELAY_REFUSED and result["changed"]:  # a replay counts nothing
        logger.warning("the relay refused the runner's own request", extra={"task_id": capability.task_id})
        metrics.add_metric(name=REFUSED_METRIC, unit=MetricUnit.Count, value=1)
        # Flushed here, not by `log_metrics` around every call: nearly every runtime call
        # has no metric, and Powertools warns on each empty flush.
        metrics.flush_metrics()
    return json_response(200, result)


@app.post(ARTIFACTS_PATH + "/<name>")
def artifact(name: str) -> Response[str]:
    capability, body = _call(ArtifactCall)
    # The URL is a credential for one object for a short while: no cache may keep it.
    return json_response(
        200, wiring.runtime_service().artifact_upload(capability, name, body), headers=NO_STORE
    )


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
