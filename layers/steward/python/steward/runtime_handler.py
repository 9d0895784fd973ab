"""Runtime routes Lambda: `POST /v1/runtime/exchange`, a runtime's one-time ticket for its
capability, and `POST /v1/runtime/github-token`, its capability for an installation token
scoped to its task's repository (DESIGN sections 5, 6).

Both routes are outside the user authorizer: the ticket, or the capability, is the credential,
so no JWT claims are read. Neither the ticket, the capability, the token nor the request
body is ever logged. Settings: `steward.config` (functions tagged `runtime`).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field

from steward import wiring
from steward.api.http import check_body_size, install_error_handlers, json_response
from steward.api.requests import parse_body
from steward.observability import logger_for, tracer_for

logger = logger_for("runtime")
tracer = tracer_for("runtime")
app = APIGatewayHttpResolver()
install_error_handlers(app, logger)

EXCHANGE_PATH = "/v1/runtime/exchange"
GITHUB_TOKEN_PATH = "/v1/runtime/github-token"  # noqa: S105 - a route, not a secret
MAX_BODY_BYTES = 4096  # {"ticket": "<43 characters>"}; anything far bigger is not an exchange


class ExchangeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ticket: str = Field(min_length=1)


@app.post(EXCHANGE_PATH)
def exchange() -> Response[str]:
    raw = app.current_event.body
    check_body_size(raw, MAX_BODY_BYTES)
    body = parse_body(raw, ExchangeBody)
    result = wiring.minter().exchange(body.ticket)
    logger.info("capability minted", extra={"task_id": result["task_id"], "expires_at": result["expires_at"]})
    return json_response(200, result)


@app.post(GITHUB_TOKEN_PATH)
def github_token() -> Response[str]:
    check_body_size(app.current_event.body, MAX_BODY_BYTES)
    result = wiring.github_tokens().issue(app.current_event.headers.get("authorization"))
    logger.info(
        "github token issued",
        extra={"repository": result["repository"], "expires_at": result["expires_at"]},
    )
    # A credential: no cache may keep it.
    return json_response(200, result, headers={"Cache-Control": "no-store"})


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
